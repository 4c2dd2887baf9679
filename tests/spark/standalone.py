"""A real Spark standalone cluster for tests: a master and workers as separate JVM
processes started from the pyspark install (`bin/spark-class`, which execs the JVM, so the
PID we hold is the process to stop), bound to 127.0.0.1, each with its own work and log
directory; and a clean Python for the driver and the executors, which sees pyspark and
ledgermq's dependencies but not ledgermq itself, so the package must come with the job."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import urllib.request
import zipfile
from pathlib import Path

from ..wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledgermq", "pyspark_ledgermq")


def spark_home() -> Path:
    import pyspark
    return Path(pyspark.__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def base_env(home: Path, conf_dir: Path) -> dict[str, str]:
    """The environment of every Spark process: our SPARK_HOME, an empty conf dir, every
    listener on 127.0.0.1, and no PYTHONPATH (executors inherit a worker's environment;
    they must not find ledgermq in this checkout)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    conf_dir.mkdir(parents=True, exist_ok=True)
    env.update(SPARK_HOME=str(home), SPARK_CONF_DIR=str(conf_dir), SPARK_LOCAL_IP="127.0.0.1",
               SPARK_LOCAL_HOSTNAME="127.0.0.1")
    return env


def package_zip(dest: Path) -> Path:
    """ledgermq and pyspark_ledgermq, sources only, as `--py-files` ships them."""
    with zipfile.ZipFile(dest, "w", zipfile.ZIP_DEFLATED) as z:
        for pkg in PACKAGES:
            for f in sorted((ROOT / pkg).rglob("*.py")):
                z.write(f, f.relative_to(ROOT).as_posix())
    return dest


def clean_python(dest: Path) -> Path:
    """A venv whose only extra path is this venv's site-packages, added by a .pth line:
    a directory named there is not a site dir, so its own .pth files (the editable
    install of ledgermq among them) are not run. `import ledgermq` fails in it."""
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv",
                    "--without-pip", str(dest)], check=True)
    py = dest / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], check=True, capture_output=True, text=True)
    Path(site.stdout.strip(), "ledgermq-deps.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n")
    return py


class StandaloneCluster:
    """`start()` the master and `workers` workers (`cores` and `memory` each) and wait until
    every worker registered; `stop()` ends each process by its PID."""

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "512m"):
        self.base, self.home = base, spark_home()
        self.env = base_env(self.home, base / "conf")
        self.workers, self.cores, self.memory = workers, cores, memory
        self.port, self.ui_port = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, cls: str, *args: str) -> None:
        log = self.base / "logs" / f"{name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        self.procs[name] = subprocess.Popen(
            [str(self.home / "bin" / "spark-class"), cls, *args], env=self.env,
            cwd=self.base, stdin=subprocess.DEVNULL, stdout=log.open("ab"),
            stderr=subprocess.STDOUT)

    def worker_dir(self, i: int) -> Path:
        return self.base / f"worker-{i}"

    def start(self, timeout: float = 90) -> "StandaloneCluster":
        self._spawn("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.ui_port))
        for i in range(self.workers):
            self.worker_dir(i).mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                        "--host", "127.0.0.1", "--webui-port", "0", "--cores",
                        str(self.cores), "--memory", self.memory, "--work-dir",
                        str(self.worker_dir(i)))
        wait_until(lambda: self._alive_workers() == self.workers and self._running(),
                   lambda: f"{self.workers} workers registered with {self.url} "
                           f"(logs: {self.tail_logs()})", timeout=timeout, interval=0.5)
        return self

    def _running(self) -> bool:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise AssertionError(f"Spark processes exited: {dead}: {self.tail_logs()}")
        return True

    def state(self) -> dict:
        """The master's JSON status page: workers, active and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json", timeout=5) as r:
            return json.load(r)

    def _alive_workers(self) -> int:
        self._running()
        return sum(w["state"] == "ALIVE" for w in self.state()["workers"])

    def tail_logs(self, chars: int = 1500) -> str:
        out = []
        for log in sorted((self.base / "logs").glob("*.log")):
            out.append(f"--- {log.name}\n{log.read_text(errors='replace')[-chars:]}")
        return "\n".join(out)

    def stop(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
