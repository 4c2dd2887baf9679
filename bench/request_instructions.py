"""Instructions per request on the broker's request path (#32), counted by valgrind
(callgrind): the in-process loop of request_micro.py (a real Broker and store, its
Connection fed one-message sends, or PULL_MESSAGE frames asking for 32 once 2,000
messages are stored, replies counted) run twice, for N1 and N2 requests after the same
warm-up; (Ir(N2) - Ir(N1)) / (N2 - N1) is what one request costs, startup
and imports cancelled out. A timing on this VM moves by a quarter with what else runs;
this moves by ~1% (see docs/benchmarks.md), so a change of a few percent shows. JSON rows.

    python bench/request_instructions.py [--requests CPP,JSON,ROCKETMQ,PULL,POP]
                                         [--n1 500 --n2 1500]

Needs valgrind (apt install valgrind); about a minute and a half a row.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WARM_UP = 500
PULL_STORED = 2000  # sends before the pulls (500 a queue): each pull finds 32

# the child: WARM_UP requests, then N more (the frames built beforehand, outside the count)
CHILD = """
import asyncio, pickle, sys, tempfile
from pathlib import Path
sys.path[:0] = [{root!r}, {bench!r}]
import request_micro as rm
frames = pickle.load(open(sys.argv[1], "rb"))
n, warm = int(sys.argv[2]), int(sys.argv[3])
async def main():
    with tempfile.TemporaryDirectory() as tmp:
        # the background threads' rounds (flushes, retention) are spaced out: they run by
        # the clock, and under valgrind a run is ~50x slower, so they would count
        b = await rm.make_broker(Path(tmp), flushIntervalCommitLog="60000",
                                 flushIntervalConsumeQueue="60000",
                                 cleanResourceInterval="600000")
        if sys.argv[4:] == ["pop"]:
            await b.pop.ready()
        await rm.drive(frames[:warm], b)
        await rm.drive(frames[warm:warm + n], b)
        b.store.close()
asyncio.run(main())
"""


def instructions(script: Path, frames: Path, n: int, warm: int, out: Path,
                 more: tuple[str, ...] = ()) -> int:
    """Instructions valgrind counted for the child run with `n` requests."""
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                        sys.executable, str(script), str(frames), str(n), str(warm), *more],
                       capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    m = re.search(r"Collected : (\d+)", r.stderr)
    if r.returncode or not m:
        raise RuntimeError(f"valgrind run failed (exit {r.returncode}): {r.stderr[-2000:]}")
    return int(m.group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", default="CPP,JSON,ROCKETMQ,PULL,POP",
                    help="SEND_MESSAGE as the C++ client sends it; SEND_MESSAGE_V2 with a "
                    "JSON or ROCKETMQ header; PULL_MESSAGE; "
                    "POP_MESSAGE (32 messages, a fifth of the requests: each is ~30 sends)")
    ap.add_argument("--n1", type=int, default=500)
    ap.add_argument("--n2", type=int, default=1500)
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is not installed (apt install valgrind)")
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    import request_micro as rm
    from ledgermq.remoting.codes import SerializeType
    from ledgermq.wire import native
    with tempfile.TemporaryDirectory(prefix="request-instructions-") as tmp:
        d = Path(tmp)
        script = d / "child.py"
        script.write_text(CHILD.format(root=str(ROOT), bench=str(ROOT / "bench")))
        for kind in args.requests.split(","):
            frames = d / f"frames-{kind}.pkl"
            if kind == "PULL":
                stored = [rm.send_frame(i, SerializeType.JSON) for i in range(PULL_STORED)]
                per_queue = PULL_STORED // 4
                pulls = [rm.pull_frame(i, (i * 32) % (per_queue - 32))
                         for i in range(WARM_UP + args.n2)]
                sequence, warm, label = stored + pulls, PULL_STORED + WARM_UP, \
                    "PULL_MESSAGE (32 messages)"
            elif kind == "POP":
                n1, n2, warm_pops = args.n1 // 5, args.n2 // 5, WARM_UP // 5
                stored = [rm.send_frame(i, SerializeType.JSON)
                          for i in range((warm_pops + n2) * 32 + 100)]
                sequence = stored + [rm.pop_frame(i) for i in range(warm_pops + n2)]
                warm, label = len(stored) + warm_pops, "POP_MESSAGE (32 messages)"
            else:
                label, make = rm.SENDS[kind]
                sequence = [make(i) for i in range(WARM_UP + args.n2)]
                warm = WARM_UP
            pickle.dump(sequence, frames.open("wb"))
            ns = (n1, n2) if kind == "POP" else (args.n1, args.n2)
            more = ("pop",) if kind == "POP" else ()
            with ThreadPoolExecutor(2) as pool:  # (the two counts side by side)
                counts = list(pool.map(lambda n: instructions(script, frames, n, warm,
                                                              d / f"cg-{n}.out", more), ns))
            per = (counts[1] - counts[0]) // (ns[1] - ns[0])
            print(json.dumps({"bench": "request path, instructions", "impl": native.active(),
                              "request": label, "instructions_per_request": per}), flush=True)


if __name__ == "__main__":
    main()
