"""Any cut of a replica's commit log leaves its consume queues describing exactly the log
(#28): a replica copies one leader's log (consumers see only up to the bound replication
confirmed), may restart, is cut back to where it agrees with a second leader (whose log
shares a prefix with the first and then differs), may restart again, and copies the second
leader's log. Afterwards every queue reads exactly as the second leader's does, and every
queue entry names a message of that topic, queue and queue offset at that place in the
log. Property-based: the prefix, the copies, the bounds and the restarts are drawn."""
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgermq.store import MessageStore
from ledgermq.wire.message import decode_message

from ..drivers.test_autoswitch_drivers import span
from .conftest import small_config
from .test_store import read_all

QUEUES = [("T", 0), ("T", 1), ("U", 0)]


def leader(path, picks, prefix: bytes = b"") -> tuple[MessageStore, list[int]]:
    """A store that copies `prefix` (whole messages), then takes one message per pick as a
    leader; returns it and the log offset after each message it took."""
    s = MessageStore(small_config(path))
    s.open()
    if prefix:
        s.append_raw(0, prefix)
    ends = []
    for i, (q, size) in enumerate(picks):
        topic, qid = QUEUES[q]
        r = s.put(s.encode(topic, qid, [b"%s-%d-" % (path.name.encode(), i) + b"x" * size]))
        assert r.ok, r.error
        ends.append(r.end_offset)
    return s, ends


def replica(path) -> MessageStore:
    s = MessageStore(small_config(path), dispatch_follows_log=False)
    s.open(0)  # as a replicated broker: the mode raises the bound
    return s


def check_queues_describe_the_log(s: MessageStore) -> None:
    for (topic, qid), cq in s.queues.items():
        for off in range(cq.min_offset, cq.max_offset):
            phys, size, _ = cq.entry(off)
            assert phys + size <= s.commitlog.max_offset, (topic, qid, off, phys)
            m = decode_message(s.commitlog.read(phys, size))
            assert (m.topic, m.queue_id, m.queue_offset) == (topic, qid, off), (phys, m.topic)


picks = st.lists(st.tuples(st.integers(0, len(QUEUES) - 1), st.integers(10, 3000)),
                 min_size=1, max_size=40)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shared=picks, first=picks, second=picks, data=st.data())
def test_after_any_cut_the_queues_describe_exactly_the_log(tmp_path_factory, shared, first,
                                                          second, data):
    d = tmp_path_factory.mktemp("cut")
    a, a_ends = leader(d / "a", shared + first)
    common = a_ends[len(shared) - 1]
    b, b_ends = leader(d / "b", second, prefix=span(a, 0, common))
    r = replica(d / "r")
    try:
        copied = data.draw(st.sampled_from(a_ends[len(shared) - 1:]), "copied of a")
        r.append_raw(0, span(a, 0, copied))
        r.set_dispatch_bound(data.draw(st.sampled_from([0, *a_ends]), "bound"))
        check_queues_describe_the_log(r)
        if data.draw(st.booleans(), "restart before the cut"):
            r.close()
            r = replica(d / "r")
        r.truncate(common)
        check_queues_describe_the_log(r)
        if data.draw(st.booleans(), "restart after the cut"):
            r.close()
            r = replica(d / "r")
        r.append_raw(common, span(b, common, b_ends[-1]))
        r.set_dispatch_bound(b_ends[-1])
        check_queues_describe_the_log(r)
        for topic, qid in QUEUES:
            assert [m.body for m in read_all(r, topic, qid)] == \
                [m.body for m in read_all(b, topic, qid)], (topic, qid)
    finally:
        for s in (a, b, r):
            s.close()
