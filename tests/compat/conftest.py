"""Fixtures running RocketMQ's own clients from their venvs: the C++ client (PyPI
rocketmq==0.4.4) and the RocketMQ 5 Python client (rocketmq-python-client==5.1.2)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from .venv import cpp_client_python, v5_client_python

WORKER = Path(__file__).with_name("cpp_client_worker.py")
V5_WORKER = Path(__file__).with_name("v5_client_worker.py")


@pytest.fixture(scope="session")
def cpp_python() -> Path:
    return cpp_client_python()


def worker_caller(python: Path, worker: Path, tmp_path: Path, what: str):
    """A function running `worker` with `python`; it returns the worker's JSON output."""
    home = tmp_path / "home"  # the clients write their logs under $HOME/logs
    home.mkdir(exist_ok=True)

    def call(*args, timeout=120):
        proc = subprocess.run([str(python), str(worker), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": str(home)}, cwd=tmp_path)
        assert proc.returncode == 0, f"{what} worker failed:\n{proc.stderr[-3000:]}"
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return call


@pytest.fixture
def cpp(cpp_python, tmp_path):
    """Run the C++ client worker; returns its JSON output."""
    return worker_caller(cpp_python, WORKER, tmp_path, "C++ client")


@pytest.fixture(scope="session")
def v5_python() -> Path:
    return v5_client_python()


@pytest.fixture
def v5(v5_python, tmp_path):
    """Run the RocketMQ 5 client worker; returns its JSON output."""
    return worker_caller(v5_python, V5_WORKER, tmp_path, "RocketMQ 5 client")
