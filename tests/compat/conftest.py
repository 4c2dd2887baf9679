"""A separate venv with RocketMQ's C++ client (PyPI rocketmq==0.4.4), made once and reused."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

VENV = Path(os.environ.get("LEDGERMQ_COMPAT_VENV",
                           Path(__file__).resolve().parents[2] / ".cache" / "rocketmq-0.4.4"))
WORKER = Path(__file__).with_name("cpp_client_worker.py")


@pytest.fixture(scope="session")
def cpp_python() -> Path:
    py = VENV / "bin" / "python"
    marker = VENV / ".ready"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "rocketmq==0.4.4"], check=True)
        marker.touch()
    return py


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
