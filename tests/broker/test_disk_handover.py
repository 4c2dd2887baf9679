"""When a master with a full disk hands its group over (modes/disk_handover.py): once
writes have been refused for FULL_FOR_S, to the follower furthest along, at most once in
HAND_OVER_EVERY_S, never as a follower, and not when turned off. The hand-over on real
brokers with a really full disk: tests/chaos/test_client_hand_over.py."""
from __future__ import annotations

from types import SimpleNamespace

from ledgermq.broker.config import BrokerConfig
from ledgermq.broker.modes.client_handover import HAND_OVER_EVERY_S, GroupRole
from ledgermq.broker.modes.disk_handover import FULL_FOR_S, FullDiskHandOver


def watcher(is_master: bool = True, why: str | None = None, **config):
    store = SimpleNamespace(disk_full=False, disk_full_reason="")
    asked: list[str] = []

    def hand_to(follower: str) -> str | None:
        asked.append(follower)
        return why
    host = SimpleNamespace(store=store, config=BrokerConfig(**config))
    w = FullDiskHandOver(host, "test", lambda: GroupRole(is_master, "1", frozenset({"2", "3"})),
                         hand_to, lambda: {"2": 100, "3": 250})
    return w, store, asked


def test_a_master_refused_writes_for_a_full_disk_hands_over_to_the_furthest_follower():
    w, store, asked = watcher()
    assert w.check(0.0) is None  # the disk has room
    store.disk_full = True
    assert w.check(10.0) is None and asked == []  # full just now: retention may free it
    assert w.check(10.0 + FULL_FOR_S) == "3" and asked == ["3"] and w.hand_overs == 1
    # still full on the next checks (as a follower now, or before the transfer is done)
    assert w.check(12.0 + FULL_FOR_S) is None and asked == ["3"]
    # space back, then full again: another hand-over only after HAND_OVER_EVERY_S
    store.disk_full = False
    assert w.check(13.0) is None
    store.disk_full = True
    assert w.check(14.0) is None and w.check(16.0) is None and asked == ["3"]
    assert w.check(10.0 + FULL_FOR_S + HAND_OVER_EVERY_S) == "3" and w.hand_overs == 2


def test_a_full_disk_that_frees_within_the_grace_keeps_its_master():
    w, store, asked = watcher()
    store.disk_full = True
    w.check(0.0)
    store.disk_full = False
    w.check(0.5)
    store.disk_full = True
    assert w.check(0.5 + FULL_FOR_S / 2) is None and asked == []  # its time starts again


def test_no_hand_over_by_a_follower_when_off_or_when_the_mode_refuses():
    for w, store, asked in (watcher(is_master=False), watcher(handOverOnFullDisk=False)):
        store.disk_full = True
        assert w.check(0.0) is None and w.check(5.0) is None and asked == []
    w, store, asked = watcher(why="the operator's preferredLeaderId (n0) decides")
    store.disk_full = True
    w.check(0.0)
    assert w.check(5.0) is None and asked == ["3"] and w.hand_overs == 0
    assert w.check(6.0) is None and asked == ["3", "3"]  # asked again, logged once
