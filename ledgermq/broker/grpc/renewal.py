"""Auto-renew: a receive asking for it (`auto_renew`, what RocketMQ 5's PushConsumers send)
keeps its messages invisible while the client lives and has not acked them, as RocketMQ's
proxy does. Without it a slow listener, or a FIFO message's local retries, would see the
messages handed out again after the default invisible duration, and a FIFO group's order
broken by the redelivery. The deadline moves, not the delivery: the receipt handle the
client holds stays the one to ack with. A client silent for CLIENT_SILENT_S (no call, no
telemetry stream) is renewed no more, nor is any delivery past RENEW_MAX_MS, so what a
vanished client held goes out again.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Iterable

from ...runtime.clock import wall_ms

if TYPE_CHECKING:
    from ..pop.bookkeeping import Handle
    from ..pop.service import PopService
    from .channel import ClientChannel

log = logging.getLogger(__name__)

RENEW_PERIOD_S = 5.0
RENEW_SLICE_MS = 30_000      # each renewal keeps a delivery out this much longer
RENEW_MAX_MS = 3 * 3600_000  # and no delivery is kept out longer than this
CLIENT_SILENT_S = 30.0       # a PushConsumer heartbeats every 10 s
MAX_RENEWING = 16_384        # deliveries renewed for one client at once


class AutoRenewal:
    def __init__(self, pop: PopService, channels: dict[str, ClientChannel]):
        self.pop, self.channels = pop, channels

    def track(self, ch: ClientChannel, group: str, handles: Iterable[Handle]) -> None:
        now = wall_ms()
        for h in handles:
            if len(ch.renewing) >= MAX_RENEWING:
                log.warning("gRPC client %s holds %d auto-renewed messages: more are not "
                            "renewed", ch.client_id, MAX_RENEWING)
                return
            ch.renewing[(group, h.topic, h.queue_id, h.offset)] = (h, now)
            self.pop.renew(group, h, now + RENEW_SLICE_MS)  # (however short it went out for)

    def renew_all(self) -> None:
        now, alive_since = wall_ms(), time.monotonic() - CLIENT_SILENT_S
        for ch in list(self.channels.values()):
            if not ch.is_open and ch.last_seen < alive_since:
                ch.renewing.clear()
                continue
            for key, (handle, first) in list(ch.renewing.items()):
                if now - first > RENEW_MAX_MS or \
                        not self.pop.renew(key[0], handle, now + RENEW_SLICE_MS):
                    del ch.renewing[key]  # acked, nacked, redelivered, or held too long

    async def run(self) -> None:
        while True:
            await asyncio.sleep(RENEW_PERIOD_S)
            try:
                self.renew_all()
            except Exception:  # keep renewing: one bad entry must not end it for all
                log.exception("gRPC auto-renew failed")
