"""Apache RocketMQ itself as the anchor (#29): its name server and broker from Maven
Central (bench/anchors/rocketmq/pom.xml), started with `java -cp` beside ledgermq on
127.0.0.1, and RocketMQ's own benchmark Producer driving either side.

The classpath is resolved once by Maven into .cache/rocketmq-anchor/ and reused. Every
process started here is stopped by the PID it got; each one logs into its own directory.
"""
from __future__ import annotations

import hashlib
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ledgermq.localcluster.cluster import free_ports

ROOT = Path(__file__).resolve().parents[1]
POM_DIR = ROOT / "bench" / "anchors" / "rocketmq"
CACHE = ROOT / ".cache" / "rocketmq-anchor"
# RocketMQ's own fast-try scripts: 512 MB for a name server, 1 GB for a broker
NAMESRV_HEAP, BROKER_HEAP = "512m", "1g"
# JDK 17 closes what RocketMQ's broker (and controller mode) reflect on
OPENS = ["--add-opens", "java.base/java.lang=ALL-UNNAMED",
         "--add-opens", "java.base/java.nio=ALL-UNNAMED",
         "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED"]
LOGBACK = """<configuration>
  <appender name="F" class="ch.qos.logback.core.FileAppender">
    <file>${rmqlog}</file>
    <encoder><pattern>%d %p %c{1} - %m%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="F"/></root>
</configuration>
"""


class AnchorUnavailable(RuntimeError):
    """Java or Maven is missing, or Maven could not resolve RocketMQ: said why."""


def missing_tools() -> str | None:
    """Why the anchor cannot run on this machine, or None."""
    for tool in ("java", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not on this machine's PATH"
    return None


def classpath() -> str:
    """RocketMQ's classpath, resolved by Maven once (cached beside the pom's hash)."""
    why = missing_tools()
    if why:
        raise AnchorUnavailable(why)
    pom = (POM_DIR / "pom.xml").read_bytes()
    out = CACHE / f"classpath-{hashlib.sha256(pom).hexdigest()[:12]}.txt"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mvn", "-q", "-B", "-f", str(POM_DIR / "pom.xml"),
                            "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not out.exists():
            raise AnchorUnavailable("Maven could not resolve RocketMQ: " +
                                    (r.stdout + r.stderr)[-800:])
    return out.read_text().strip()


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    """Until `text` appears in `path` (a process's stdout), or fail saying why."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AnchorUnavailable(f"{proc.args[-1]} exited ({proc.returncode}): "
                                    f"{path.read_text(errors='replace')[-800:]}")
        time.sleep(0.2)  # polling the process's output file, with a deadline
    raise AnchorUnavailable(f"no '{text}' in {path} within {timeout:.0f} s")


@dataclass
class SingleBroker:
    """A RocketMQ name server and one ASYNC_MASTER broker, as `with SingleBroker(dir)`."""
    workdir: Path
    namesrv: str = ""
    broker: str = ""
    procs: list[subprocess.Popen] = field(default_factory=list)

    def __enter__(self) -> "SingleBroker":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _java(self, name: str, heap: str, main: str, conf: Path, cp: str) -> subprocess.Popen:
        d = self.workdir / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "logback.xml").write_text(LOGBACK)
        argv = ["java", f"-Xms{heap}", f"-Xmx{heap}", *OPENS,
                f"-Drocketmq.home.dir={d}", f"-Drmq.logback.configurationFile={d / 'logback.xml'}",
                f"-Drmqlog={d / 'rocketmq.log'}", "-cp", cp, main, "-c", str(conf)]
        with open(d / "stdout.log", "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=d,
                                    env={"ROCKETMQ_HOME": str(d), "PATH": "/usr/bin:/bin"})
        self.procs.append(proc)
        return proc

    def _start(self) -> None:
        cp = classpath()
        ns_port, broker_port = free_ports(2)  # the broker also takes port+1 (HA) and -2 (VIP)
        self.namesrv, self.broker = f"127.0.0.1:{ns_port}", f"127.0.0.1:{broker_port}"
        self.workdir.mkdir(parents=True, exist_ok=True)
        ns_conf = self.workdir / "namesrv.conf"
        ns_conf.write_text(f"listenPort={ns_port}\n")
        ns = self._java("namesrv", NAMESRV_HEAP, "org.apache.rocketmq.namesrv.NamesrvStartup",
                        ns_conf, cp)
        _wait_for(self.workdir / "namesrv" / "stdout.log", "boot success", ns, 60)
        store = self.workdir / "broker" / "store"
        b_conf = self.workdir / "broker.conf"
        b_conf.write_text("\n".join([
            "brokerClusterName=AnchorCluster", "brokerName=anchor-a", "brokerId=0",
            f"listenPort={broker_port}", f"namesrvAddr={self.namesrv}",
            "brokerIP1=127.0.0.1", "brokerIP2=127.0.0.1",
            f"storePathRootDir={store}", f"storePathCommitLog={store / 'commitlog'}",
            f"mappedFileSizeCommitLog={64 << 20}", "autoCreateTopicEnable=true",
            "brokerRole=ASYNC_MASTER", "flushDiskType=ASYNC_FLUSH", ""]))
        broker = self._java("broker", BROKER_HEAP, "org.apache.rocketmq.broker.BrokerStartup",
                            b_conf, cp)
        _wait_for(self.workdir / "broker" / "stdout.log", "boot success", broker, 120)

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()


REPORT = re.compile(r"Send TPS: (\d+) \| Max RT\(ms\): (\d+) \| Average RT\(ms\):\s+([\d.]+) \| "
                    r"Send Failed: (\d+) \| Response Failed: (\d+)")


def benchmark_producer(namesrv: str, *, topic: str = "BenchmarkTest", threads: int = 4,
                       size: int = 100, quantity: int = 0, seconds: float = 30,
                       report_ms: int = 1000) -> list[dict]:
    """Run RocketMQ's benchmark Producer (one message a request, its binary-header
    client) against a name server: its report rows (TPS, RT, failures), one per
    `report_ms`, until `quantity` messages were sent or `seconds` passed."""
    argv = ["java", "-Xmx512m", "-cp", classpath(),
            "org.apache.rocketmq.example.benchmark.Producer", "-n", namesrv, "-t", topic,
            "-w", str(threads), "-s", str(size), "-ri", str(report_ms)]
    if quantity:
        argv += ["-q", str(quantity)]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds)
        text = r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    return [{"tps": int(m[1]), "max_rt_ms": int(m[2]), "avg_rt_ms": float(m[3]),
             "send_failed": int(m[4]), "response_failed": int(m[5])}
            for m in REPORT.finditer(text)]
