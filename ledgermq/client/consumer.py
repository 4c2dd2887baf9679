"""Consumers: PullConsumer (you choose queues and offsets) and PushConsumer (a group that
shares queues by rebalancing, pulls with long polling, calls your listener, retries failed
messages through the broker and commits offsets).

This module names them in one place; each concept has its own module:
  pull.py       the pull API every consumer is built on, and PullConsumer
  push.py       PushConsumer: pull loops, the listener, retries through the broker
  rebalance.py  which queues a push consumer serves, and the orderly queue locks
  offsets.py    where a push consumer's offsets live (brokers, or a local file)
"""
from .offsets import LocalOffsetStore, RemoteOffsetStore
from .pull import PullConsumer, PullResult, PullStatus
from .push import ConsumeStatus, Listener, PushConsumer
from .rebalance import allocate_averagely

__all__ = ["ConsumeStatus", "Listener", "LocalOffsetStore", "PullConsumer", "PullResult",
           "PullStatus", "PushConsumer", "RemoteOffsetStore", "allocate_averagely"]
