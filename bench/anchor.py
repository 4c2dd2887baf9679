"""The NATS JetStream anchor (../shared/anchors/nats-jetstream), run in the same benchmark.

Sets itself up when it can: nats-server from Debian's packages (apt-get, as root) and
nats-py in a venv under .cache/. Starts the anchor's 3-node cluster, runs its bench.py
with the asked replicas and phases, stops the servers it started, returns the JSON rows.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ANCHOR = Path(os.environ.get("LEDGERMQ_ANCHOR_DIR", ROOT.parent / "shared" / "anchors"
                             / "nats-jetstream"))
VENV = ROOT / ".cache" / "nats-venv"


def ensure_tools() -> Path:
    if shutil.which("nats-server") is None:
        subprocess.run(["apt-get", "install", "-y", "nats-server"], check=False,
                       capture_output=True)
        if shutil.which("nats-server") is None:
            subprocess.run(["apt-get", "update"], check=False, capture_output=True)
            subprocess.run(["apt-get", "install", "-y", "nats-server"], check=True,
                           capture_output=True)
    py = VENV / "bin" / "python"
    if not (VENV / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "nats-py"], check=True)
        (VENV / ".ready").touch()
    return py


def build_go_client() -> tuple[Path | None, str]:
    """The anchor's native Go client (gobench/), built offline from Debian's packages by
    its build.sh into .cache/gobench: (path, "") or (None, why not)."""
    out = ROOT / ".cache" / "gobench"
    if (out / "gobench").exists():
        return out / "gobench", ""
    run = subprocess.run(["bash", str(ANCHOR / "gobench" / "build.sh"), str(out)],
                         capture_output=True, text=True, timeout=900)
    if run.returncode != 0 or not (out / "gobench").exists():
        return None, f"gobench/build.sh failed: {(run.stderr or run.stdout)[-500:]}"
    return out / "gobench", ""


def run_anchor(replicas: int, phases: str, nb: int = 200_000, na: int = 20_000,
               go: Path | None = None) -> list[dict]:
    """Rows of nats-py's bench.py and, given `go`, of the Go client (marked "client":
    "go") on the same fresh cluster."""
    py = ensure_tools()
    work = Path(tempfile.mkdtemp(prefix="nats-anchor-"))
    subprocess.run(["bash", str(ANCHOR / "start.sh"), str(work)], check=True,
                   capture_output=True)
    pids = [int((work / f"n{i}.pid").read_text()) for i in (1, 2, 3)]
    try:
        time.sleep(1)
        out = work / "results.jsonl"
        subprocess.run([str(py), str(ANCHOR / "bench.py"), "--replicas", str(replicas),
                        "--phases", phases, "--nb", str(nb), "--na", str(na), "--out", str(out)],
                       check=True, capture_output=True, timeout=1500,
                       env={**os.environ, "NATS_ANCHOR_DIR": str(work)})
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        if go is not None:
            rows += go_rows(go, work, replicas, phases, nb, na)
        return rows
    finally:
        for pid in pids:  # the servers start.sh started for us
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        time.sleep(0.5)
        shutil.rmtree(work, ignore_errors=True)


GO_TIMEOUT_S = 300  # its phases take seconds; one that hangs must not stall the bench


def go_rows(go: Path, work: Path, replicas: int, phases: str, nb: int,
            na: int) -> list[dict]:
    """The Go client's rows; a run that does not end within GO_TIMEOUT_S is killed and
    leaves the rows of the phases it finished, and a row saying so."""
    gout = work / "go.jsonl"
    try:
        subprocess.run([str(go), "--replicas", str(replicas), "--phases", phases,
                        "--nb", str(nb), "--na", str(na), "--out", str(gout)],
                       check=True, capture_output=True, timeout=GO_TIMEOUT_S,
                       env={**os.environ, "NATS_ANCHOR_DIR": str(work)})
        stopped = None
    except subprocess.TimeoutExpired:
        stopped = f"the Go client did not finish within {GO_TIMEOUT_S} s: stopped"
    rows = [json.loads(line) for line in gout.read_text().splitlines()] \
        if gout.exists() else []
    if stopped:
        rows.append({"client": "go", "workload": "stopped", "note": stopped})
    return rows


def by_phase(rows: list[dict]) -> dict[str, dict]:
    """Rows keyed a, b, c, d (the consume row is d_none)."""
    out = {}
    for r in rows:
        key = r["workload"].split()[0]
        out.setdefault(key, r)
    return out


def anchor_phases(replicas: int, na: int, nb: int, skip: bool = False) -> dict[str, dict]:
    """Run the anchor's phases a, b, d (unless `skip`), print its rows, return them by
    phase."""
    if skip:
        return {}
    anchor = by_phase(run_anchor(replicas, "a,b,d", nb=nb, na=na))
    for r in anchor.values():
        print(json.dumps({"bench": f"anchor nats-jetstream replicas={replicas}", **r}),
              flush=True)
    return anchor
