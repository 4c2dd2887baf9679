"""POP bookkeeping (broker/pop/bookkeeping.py): what a consumer group may receive, ack and get again."""
import pytest

from ledgermq.broker.pop.bookkeeping import Deadlines, Handle, PopQueue


def test_acks_move_the_committed_offset_over_the_acked_prefix_only():
    q = PopQueue(committed=10)
    assert q.hand_out([10, 11, 12], 13, now_ms=0, invisible_ms=1000, stamp=1) == \
        [(10, 1), (11, 1), (12, 1)]
    assert q.ack(11, 1, expired=False) and q.committed == 10  # 10 is still out
    assert q.ack(10, 1, expired=False) and q.committed == 12
    assert q.ack(12, 1, expired=False) and q.committed == 13 == q.cursor
    assert q.ack(12, 1, expired=False)  # acking again changes nothing and is fine


def test_filtered_out_offsets_count_as_done():
    q = PopQueue(committed=0)
    q.hand_out([2], 5, now_ms=0, invisible_ms=1000, stamp=7)  # 0, 1, 3, 4 did not match
    assert q.committed == 2 and q.cursor == 5
    q.ack(2, 7, expired=False)
    assert q.committed == 5


def test_a_delivery_redelivered_since_cannot_be_acked_with_its_old_handle():
    q = PopQueue(committed=0)
    q.hand_out([0], 1, now_ms=0, invisible_ms=1000, stamp=1)
    q.rewind(0)  # FIFO: expired, goes out again
    assert q.hand_out([0], 1, now_ms=2000, invisible_ms=1000, stamp=2) == [(0, 2)]
    assert not q.ack(0, 1, expired=True)
    assert q.ack(0, 2, expired=False) and q.committed == 1


def test_an_expired_handle_of_a_revived_message_is_refused():
    q = PopQueue(committed=0)
    q.hand_out([0], 1, now_ms=0, invisible_ms=1000, stamp=1)
    q.revived(0)  # handed to the retry topic
    assert q.committed == 1
    assert not q.ack(0, 1, expired=True)


def test_a_fifo_queue_is_blocked_while_a_delivery_is_out():
    q = PopQueue(committed=0)
    q.hand_out([0, 1, 2], 3, now_ms=0, invisible_ms=1000, stamp=1)
    q.ack(1, 1, expired=False)
    assert q.blocked()
    q.rewind(0)  # 0 expired: it and what follows go out again, in order
    assert not q.blocked() and q.cursor == 0


def test_a_fifo_batch_goes_out_again_from_its_first_unacked_message():
    """As RocketMQ (its e2e testFIFO_simple_receive_multi_nack): a receiver that acks 1
    and 2 of the batch 0, 1, 2 but not 0 gets 0, 1, 2 again, in order, when 0 expires,
    each counted as a further delivery."""
    q = PopQueue(committed=0)
    q.hand_out([0, 1, 2], 3, now_ms=0, invisible_ms=1000, stamp=1)
    assert q.ack(1, 1, expired=False) and q.ack(2, 1, expired=False)
    q.rewind(0)
    assert q.hand_out([0, 1, 2], 3, now_ms=1000, invisible_ms=1000, stamp=2) == \
        [(0, 2), (1, 2), (2, 2)]
    assert all(q.ack(off, 2, expired=False) for off in (0, 1, 2))
    assert q.committed == 3 and not q.attempts


def test_an_invisibility_change_renames_the_delivery():
    q = PopQueue(committed=0)
    q.hand_out([0], 1, now_ms=0, invisible_ms=1000, stamp=1)
    assert q.change_invisible(0, 1, deadline=60_000, new_stamp=2)
    assert not q.change_invisible(0, 1, deadline=90_000, new_stamp=3)  # the old name
    assert q.expired(30_000) == [] and q.ack(0, 2, expired=False)


def test_receipt_handles_round_trip_and_foreign_ones_are_refused():
    h = Handle("broker-a", "%RETRY%g", 3, 42, 1_700_000_000_000, 30_000)
    assert Handle.decode(h.encode()) == h
    assert h.expired(1_700_000_030_000) and not h.expired(1_700_000_029_999)
    for bad in ("", "xyz", "L1 b t q 1 2 3", "L0 b t 1 2 3 4"):
        with pytest.raises(ValueError):
            Handle.decode(bad)


def test_deadlines_come_up_in_time_order():
    d = Deadlines()
    d.add(300, ("g", "t", 0), [2], 1)
    d.add(100, ("g", "t", 0), [1], 1)
    assert d.due(99) == []
    assert d.due(300) == [(("g", "t", 0), 1, 1), (("g", "t", 0), 2, 1)]


def test_many_deadlines_come_up_like_one_at_a_time():
    """A pop's messages of one queue go in together; each comes up as if added alone."""
    one, many = Deadlines(), Deadlines()
    for d in (one, many):
        d.add(50, ("g", "t", 1), [9], 1)
    for off in (3, 4, 5):
        one.add(70, ("g", "t", 0), [off], 2)
    many.add(70, ("g", "t", 0), [3, 4, 5], 2)
    assert one.due(60) == many.due(60) and one.due(100) == many.due(100)


def test_the_pop_answer_names_each_queues_offsets_in_body_order():
    """startOffsetInfo / msgOffsetInfo list each (retry flag, queue) once, its offsets in
    the order the body holds them, however the queues interleave; FIFO counts each."""
    from ledgermq.broker.pop.service import Popped
    from ledgermq.broker.processors.pop import pop_header

    def popped(topic, qid, off, attempt=1):
        return Popped(Handle("b", topic, qid, off, 77, 1000), attempt, 1000, b"")
    ps = [popped("T", 0, 5), popped("T", 0, 6), popped("%RETRY%g", 0, 2, 3),
          popped("T", 1, 9), popped("T", 0, 7)]
    h = pop_header(ps, 77, 1000, True)
    assert h["startOffsetInfo"] == "0 0 5;1 0 2;0 1 9"
    assert h["msgOffsetInfo"] == "0 0 5,6,7;1 0 2;0 1 9"
    assert h["orderCountInfo"] == "0 qo0%5 0;0 qo0%6 0;1 qo0%2 2;0 qo1%9 0;0 qo0%7 0"
    assert (h["popTime"], h["invisibleTime"]) == ("77", "1000")
