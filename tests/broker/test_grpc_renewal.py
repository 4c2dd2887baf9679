"""Auto-renew's policy (broker/grpc/renewal.py), over the real POP bookkeeping: deliveries
are kept out while their client lives, dropped once acked or redelivered, and a client
gone silent, or a delivery held past RENEW_MAX_MS, is renewed no more."""
import asyncio
import time

from ledgermq.broker.grpc import renewal
from ledgermq.broker.grpc.channel import ClientChannel
from ledgermq.broker.grpc.renewal import AutoRenewal
from ledgermq.broker.pop.bookkeeping import Handle, PopQueue
from ledgermq.runtime.clock import wall_ms


class Pop:
    """PopService.renew's lookup over one real PopQueue (the service needs a broker)."""

    def __init__(self):
        self.q = PopQueue(committed=0)

    def renew(self, group, handle, deadline):
        return self.q.renew(handle.offset, handle.stamp, deadline)


def test_renewal_keeps_live_deliveries_out_and_lets_go_of_the_rest(monkeypatch):
    async def run():
        pop, ch = Pop(), ClientChannel("c1", "ipv4:127.0.0.1:1")
        now = wall_ms()
        pop.q.hand_out([0, 1, 2], 3, now_ms=now, invisible_ms=1000, stamp=7)
        handles = [Handle("b", "T", 0, off, 7, 1000) for off in (0, 1, 2)]
        r = AutoRenewal(pop, {"c1": ch})
        r.track(ch, "g", handles)
        assert all(d.deadline >= now + renewal.RENEW_SLICE_MS for d in pop.q.inflight.values())
        pop.q.ack(1, 7, expired=False)  # acked: let go of at the next round
        pop.q.rewind(2)                  # (handed out again since: its old handle is done)
        r.renew_all()
        assert set(ch.renewing) == {("g", "T", 0, 0)}
        monkeypatch.setattr(renewal, "RENEW_MAX_MS", -1)  # held too long
        r.renew_all()
        assert ch.renewing == {}

        r.track(ch, "g", handles[:1])
        ch.last_seen = time.monotonic() - renewal.CLIENT_SILENT_S - 1  # silent, no stream
        monkeypatch.setattr(renewal, "RENEW_MAX_MS", 3600_000)
        r.renew_all()
        assert ch.renewing == {}
    asyncio.run(run())


def test_one_client_cannot_have_more_than_its_share_renewed(monkeypatch):
    async def run():
        monkeypatch.setattr(renewal, "MAX_RENEWING", 2)
        pop, ch = Pop(), ClientChannel("c1", "ipv4:127.0.0.1:1")
        pop.q.hand_out([0, 1, 2], 3, now_ms=wall_ms(), invisible_ms=1000, stamp=7)
        AutoRenewal(pop, {"c1": ch}).track(ch, "g", [Handle("b", "T", 0, off, 7, 1000)
                                                     for off in (0, 1, 2)])
        assert len(ch.renewing) == 2
    asyncio.run(run())
