"""Fixtures running RocketMQ's C++ client (PyPI rocketmq==0.4.4) from its own venv."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from .venv import cpp_client_python

WORKER = Path(__file__).with_name("cpp_client_worker.py")


@pytest.fixture(scope="session")
def cpp_python() -> Path:
    return cpp_client_python()


@pytest.fixture
def cpp(cpp_python, tmp_path):
    """Run the C++ client worker; returns its JSON output."""
    home = tmp_path / "home"  # the C++ client writes its logs under $HOME/logs
    home.mkdir()

    def call(*args, timeout=120):
        proc = subprocess.run([str(cpp_python), str(WORKER), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": str(home)}, cwd=tmp_path)
        assert proc.returncode == 0, f"C++ client worker failed:\n{proc.stderr[-3000:]}"
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return call
