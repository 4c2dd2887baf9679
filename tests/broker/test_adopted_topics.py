"""A replica that becomes master serves every queue its log holds. Found by RocketMQ's Java
client in the DLedger failover benchmark (#29): the first leader auto-created a topic with 4
queues; a follower took over while the entries of queues 2 and 3 were in its log but not yet
committed there (past its dispatch bound), adopted the topic with 2 queues, and an
acknowledged message in queue 2 was never read by any consumer again."""
from ledgermq.broker.meta.topic_table import TopicTable
from ledgermq.broker.meta.topics import Topics
from ledgermq.store import MessageStore, decode_message

from ..store.conftest import small_config
from ..store.test_store import put


def test_a_new_master_adopts_queues_its_log_holds_past_the_dispatch_bound(tmp_path):
    leader = MessageStore(small_config(tmp_path / "leader"))
    follower = MessageStore(small_config(tmp_path / "follower"))
    leader.open()
    follower.open()
    try:
        follower.dispatch_follows_log = False  # a replicated log: visible once committed
        ends = [put(leader, "T", q, [b"m%d" % q]).end_offset for q in range(4)]
        follower.append_raw(0, leader.commitlog.read(0, ends[-1]))
        follower.set_dispatch_bound(ends[1])  # only queues 0 and 1 committed here so far

        topics = Topics(TopicTable(tmp_path / "topics.json", 8, True), follower,
                        auto_create=True, is_slave=lambda: False, announce=lambda: None)
        topics.adopt_stored()  # the follower is master now
        follower.set_dispatch_bound(ends[-1])  # its first commit makes the rest visible

        tc = topics.get("T")
        assert (tc.writeQueueNums, tc.readQueueNums) == (4, 4)
        bodies = [decode_message(follower.get_messages("T", q, 0).messages()[0]).body
                  for q in range(4)]
        assert bodies == [b"m0", b"m1", b"m2", b"m3"]
    finally:
        leader.close()
        follower.close()


def test_a_queue_cut_before_it_was_dispatched_starts_again_at_offset_zero(tmp_path):
    """A replica's log cut (truncate) that removes every entry of a queue not yet
    dispatched forgets that queue: its next message is at queue offset 0, not after the
    cut ones (a consumer would otherwise find a gap at the start of the queue)."""
    leader = MessageStore(small_config(tmp_path / "leader"))
    follower = MessageStore(small_config(tmp_path / "follower"))
    leader.open()
    follower.open()
    try:
        follower.dispatch_follows_log = False
        first = put(leader, "T", 0, [b"kept"]).end_offset
        end = put(leader, "T", 1, [b"cut-1", b"cut-2"]).end_offset
        follower.append_raw(0, leader.commitlog.read(0, end))
        follower.truncate(first)  # the new leader never had queue 1's messages
        follower.dispatch_follows_log = True
        follower.set_dispatch_bound(first)
        put(follower, "T", 1, [b"new"])
        got = follower.get_messages("T", 1, 0)
        assert [decode_message(m).body for m in got.messages()] == [b"new"]
    finally:
        leader.close()
        follower.close()
