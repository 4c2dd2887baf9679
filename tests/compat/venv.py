"""Separate venvs for RocketMQ's own Python clients, made once and reused: the C++ client
(PyPI rocketmq==0.4.4) and the official RocketMQ 5 client (rocketmq-python-client==5.1.2,
gRPC). Both install a package called `rocketmq`, so neither shares a venv."""
import fcntl
import os
import subprocess
import sys
from pathlib import Path

CACHE = Path(__file__).resolve().parents[2] / ".cache"
VENV = Path(os.environ.get("LEDGERMQ_COMPAT_VENV", CACHE / "rocketmq-0.4.4"))
V5_VENV = Path(os.environ.get("LEDGERMQ_V5_VENV", CACHE / "rocketmq-5.1.2"))


def _client_python(venv: Path, requirement: str) -> Path:
    """That venv's python, made first if it is not there yet (by one test process at a
    time: two xdist workers building it at once broke each other's pip)."""
    py = venv / "bin" / "python"
    marker = venv / ".ready"
    if not marker.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        with open(venv.parent / f".{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not marker.exists():
                subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)],
                               check=True)
                subprocess.run([str(py), "-m", "pip", "install", "-q", requirement],
                               check=True)
                marker.touch()
    return py


def cpp_client_python() -> Path:
    return _client_python(VENV, "rocketmq==0.4.4")


def v5_client_python() -> Path:
    return _client_python(V5_VENV, "rocketmq-python-client==5.1.2")
