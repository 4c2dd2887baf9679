"""Child process for the crash tests: appends under SYNC_FLUSH and reports every ack.

Usage: python crash_writer.py STORE_DIR ROUND
Prints one line per acknowledged batch: "qid first_queue_offset first_seq count".
"""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ledgermq.store import MessageStore, PutStatus  # noqa: E402
from tests.store.conftest import small_config  # noqa: E402


def body(seq: int) -> bytes:
    return b"seq-%d|" % seq + bytes([seq % 251]) * (seq % 300)


def main() -> None:
    root, rnd = Path(sys.argv[1]), int(sys.argv[2])
    store = MessageStore(small_config(root, flushDiskType="SYNC_FLUSH",
                                      mappedFileSizeCommitLog=256 * 1024))
    store.open()
    rng = random.Random(rnd)
    seq = rnd * 10_000_000
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    while True:
        qid = rng.randrange(4)
        n = rng.randint(1, 40)
        result = store.put(store.encode("Crash", qid, [body(seq + i) for i in range(n)]))
        if result.status is not PutStatus.PUT_OK:
            out.write(f"error {result.status.value} {result.error}\n")
            out.flush()
            return
        out.write(f"{qid} {result.queue_offset} {seq} {n}\n")
        out.flush()
        seq += n


if __name__ == "__main__":
    main()
