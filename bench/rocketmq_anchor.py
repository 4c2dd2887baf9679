"""Apache RocketMQ itself as the anchor (#29): its name server, controllers and brokers from
Maven Central (bench/anchors/rocketmq/pom.xml), started with `java -cp` beside ledgermq on
127.0.0.1, in the layouts ledgermq runs (bench/rocketmq_layouts.py), and RocketMQ's own Java
client driving either side: the official benchmark Producer and BenchDriver.java.

The classpath is resolved once by Maven into .cache/rocketmq-anchor/ and reused. Every
process started here is stopped by the PID it got; each one logs into its own directory.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.rocketmq_layouts import LAYOUTS, Node
from ledgermq.client.admin import Admin
from ledgermq.localcluster.cluster import free_ports

ROOT = Path(__file__).resolve().parents[1]
POM_DIR = ROOT / "bench" / "anchors" / "rocketmq"
CACHE = ROOT / ".cache" / "rocketmq-anchor"
DRIVER = POM_DIR / "BenchDriver.java"
# RocketMQ 5's gRPC client for Java shades its own gRPC: a classpath of its own
GRPC_CLIENT_POM_DIR = POM_DIR / "grpc-client"
GRPC_DRIVER = POM_DIR / "GrpcDriver.java"
# RocketMQ's own fast-try scripts: 512 MB for a name server (and a controller), 1 GB for a broker
# (a proxy in local mode holds its broker: the broker's heap)
HEAPS = {"namesrv": "512m", "controller": "512m", "broker": "1g", "proxy": "1g"}
MAINS = {"namesrv": "org.apache.rocketmq.namesrv.NamesrvStartup",
         "controller": "org.apache.rocketmq.controller.ControllerStartup",
         "broker": "org.apache.rocketmq.broker.BrokerStartup",
         "proxy": "org.apache.rocketmq.proxy.ProxyStartup"}
# what each kind prints once it serves (a controller says nothing until its group elects)
READY = {"namesrv": "boot success", "broker": "boot success",
         "proxy": "rocketmq-proxy startup successfully"}
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
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} is not on this machine's PATH"
    return None


def classpath(pom_dir: Path = POM_DIR) -> str:
    """The classpath of a pom's artifacts (RocketMQ's by default), resolved by Maven once
    (cached beside the pom's hash)."""
    why = missing_tools()
    if why:
        raise AnchorUnavailable(why)
    pom = (pom_dir / "pom.xml").read_bytes()
    out = CACHE / f"classpath-{hashlib.sha256(pom).hexdigest()[:12]}.txt"
    if not out.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mvn", "-q", "-B", "-f", str(pom_dir / "pom.xml"),
                            "dependency:build-classpath", f"-Dmdep.outputFile={out}"],
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0 or not out.exists():
            raise AnchorUnavailable("Maven could not resolve RocketMQ: " +
                                    (r.stdout + r.stderr)[-800:])
    return out.read_text().strip()


def compile_java(source: Path, into: Path, cp: str = "") -> str:
    """`source`'s classes, compiled against `cp` (RocketMQ's classpath by default) once per
    version of the source (into/<hash>/), as a classpath entry."""
    out = into / hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    if not (out / f"{source.stem}.class").exists():
        out.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["javac", "-cp", cp or classpath(), "-d", str(out), str(source)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AnchorUnavailable(f"javac {source.name}: {r.stderr[-3000:]}")
    return str(out)


def wait_for_output(path: Path, text: str, proc: subprocess.Popen, timeout: float) -> None:
    """Until `text` appears in `path` (a process's stdout), or fail saying why."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            raise AnchorUnavailable(f"{proc.args[-3]} exited ({proc.returncode}): "
                                    f"{path.read_text(errors='replace')[-800:]}")
        time.sleep(0.2)  # polling the process's output file, with a deadline
    raise AnchorUnavailable(f"no '{text}' in {path} within {timeout:.0f} s")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False


def broker_ports(n: int) -> list[int]:
    """`n` listen ports whose neighbours are free too: a RocketMQ broker also binds
    port-2 (its second, "fast" channel) and, unless told otherwise, port+1 (HA)."""
    out: list[int] = []
    for _ in range(200):
        if len(out) == n:
            return out
        (p,) = free_ports(1)
        if p not in out and all(_free(q) and q not in out for q in (p - 2, p + 1)):
            out.append(p)
    raise AnchorUnavailable(f"no {n} free broker ports with free neighbours")


def node_command(node: Node, d: Path) -> tuple[list[str], dict[str, str]]:
    """The java command line and environment that start `node` in its directory `d`
    (its .conf and logback files written there)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "logback.xml").write_text(LOGBACK)
    conf = d / f"{node.kind}.conf"
    conf.write_text("".join(f"{k}={v}\n" for k, v in node.conf.items()))
    heap = HEAPS[node.kind]
    argv = ["java", f"-Xms{heap}", f"-Xmx{heap}", *OPENS,
            f"-Drocketmq.home.dir={d}", f"-Drmq.logback.configurationFile={d / 'logback.xml'}",
            f"-Drmqlog={d / 'rocketmq.log'}", "-cp", classpath(), MAINS[node.kind]]
    if node.kind == "proxy":
        (d / "proxy.json").write_text(json.dumps(node.proxy))
        if node.proxy and node.proxy.get("proxyMode") == "cluster":  # brokers of its own
            argv += ["-pm", "cluster", "-pc", str(d / "proxy.json")]
        else:  # local mode: the broker runs inside the proxy's process
            argv += ["-pm", "local", "-bc", str(conf), "-pc", str(d / "proxy.json")]
    else:
        argv += ["-c", str(conf)]
    return argv, {"ROCKETMQ_HOME": str(d), "PATH": "/usr/bin:/bin:/usr/sbin:/sbin"}


@dataclass
class RocketMQ:
    """One of LAYOUTS (single, sync, dledger, controller) of Apache RocketMQ, as
    `with RocketMQ(dir, layout) as rmq`; `rmq.namesrv` is its name server's address."""
    workdir: Path
    layout: str = "single"
    namesrv: str = ""
    nodes: list[Node] = field(default_factory=list)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __enter__(self) -> "RocketMQ":
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _start(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"no layout {self.layout} (have: {', '.join(LAYOUTS)})")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.nodes = LAYOUTS[self.layout](self.workdir, free_ports, broker_ports)
        self.namesrv = next(n.addr for n in self.nodes if n.kind == "namesrv")
        for node in self.nodes:  # name server, controllers, then brokers
            self.start_node(node)
        asyncio.run(self.master())

    def start_node(self, node: Node) -> None:
        d = self.workdir / node.name
        argv, env = node_command(node, d)
        with open(d / "stdout.log", "wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=d, env=env)
        self.procs[node.name] = proc
        if node.kind in READY:
            wait_for_output(d / "stdout.log", READY[node.kind], proc, 120)

    async def master(self, timeout: float = 60.0, not_at: str = "") -> str:
        """The group's master (or DLedger leader) address, once the name server has one
        (other than `not_at`)."""
        end = time.monotonic() + timeout
        async with Admin(self.namesrv) as admin:
            while time.monotonic() < end:
                try:
                    addrs = await admin.master_addrs()
                except Exception:  # the name server is up but knows no broker yet
                    addrs = {}
                if addrs and list(addrs.values())[0] != not_at:
                    return list(addrs.values())[0]
                await asyncio.sleep(0.2)
        raise AnchorUnavailable(f"no master registered within {timeout:.0f} s")

    def node_at(self, addr: str) -> Node:
        return next(n for n in self.nodes if n.addr == addr)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items() if p.poll() is None}

    def kill(self, name: str) -> None:
        """kill -9 of one process, by the PID it got."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self) -> None:
        for proc in reversed(list(self.procs.values())):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()


@dataclass
class FrontProxy(RocketMQ):
    """RocketMQ 5's gRPC proxy in cluster mode, in front of the brokers another name server
    routes to (ledgermq's): `with FrontProxy(dir, front_of=namesrv) as p`, then RocketMQ 5
    clients use `p.grpc`. The proxy speaks remoting to those brokers (sends, POP, acks)."""
    front_of: str = ""
    cluster: str = "DefaultCluster"
    grpc: str = ""
    settings: dict[str, object] = field(default_factory=dict)  # more rmq-proxy.json keys

    def _start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        grpc, remoting = free_ports(2)
        self.namesrv, self.grpc = self.front_of, f"127.0.0.1:{grpc}"
        self.nodes = [Node("proxy", "proxy", self.grpc, {}, {
            "rocketMQClusterName": self.cluster, "namesrvAddr": self.front_of,
            "grpcServerPort": grpc, "remotingListenPort": remoting, "proxyMode": "cluster",
            **self.settings})]
        self.start_node(self.nodes[0])


REPORT = re.compile(r"(?:Send Total: (\d+) \| )?Send TPS: (\d+) \| Max RT\(ms\): (\d+) \| "
                    r"Average RT\(ms\):\s+([\d.]+|NaN) \| Send Failed: (\d+) \| Response Failed: (\d+)")
SHORT_COMPLETE = re.compile(r"\[Complete\] Send Total: (\d+) Send Failed: (\d+) "
                            r"Response Failed: (\d+)")


def producer_argv(namesrv: str, *, topic: str = "BenchmarkTest", threads: int = 4,
                  size: int = 100, quantity: int = 0, report_ms: int = 1000) -> list[str]:
    """RocketMQ's benchmark Producer (one message a request, its binary-header client)
    against a name server. With `quantity` it prints one "[Complete]" row at its end (and
    no per-interval rows: its output is block-buffered on a pipe)."""
    argv = ["java", "-Xmx512m", "-cp", classpath(),
            "org.apache.rocketmq.example.benchmark.Producer", "-n", namesrv, "-t", topic,
            "-w", str(threads), "-s", str(size), "-ri", str(report_ms)]
    return argv + (["-q", str(quantity)] if quantity else [])


def producer_rows(text: str) -> list[dict]:
    """The report rows (TPS, RT, failures) in the benchmark Producer's output; a run that
    ended before its first report interval prints only its totals (no TPS or RT), one whose
    snapshots saw no send complete prints an average RT of NaN."""
    return [{"tps": int(m[2]), "max_rt_ms": int(m[3]), "avg_rt_ms": float(m[4]),
             "send_failed": int(m[5]), "response_failed": int(m[6]),
             **({"total": int(m[1])} if m[1] else {})}
            for m in REPORT.finditer(text)] + \
        [{"total": int(m[1]), "send_failed": int(m[2]), "response_failed": int(m[3])}
         for m in SHORT_COMPLETE.finditer(text)]


def benchmark_producer(namesrv: str, *, topic: str = "BenchmarkTest", threads: int = 4,
                       size: int = 100, quantity: int = 100, seconds: float = 120) -> list[dict]:
    """Run the benchmark Producer until it sent `quantity` messages: its report rows."""
    r = subprocess.run(producer_argv(namesrv, topic=topic, threads=threads, size=size,
                                     quantity=quantity),
                       capture_output=True, text=True, timeout=seconds)
    rows = producer_rows(r.stdout + r.stderr)
    if not rows:
        raise RuntimeError(f"the benchmark Producer printed no report (exit {r.returncode}): "
                           f"{(r.stdout + r.stderr)[-3000:]}")
    return rows


def driver_argv(*args: object) -> list[str]:
    """The java command line running BenchDriver.java's `args` (compiled once)."""
    cp = compile_java(DRIVER, CACHE / "driver") + os.pathsep + classpath()
    return ["java", "-Xmx512m", "-cp", cp, "BenchDriver", *map(str, args)]


def grpc_driver_argv(*args: object) -> list[str]:
    """The java command line running GrpcDriver.java's `args` on RocketMQ 5's gRPC client
    for Java (compiled once against that client's classpath)."""
    cp = classpath(GRPC_CLIENT_POM_DIR)
    return ["java", "-Xmx512m", f"-Drocketmq.log.root={CACHE / 'client-logs'}", "-cp",
            compile_java(GRPC_DRIVER, CACHE / "grpc-driver", cp) + os.pathsep + cp,
            "GrpcDriver", *map(str, args)]


def bench_driver(*args: object, timeout: float = 600) -> list[dict]:
    """Run one BenchDriver command to its end: the JSON lines it printed."""
    r = subprocess.run(driver_argv(*args), capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"BenchDriver {args[0]} failed: {(r.stdout + r.stderr)[-2000:]}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
