"""`ledgermq cluster up|status|down|start|stop`: name servers and replica groups as real
local processes, for trying things out and for real-process tests."""
from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .acl import acl_broker_conf, cluster_signer, make_cluster_acl
from .conf import broker_conf, controller_conf
from .tls import cluster_client_tls, make_cluster_tls, tls_conf_line, with_tls

MODES = ("dledger", "sync", "async", "checkpoint", "controller")


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free now, below the kernel's ephemeral range: a process that binds
    port 0 (a Spark executor, a client's connection) never takes one of them while the
    server it belongs to is down for a restart. LEDGERMQ_PORT_RANGE (`lo-hi`) narrows
    them to a range of the caller's own (each of several test workers takes one)."""
    low, high = 10_000, _ephemeral_range()[0]
    if os.environ.get("LEDGERMQ_PORT_RANGE"):
        given = os.environ["LEDGERMQ_PORT_RANGE"]
        lo, _, hi = given.partition("-")
        if not (lo.isdigit() and hi.isdigit() and 0 < int(lo) < int(hi) <= 65536):
            raise ValueError(f"LEDGERMQ_PORT_RANGE={given!r}: expected LO-HI, "
                             "1 <= LO < HI <= 65536")
        low, high = int(lo), int(hi)
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(100 * n + 1000):  # a crowded machine: give up rather than loop forever
        if len(ports) == n:
            return ports
        port = rng.randrange(low, high)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    raise RuntimeError(f"found only {len(ports)} of {n} free ports in {low}-{high}")


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    return max(lo, 12_000), hi


def _local_popen(argv: list[str], **kw) -> subprocess.Popen:
    return subprocess.Popen(argv, start_new_session=True, **kw)


@dataclass(frozen=True)
class Placement:
    """Where each process of a cluster lives: `addr(name)` is the address it listens on and
    is reached at, `popen(name)` how it is started (a Popen-like call taking argv and
    keyword arguments). The default is every process on 127.0.0.1, started here; the chaos
    runner places each on a test host of its own."""
    addr: Callable[[str], str] = lambda name: "127.0.0.1"
    popen: Callable[[str], Callable[..., subprocess.Popen]] = lambda name: _local_popen


LOCAL = Placement()


def spawn(args: list[str], workdir: Path, name: str = "", place: Placement = LOCAL
          ) -> subprocess.Popen:
    """Start `ledgermq ARGS` for process `name`: stdout (its ready line) and the log in
    `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "stdout", "wb") as out, open(workdir / "server.log", "ab") as err:
        return place.popen(name)([sys.executable, "-m", "ledgermq", *args],
                                 stdout=out, stderr=err)


def wait_ready(workdir: Path, proc: subprocess.Popen, timeout: float = 30) -> dict:
    end = time.monotonic() + timeout
    out = workdir / "stdout"
    while time.monotonic() < end:
        text = out.read_text() if out.exists() else ""
        if text.strip():
            return json.loads(text.splitlines()[0])
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}; see {workdir}/server.log")
        time.sleep(0.05)
    raise RuntimeError(f"no ready line from {workdir} within {timeout}s")


def group_names(groups: int) -> list[str]:
    """broker-a, broker-b, ...: RocketMQ's brokerName of each replica group."""
    if not 1 <= groups <= 26:
        raise ValueError(f"--groups must be in 1..26, not {groups}")
    return [f"broker-{chr(ord('a') + g)}" for g in range(groups)]


def node_name(groups: int, g: int, i: int) -> str:
    """n0, n1, ... for one group (as before); a-n0, b-n1, ... for several."""
    return f"n{i}" if groups == 1 else f"{chr(ord('a') + g)}-n{i}"


def namesrv_names(k: int) -> list[str]:
    return ["namesrv"] if k == 1 else [f"namesrv{j}" for j in range(k)]


def control_names(k: int) -> list[str]:
    """One control node, or a control node group of k."""
    return ["control"] if k == 1 else [f"control{j}" for j in range(k)]


def names(mode: str, replicas: int, groups: int = 1, namesrvs: int = 1,
          controllers: int = 1) -> dict[str, str]:
    """Every process `up` starts for this layout, by name, with its role as the chaos
    schedule names roles: namesrv, controlnode, controller, broker:GROUP."""
    out = {n: "namesrv" for n in namesrv_names(namesrvs)}
    if mode == "checkpoint":
        out.update({n: "controlnode" for n in control_names(controllers)})
    if mode == "controller":
        out.update({f"c{k}": "controller" for k in range(controllers)})
    for g, group in enumerate(group_names(groups)):
        out.update({node_name(groups, g, i): f"broker:{group}" for i in range(replicas)})
    return out


def up(mode: str, replicas: int, d: Path, extra: dict[str, str] | None = None,
       controllers: int = 1, groups: int = 1, namesrvs: int = 1,
       place: Placement = LOCAL, grpc: bool = False, tls: str = "", acl: bool = False) -> dict:
    """Start K name servers, N replica groups of `mode` (every broker registers with every
    name server) and what the mode needs beside them: a control node or, with `controllers`
    above 1, a control node group (checkpoint) or one controller group (controller), shared
    by every group as RocketMQ shares them. `grpc`:
    each broker also serves RocketMQ 5 clients on a port of its own (`grpcPort`). `tls`:
    "enforcing" or "permissive" on every port, every link over TLS (localcluster/tls.py).
    `acl`: RocketMQ's ACL on every broker, with one admin account (localcluster/acl.py)."""
    if mode not in MODES:
        raise ValueError(f"mode {mode} is not available yet (have: {', '.join(MODES)})")
    group_names(groups)
    if namesrvs < 1:
        raise ValueError(f"--namesrvs must be at least 1, not {namesrvs}")
    d.mkdir(parents=True, exist_ok=True)
    if (d / "cluster.json").exists() and any(pid_alive(p["pid"]) for p in
                                             json.loads((d / "cluster.json").read_text())["processes"]):
        raise RuntimeError(f"a cluster is already running in {d}; `ledgermq cluster down` first")
    started: list[subprocess.Popen] = []
    try:
        acl_state = make_cluster_acl(d) if acl else None
        if acl_state:
            extra = {**acl_broker_conf(acl_state), **(extra or {})}
        state = _up(mode, replicas, d, extra, started, controllers, groups, namesrvs, place,
                    grpc, tls)
        if acl_state:
            state["acl"] = acl_state
            (d / "cluster.json").write_text(json.dumps(state, indent=1))
        return state
    except BaseException:
        for proc in started:  # leave nothing running behind a failed start
            proc.kill()
            proc.wait()
        raise


def _start_all(d: Path, entries: list[dict], started: list, place: Placement = LOCAL
               ) -> list[dict]:
    """Spawn every entry (name, args, ...) at once, then wait for each one's ready line."""
    procs = []
    for e in entries:
        e["host"] = place.addr(e["name"])
        procs.append(spawn(e["args"], d / e["name"], e["name"], place))
        started.append(procs[-1])
    for e, proc in zip(entries, procs):
        wait_ready(d / e["name"], proc)
        e["pid"] = proc.pid
    return entries


def _up(mode: str, replicas: int, d: Path, extra: dict[str, str] | None,
        started: list, controllers: int, groups: int, namesrvs: int,
        place: Placement, grpc: bool, tls: str) -> dict:
    got = iter(free_ports(2 * namesrvs + 2 * controllers + 4 * replicas * groups))
    ports = {"namesrvs": [next(got) for _ in range(namesrvs)],
             "namesrv_metrics": [next(got) for _ in range(namesrvs)],
             "controllers": [next(got) for _ in range(controllers)],  # or control nodes
             "controller_metrics": [next(got) for _ in range(controllers)]}
    at = place.addr
    ns_names = namesrv_names(namesrvs)
    c_names = [f"c{k}" for k in range(controllers)] if mode == "controller" else []
    cn_names = control_names(controllers) if mode == "checkpoint" else []
    control = ";".join(f"{at(n)}:{p}" for n, p in zip(cn_names, ports["controllers"]))
    hosts = {at(n) for n in names(mode, replicas, groups, namesrvs, controllers)}
    tls_file = make_cluster_tls(d, hosts, tls) if tls else None
    from ..peer_auth.core import write_secret
    extra = {"clusterSecretFile": str(write_secret(d / "cluster.secret")), **(extra or {})}
    procs = _start_all(d, [{"name": name, "kind": "namesrv", "port": port, "metricsPort": mport,
                            "args": with_tls(["namesrv", "--port", str(port), "--bind", at(name),
                                              "--metrics-port", str(mport), "--json"], "-c",
                                             tls_file)}
                           for name, port, mport in zip(ns_names, ports["namesrvs"],
                                                        ports["namesrv_metrics"])],
                       started, place)
    if mode == "checkpoint":  # the control node(s) serve every group (state per brokerName)
        group_peers = ";".join(f"{n}-{at(n)}:{p}" for n, p in zip(cn_names, ports["controllers"]))
        procs += _start_all(d, [{
            "name": n, "kind": "control", "port": port, "metricsPort": mport,
            "args": with_tls([
                "controlnode", *(["--peers", group_peers, "--id", n] if len(cn_names) > 1
                                 else ["--port", str(port), "--bind", at(n)]),
                "--metrics-port", str(mport), "--dir", str(d / n / "data"), "--json",
                "--cluster-secret-file", extra["clusterSecretFile"]], "--tls-config", tls_file)}
            for n, port, mport in zip(cn_names, ports["controllers"], ports["controller_metrics"])],
            started, place)
    if mode == "controller":  # one controller group serves every broker group
        entries = []
        for k, port in enumerate(ports["controllers"]):
            (d / f"c{k}").mkdir(parents=True, exist_ok=True)
            (d / f"c{k}" / "controller.conf").write_text(
                controller_conf(k, ports["controllers"], d, [at(c) for c in c_names],
                                ports["controller_metrics"][k], extra["clusterSecretFile"])
                + tls_conf_line(tls_file))
            entries.append({"name": f"c{k}", "kind": "controller", "port": port,
                            "metricsPort": ports["controller_metrics"][k], "args": [
                                "controller", "-c", str(d / f"c{k}" / "controller.conf"),
                                "--json"]})
        procs += _start_all(d, entries, started, place)
    entries = []
    for g, group in enumerate(group_names(groups)):
        gports = {**ports, "broker": [next(got) for _ in range(replicas)],
                  "repl": [next(got) for _ in range(replicas)],
                  "metrics": [next(got) for _ in range(replicas)]}
        if grpc:
            gports["grpc"] = [next(got) for _ in range(replicas)]
        peers = [at(node_name(groups, g, k)) for k in range(replicas)]
        for i in range(replicas):
            node = node_name(groups, g, i)
            conf = d / node / "broker.conf"
            conf.parent.mkdir(parents=True, exist_ok=True)
            addrs = {"self": at(node), "peers": peers, "namesrvs": [at(n) for n in ns_names],
                     "control": control, "controllers": [at(c) for c in c_names]}
            conf.write_text(broker_conf(mode, i, replicas, gports, d, extra, group, node,
                                        addrs) + tls_conf_line(tls_file))
            entries.append({"name": node, "kind": "broker", "group": group,
                            "port": gports["broker"][i], "replPort": gports["repl"][i],
                            "metricsPort": gports["metrics"][i],
                            **({"grpcPort": gports["grpc"][i]} if grpc else {}),
                            "args": ["broker", "-c", str(conf), "--json"]})
    procs += _start_all(d, entries, started, place)
    state = {"mode": mode, "groups": group_names(groups),
             "namesrv": ";".join(f"{at(n)}:{p}" for n, p in zip(ns_names, ports["namesrvs"])),
             "processes": procs, "clusterSecretFile": extra["clusterSecretFile"],
             **({"tls": {"ca": str(d / "tls" / "ca.pem"), "mode": tls}} if tls else {})}
    if mode == "checkpoint":
        state["controlNode"] = control
    if mode == "controller":
        state["controllerAddr"] = ";".join(f"{at(c)}:{p}"
                                           for c, p in zip(c_names, ports["controllers"]))
    (d / "cluster.json").write_text(json.dumps(state, indent=1))
    return state


class NoCluster(RuntimeError):
    """The directory holds no cluster `cluster up` started."""


def _state(d: Path) -> dict:
    try:
        return json.loads((d / "cluster.json").read_text())
    except FileNotFoundError:
        raise NoCluster(f"no cluster in {d} (no cluster.json there): start one with "
                        f"`ledgermq cluster up --dir {d}`") from None


def _process(state: dict, d: Path, name: str) -> dict:
    p = next((p for p in state["processes"] if p["name"] == name), None)
    if p is None:
        names = ", ".join(p["name"] for p in state["processes"])
        raise NoCluster(f"the cluster in {d} has no process {name!r} (it has {names})")
    return p


def start(d: Path, name: str, place: Placement = LOCAL) -> dict:
    """Start one process of the cluster again (after a kill or a stop), where `place`
    puts it (as `up` was given)."""
    state = _state(d)
    p = _process(state, d, name)
    deadline = time.monotonic() + 5  # a process just killed may take a moment to go
    while pid_alive(p["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if pid_alive(p["pid"]):
        raise RuntimeError(f"{name} (pid {p['pid']}) is still running")
    (d / name / "stdout").unlink(missing_ok=True)
    proc = spawn(p["args"], d / name, name, place)
    wait_ready(d / name, proc)
    p["pid"] = proc.pid
    (d / "cluster.json").write_text(json.dumps(state, indent=1))
    return p


restart = start  # the name the tests and earlier scripts use


def stop(d: Path, name: str, sig: int = signal.SIGTERM) -> bool:
    """Stop one process of the cluster; False if it was not running (or is not ours)."""
    p = _process(_state(d), d, name)
    return _stop([p], sig) == [name]


def pid_alive(pid: int) -> bool:
    """Is `pid` a running process (a reaped child of ours or anyone's zombie is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a child of ours that exited: reaped, and gone
        if os.waitpid(pid, os.WNOHANG)[0]:
            return False
    except ChildProcessError:
        pass
    return not _zombie(pid)  # another parent's zombie counts as gone too


def _zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] == "Z"


def status(d: Path) -> dict:
    state = _state(d)
    import asyncio
    from ..client.admin import Admin

    async def roles():
        out = {}
        async with Admin(state["namesrv"], tls=cluster_client_tls(state) or False) as a:
            a.instance.remoting.signer = cluster_signer(state) or a.instance.remoting.signer
            for p in state["processes"]:
                if "replPort" not in p or not pid_alive(p["pid"]):  # brokers only
                    continue
                try:
                    info = await a.broker_status(f"{p.get('host', '127.0.0.1')}:{p['port']}")
                    out[p["name"]] = info
                except Exception as e:  # noqa: BLE001 - report, don't fail the status
                    out[p["name"]] = {"error": str(e)}
        return out
    infos = asyncio.run(roles())
    for p in state["processes"]:
        p["alive"] = pid_alive(p["pid"])
        info = infos.get(p["name"], {})
        if "brokerRole" in info:
            p["role"] = info["brokerRole"]
        if "ha" in info:
            p["ha"] = json.loads(info["ha"])
        if "controller" in info:
            st = json.loads(info["controller"])
            p.update({"brokerId": st["brokerId"], "masterEpoch": st["masterEpoch"]})
        if "checkpoint" in info:
            p["epoch"] = json.loads(info["checkpoint"])["epoch"]
        if "dledger" in info:
            st = json.loads(info["dledger"])
            p.update({"role": st["role"], "term": st["term"], "leader": st["leader"],
                      "commit": st["commit"], "end": st["end"]})
    return state


MASTER_ROLES = {"LEADER", "MASTER", "SYNC_MASTER", "ASYNC_MASTER"}


def _groups(state: dict) -> dict[str, list[dict]]:
    """The brokers of each replica group (a cluster.json from before groups: one group)."""
    out: dict[str, list[dict]] = {}
    for p in state["processes"]:
        if "replPort" in p:
            out.setdefault(p.get("group", "broker-a"), []).append(p)
    return out


def health(state: dict) -> tuple[bool, str]:
    """Whether every group is whole (one master, every process up, a DLedger quorum), and a
    line saying so: "leader n0, term 2, 3/3 up, quorum ok" (one part per group, named, when
    there are several: "broker-a: master a-n0, 2/2 up; broker-b: no master, 0/2 up")."""
    groups = _groups(state)
    ok, parts = True, []
    for name, brokers in groups.items():
        whole, line = _group_health(state["mode"], brokers)
        ok &= whole
        parts.append(line if len(groups) == 1 else f"{name}: {line}")
    down = [p["name"] for p in state["processes"] if not p["alive"]]
    if down:
        parts.append("down: " + " ".join(down))
    return ok and not down, (", " if len(groups) == 1 else "; ").join(parts)


def _group_health(mode: str, brokers: list[dict]) -> tuple[bool, str]:
    up = [p for p in brokers if p["alive"]]
    masters = [p for p in up if p.get("role") in MASTER_ROLES]
    parts = []
    if len(masters) == 1:
        m = masters[0]
        era = _era(m)
        parts.append(f"{'leader' if m['role'] == 'LEADER' else 'master'} {m['name']}" +
                     (f", {era[0]} {era[1]}" if era else ""))
    else:
        parts.append("no master" if not masters else
                     "masters " + " ".join(p["name"] for p in masters))
    parts.append(f"{len(up)}/{len(brokers)} up")
    quorum = len(up) > len(brokers) // 2
    if mode == "dledger":
        parts.append("quorum ok" if quorum else "NO QUORUM")
    return len(masters) == 1 and len(up) == len(brokers) and quorum, ", ".join(parts)


def _era(p: dict) -> tuple[str, int] | None:
    for key, word in (("term", "term"), ("masterEpoch", "epoch"), ("epoch", "epoch")):
        if key in p:
            return word, p[key]
    return None


def lag(state: dict, p: dict) -> int | None:
    """Bytes a broker's log is behind its group's master's (DLedger: the leader's end)."""
    group = _groups(state).get(p.get("group", "broker-a"), [])
    master = next((m for m in group if m.get("role") in MASTER_ROLES and m["alive"]), None)
    if master is None or not p["alive"]:
        return None
    if "end" in p and "end" in master:
        return master["end"] - p["end"]
    if "maxOffset" in p.get("ha", {}) and "logEnd" in master.get("ha", {}):
        return master["ha"]["logEnd"] - p["ha"]["maxOffset"]
    return 0 if p is master else None


def down(d: Path) -> dict:
    """Stop every process of the cluster; says which it stopped."""
    state = _state(d)
    state["stopped"] = _stop(state["processes"], signal.SIGTERM)
    for p in state["processes"]:
        p["alive"] = False
    return state


def _ours(p: dict) -> bool:
    """Is the recorded pid still the process `up` started (not a reused pid)?"""
    try:
        cmdline = Path(f"/proc/{p['pid']}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.encode() for a in p.get("args", [])]
    return b"ledgermq" in cmdline and all(a in cmdline for a in args)


def _stop(procs: list[dict], sig: int) -> list[str]:
    """Signal each live process of ours, wait for it (SIGKILL after 15 s); their names."""
    mine = [p for p in procs if pid_alive(p["pid"]) and _ours(p)]
    for p in mine:
        os.kill(p["pid"], sig)
        if sig != signal.SIGKILL:  # a paused (SIGSTOPped) process acts on it only when resumed
            os.kill(p["pid"], signal.SIGCONT)
    deadline = time.monotonic() + 15
    for p in mine:
        while pid_alive(p["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if pid_alive(p["pid"]):
            print(f"ledgermq cluster: {p['name']} (pid {p['pid']}) did not stop within 15 s "
                  f"of {signal.Signals(sig).name}: killed (its log: <dir>/{p['name']}/server.log)",
                  file=sys.stderr)
            os.kill(p["pid"], signal.SIGKILL)
    return [p["name"] for p in mine]
