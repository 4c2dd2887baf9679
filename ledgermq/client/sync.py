"""Blocking wrappers: the asyncio clients driven from plain threads.

One background event-loop thread serves every wrapped client; each coroutine method of the
wrapped object becomes a blocking call with the same arguments.
"""
from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from typing import Any, Callable

_loop: asyncio.AbstractEventLoop | None = None
_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_loop.run_forever, name="ledgermq-client-loop",
                             daemon=True).start()
        return _loop


class Blocking:
    """Proxy whose coroutine methods block until done (timeout: the call's own)."""

    def __init__(self, factory: Callable[..., object], *args: Any, **kwargs: Any) -> None:
        loop = background_loop()

        async def make() -> object:
            return factory(*args, **kwargs)
        self._target = asyncio.run_coroutine_threadsafe(make(), loop).result()
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        @functools.wraps(attr)
        def call(*args: Any, **kwargs: Any) -> Any:
            return asyncio.run_coroutine_threadsafe(attr(*args, **kwargs), self._loop).result()
        return call

    def __enter__(self) -> "Blocking":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def SyncProducer(*args: Any, **kwargs: Any) -> Blocking:
    from .producer import Producer
    return Blocking(Producer, *args, **kwargs)


def SyncPushConsumer(*args: Any, **kwargs: Any) -> Blocking:
    from .consumer import PushConsumer
    return Blocking(PushConsumer, *args, **kwargs)


def SyncPullConsumer(*args: Any, **kwargs: Any) -> Blocking:
    from .consumer import PullConsumer
    return Blocking(PullConsumer, *args, **kwargs)
