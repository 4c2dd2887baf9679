"""Real `ledgermq dev` processes on 127.0.0.1 with ephemeral ports, for tests."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

FAST_DELAYS = " ".join(["0.2s"] * 18)  # delay levels short enough for retry tests


class DevProcess:
    def __init__(self, data: Path, conf: dict[str, str] | None = None,
                 program: list[str] | None = None):
        self.data = data
        # what runs the `ledgermq` CLI (a benchmark's floor runs it patched)
        self.program = program or [sys.executable, "-m", "ledgermq"]
        # small preallocated files: a test run starts many brokers
        self.conf = {"messageDelayLevel": FAST_DELAYS, "diskMaxUsedSpaceRatio": "100",
                     "mappedFileSizeCommitLog": str(8 << 20), "maxHashSlotNum": "20000",
                     "maxIndexNum": "80000", "mappedFileSizeConsumeQueue": str(20 * 30000),
                     **(conf or {})}
        self.proc: subprocess.Popen | None = None
        self.namesrv = self.broker = ""

    def start(self, namesrv_port: int = 0, port: int = 0) -> "DevProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        conf = self.data / "broker.conf"
        conf.write_text("".join(f"{k}={v}\n" for k, v in self.conf.items()))
        cmd = [*self.program, "dev", "-c", str(conf), "--data",
               str(self.data / "store"), "--namesrv-port", str(namesrv_port), "--port",
               str(port), "--json"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(
            self.data / "dev.log", "ab"), text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("ledgermq dev did not start: " +
                               (self.data / "dev.log").read_text()[-2000:])
        self.ready = ready = json.loads(line)
        self.namesrv, self.broker = ready["namesrv"], ready["broker"]
        return self

    def stop(self, sig=signal.SIGTERM) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(timeout=5)

    @property
    def ports(self) -> tuple[int, int]:
        return int(self.namesrv.rsplit(":", 1)[1]), int(self.broker.rsplit(":", 1)[1])


@pytest.fixture
def dev(tmp_path):
    procs: list[DevProcess] = []

    def start(conf: dict[str, str] | None = None, data: Path | None = None, **ports):
        p = DevProcess(data or tmp_path / f"dev{len(procs)}", conf).start(**ports)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.stop()
