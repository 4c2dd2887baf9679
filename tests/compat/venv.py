"""A separate venv with RocketMQ's C++ client (PyPI rocketmq==0.4.4), made once and reused
(its package is also called `rocketmq`, so it never shares a venv with anything)."""
import os
import subprocess
import sys
from pathlib import Path

VENV = Path(os.environ.get("LEDGERMQ_COMPAT_VENV",
                           Path(__file__).resolve().parents[2] / ".cache" / "rocketmq-0.4.4"))


def cpp_client_python() -> Path:
    """That venv's python, made first if it is not there yet."""
    py = VENV / "bin" / "python"
    marker = VENV / ".ready"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "rocketmq==0.4.4"], check=True)
        marker.touch()
    return py
