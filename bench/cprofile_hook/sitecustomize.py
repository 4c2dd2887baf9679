"""cProfile inside every ledgermq process a benchmark starts (`ledgermq cluster`, `dev`):
call counts and times per function of a broker, a DLedger leader or follower, without
attaching anything to it. Python imports this file at start-up when its folder is on
PYTHONPATH; with LEDGERMQ_CPROFILE set to a directory, each `python -m ledgermq ...`
process profiles its main thread and writes `<dir>/cprofile-<pid>.out` when it exits
(SIGTERM through the cluster's `down` is a normal exit). Other processes are untouched.

    LEDGERMQ_CPROFILE=/tmp/prof PYTHONPATH=bench/cprofile_hook python bench/dledger_bench.py --quick
    python -c "import pstats; pstats.Stats('/tmp/prof/cprofile-1234.out').sort_stats('tottime').print_stats(30)"

Times are wall-clock (idle waits in the event loop count) and inflated by the profiler's
per-call cost; compare call counts, and times only between functions of one run
(docs/benchmarks.md, session 30, used it for the calls a DLedger entry costs).
"""
import os
import sys

_OUT = os.environ.get("LEDGERMQ_CPROFILE")
if _OUT and sys.orig_argv[1:3] == ["-m", "ledgermq"]:
    import atexit
    import cProfile

    _profile = cProfile.Profile()
    _profile.enable()

    def _dump() -> None:
        _profile.disable()
        os.makedirs(_OUT, exist_ok=True)
        _profile.dump_stats(os.path.join(_OUT, f"cprofile-{os.getpid()}.out"))

    atexit.register(_dump)
