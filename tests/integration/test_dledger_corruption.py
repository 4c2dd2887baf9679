"""Corruption on a minority node (issue #17): a DLedger follower's flushed commit-log tail is
zeroed while it is down. It must notice (its CRCs), never vote or answer with entries it
cannot read back, and be repaired by its peers; the group keeps taking writes even when
the leader dies right after the damaged follower comes back."""
import asyncio
import os
import signal
import time

from ledgermq import Message, Producer
from ledgermq.localcluster.cluster import restart

from ..wait import wait_until
from .load import Ack, check_nothing_lost, read_all, under_load
from .test_dledger import group, leader_of, procs  # noqa: F401 - group is a fixture

ZEROED = 256 * 1024


def zero_commit_log_tail(store: "os.PathLike", nbytes: int) -> tuple[int, int]:
    """Zero the last `nbytes` written bytes of a stopped broker's commit log (flushed ones
    included: the kill came long after they were written). Returns the zeroed range as
    offsets in the last segment file."""
    segments = sorted(f for f in (store / "commitlog").iterdir() if f.name.isdigit())
    last = segments[-1]
    data = last.read_bytes()
    written = len(data.rstrip(b"\0"))  # segments are preallocated: the tail is zeros
    lo = max(0, written - nbytes)
    with open(last, "r+b") as f:
        f.seek(lo)
        f.write(b"\0" * (written - lo))
        f.flush()
        os.fsync(f.fileno())
    return lo, written


def preload(ns, batches: int, size: int = 1024) -> list:
    """Batches of 100 messages of `size` bytes (about 100 KiB each), so the commit log
    holds well over the tail the test zeroes; returns their Acks."""
    acked: list = []

    async def main():
        async with Producer("preload", ns, send_timeout=10) as p:
            for b in range(batches):
                bodies = [f"pre-{b}-{i}-".encode().ljust(size, b"x") for i in range(100)]
                r = await p.send_batch([Message("Replicated", body) for body in bodies])
                assert r.status.value == "SEND_OK", r
                acked.extend(Ack(r.queue.queue_id, body, time.monotonic()) for body in bodies)
    asyncio.run(main())
    return acked


def test_zeroed_follower_tail_then_leader_killed_keeps_taking_writes(group):  # noqa: F811
    d, state = group
    ns = state["namesrv"]
    leader = leader_of(d)
    was = procs(d)
    follower = next(n for n, p in was.items() if p.get("role") == "FOLLOWER")
    acked = preload(ns, 8)  # ~800 KiB that every replica holds
    # the follower dies under load; the other two go on committing
    acked += under_load(ns, 3, "c", 1.5, (was[follower]["pid"], signal.SIGKILL, 0))
    assert len(acked) > 50
    wait_until(lambda: not procs(d)[follower]["alive"], f"{follower} is gone", 10)
    lo, hi = zero_commit_log_tail(d / follower / "store", ZEROED)
    assert hi - lo == ZEROED, (lo, hi)
    restart(d, follower)
    os.kill(leader["pid"], signal.SIGKILL)  # at once: the damaged node is needed for a quorum
    killed_at = time.monotonic()
    # the two survivors elect a leader and acknowledge new writes within a bound
    after = under_load(ns, 7, "d", 0)  # failovers here take 1-3 s
    assert after, f"no write acknowledged in 7 s after the failover: {procs(d)}"
    first_ack_s = after[0].at - killed_at
    print(f"first SEND_OK {first_ack_s:.2f}s after the leader was killed; "
          f"{len(after)} acknowledged after the failover")
    new = leader_of(d, not_name=leader["name"])
    assert new["name"] != leader["name"]
    # every acknowledged message is readable, in order
    check_nothing_lost(acked + after, asyncio.run(read_all(ns)))
    # the damaged follower is repaired: it holds the leader's log and commit again
    wait_until(lambda: (st := procs(d))[follower].get("commit") == st[new["name"]].get("commit")
               and st[follower].get("end") == st[new["name"]].get("end"),
               lambda: f"{follower} repaired: {procs(d)}", 20)
