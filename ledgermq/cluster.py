"""`ledgermq cluster up|status|down`: a name server and a replica group as real local
processes, for trying things out and for real-process tests."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

MODES = ("dledger", "sync", "async", "checkpoint", "controller")


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def _spawn(args: list[str], workdir: Path) -> subprocess.Popen:
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([sys.executable, "-m", "ledgermq", *args],
                            stdout=open(workdir / "stdout", "wb"),
                            stderr=open(workdir / "server.log", "ab"),
                            start_new_session=True)


def _wait_ready(workdir: Path, proc: subprocess.Popen, timeout: float = 30) -> dict:
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


def broker_conf(mode: str, i: int, n: int, ports: dict, d: Path, extra: dict[str, str]) -> str:
    conf = {"brokerClusterName": "DefaultCluster", "brokerName": "broker-a",
            "listenPort": ports["broker"][i], "namesrvAddr": f"127.0.0.1:{ports['namesrv']}",
            "storePathRootDir": str(d / f"n{i}" / "store"),
            "mappedFileSizeCommitLog": str(64 << 20), "maxHashSlotNum": "100000",
            "maxIndexNum": "400000"}
    if mode == "dledger":
        peers = ";".join(f"n{k}-127.0.0.1:{ports['repl'][k]}" for k in range(n))
        conf.update(enableDLegerCommitLog="true", dLegerGroup="broker-a", dLegerPeers=peers,
                    dLegerSelfId=f"n{i}")
    else:
        master_role = "ASYNC_MASTER" if mode == "async" else "SYNC_MASTER"
        conf.update(brokerId=str(i), brokerRole=master_role if i == 0 else "SLAVE",
                    haListenPort=str(ports["repl"][i]), haSendHeartbeatInterval="1000",
                    haHousekeepingInterval="5000")
        if mode == "checkpoint":
            conf.update(enableConsistentCheckpoint="true",
                        controlNodeAddr=f"127.0.0.1:{ports['control']}")
        if mode == "controller":  # roles come from the controller, not from brokerRole
            del conf["brokerId"], conf["brokerRole"]
            conf.update(enableControllerMode="true", controllerAddr=";".join(
                f"127.0.0.1:{p}" for p in ports["controllers"]), brokerHeartbeatInterval="200",
                allAckInSyncStateSet="true", haMaxTimeSlaveNotCatchUp="3000")
    conf.update(extra)
    return "".join(f"{k}={v}\n" for k, v in conf.items())


def controller_conf(k: int, ports: list[int], d: Path) -> str:
    peers = ";".join(f"c{i}-127.0.0.1:{p}" for i, p in enumerate(ports))
    return (f"controllerDLegerPeers={peers}\ncontrollerDLegerSelfId=c{k}\n"
            f"controllerStorePath={d / f'c{k}' / 'data'}\nbrokerNotActiveTimeoutMillis=1000\n")


def up(mode: str, replicas: int, d: Path, extra: dict[str, str] | None = None,
       controllers: int = 1) -> dict:
    if mode not in MODES:
        raise ValueError(f"mode {mode} is not available yet (have: {', '.join(MODES)})")
    d.mkdir(parents=True, exist_ok=True)
    if (d / "cluster.json").exists() and any(_alive(p["pid"]) for p in
                                             json.loads((d / "cluster.json").read_text())["processes"]):
        raise RuntimeError(f"a cluster is already running in {d}; `ledgermq cluster down` first")
    started: list[subprocess.Popen] = []
    try:
        return _up(mode, replicas, d, extra, started, controllers)
    except BaseException:
        for proc in started:  # leave nothing running behind a failed start
            proc.kill()
            proc.wait()
        raise


def _up(mode: str, replicas: int, d: Path, extra: dict[str, str] | None,
        started: list, controllers: int) -> dict:
    got = free_ports(2 + 2 * replicas + controllers)
    ports = {"namesrv": got[0], "broker": got[1:1 + replicas],
             "repl": got[1 + replicas:1 + 2 * replicas], "control": got[1 + 2 * replicas],
             "controllers": got[2 + 2 * replicas:]}
    ns = _spawn(["namesrv", "--port", str(ports["namesrv"]), "--json"], d / "namesrv")
    started.append(ns)
    _wait_ready(d / "namesrv", ns)
    procs = [{"name": "namesrv", "pid": ns.pid, "port": ports["namesrv"]}]
    if mode == "checkpoint":
        ctl = _spawn(["controlnode", "--port", str(ports["control"]), "--dir",
                      str(d / "control" / "data"), "--json"], d / "control")
        started.append(ctl)
        _wait_ready(d / "control", ctl)
        procs.append({"name": "control", "pid": ctl.pid, "port": ports["control"],
                      "args": ["controlnode", "--port", str(ports["control"]), "--dir",
                               str(d / "control" / "data"), "--json"]})
    if mode == "controller":
        for k, port in enumerate(ports["controllers"]):
            (d / f"c{k}").mkdir(parents=True, exist_ok=True)
            (d / f"c{k}" / "controller.conf").write_text(
                controller_conf(k, ports["controllers"], d))
            args = ["controller", "-c", str(d / f"c{k}" / "controller.conf"), "--json"]
            started.append(_spawn(args, d / f"c{k}"))
            procs.append({"name": f"c{k}", "pid": started[-1].pid, "port": port,
                          "args": args})
        for k in range(controllers):
            _wait_ready(d / f"c{k}", started[-controllers + k])
    brokers = []
    for i in range(replicas):
        conf = d / f"n{i}" / "broker.conf"
        conf.parent.mkdir(parents=True, exist_ok=True)
        conf.write_text(broker_conf(mode, i, replicas, ports, d, extra or {}))
        brokers.append(_spawn(["broker", "-c", str(conf), "--json"], d / f"n{i}"))
        started.append(brokers[-1])
    for i, b in enumerate(brokers):
        _wait_ready(d / f"n{i}", b)
        procs.append({"name": f"n{i}", "pid": b.pid, "port": ports["broker"][i],
                      "replPort": ports["repl"][i],
                      "args": ["broker", "-c", str(d / f"n{i}" / "broker.conf"), "--json"]})
    state = {"mode": mode, "namesrv": f"127.0.0.1:{ports['namesrv']}", "processes": procs}
    if mode == "checkpoint":
        state["controlNode"] = f"127.0.0.1:{ports['control']}"
    if mode == "controller":
        state["controllerAddr"] = ";".join(f"127.0.0.1:{p}" for p in ports["controllers"])
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


def restart(d: Path, name: str) -> dict:
    """Start one process of the cluster again (after a kill)."""
    state = _state(d)
    p = next(p for p in state["processes"] if p["name"] == name)
    deadline = time.monotonic() + 5  # a process just killed may take a moment to go
    while _alive(p["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _alive(p["pid"]):
        raise RuntimeError(f"{name} (pid {p['pid']}) is still running")
    (d / name / "stdout").unlink(missing_ok=True)
    proc = _spawn(p["args"], d / name)
    _wait_ready(d / name, proc)
    p["pid"] = proc.pid
    (d / "cluster.json").write_text(json.dumps(state, indent=1))
    return p


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def status(d: Path) -> dict:
    state = _state(d)
    import asyncio
    from .client.admin import Admin

    async def roles():
        out = {}
        async with Admin(state["namesrv"]) as a:
            for p in state["processes"]:
                if p["name"] == "namesrv" or p["name"].startswith("c") or \
                        not _alive(p["pid"]):
                    continue
                try:
                    info = await a.broker_status(f"127.0.0.1:{p['port']}")
                    out[p["name"]] = info
                except Exception as e:  # noqa: BLE001 - report, don't fail the status
                    out[p["name"]] = {"error": str(e)}
        return out
    infos = asyncio.run(roles())
    for p in state["processes"]:
        p["alive"] = _alive(p["pid"])
        info = infos.get(p["name"], {})
        if "brokerRole" in info:
            p["role"] = info["brokerRole"]
        if "ha" in info:
            p["ha"] = json.loads(info["ha"])
        if "controller" in info:
            st = json.loads(info["controller"])
            p.update({"brokerId": st["brokerId"], "masterEpoch": st["masterEpoch"]})
        if "dledger" in info:
            st = json.loads(info["dledger"])
            p.update({"role": st["role"], "term": st["term"], "leader": st["leader"],
                      "commit": st["commit"], "end": st["end"]})
    return state


def down(d: Path) -> dict:
    state = _state(d)
    for p in state["processes"]:
        if _alive(p["pid"]):
            os.kill(p["pid"], signal.SIGTERM)
    deadline = time.monotonic() + 15
    for p in state["processes"]:
        while _alive(p["pid"]) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _alive(p["pid"]):
            os.kill(p["pid"], signal.SIGKILL)
        p["alive"] = False
    return state
