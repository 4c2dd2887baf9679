"""Waiting in tests: poll a condition until it holds, with a deadline.

`time.sleep` is not synchronization: a test waits for the very state it then asserts,
and when that state never comes it fails saying what it waited for.

    leader = wait_until(lambda: find_leader(d), "a single leader", timeout=15)
    await until(lambda: slave.max_offset == master.max_offset, "the slave caught up")
"""
import asyncio
import inspect
import time


def wait_until(cond, what, timeout=20.0, interval=0.2):
    """Call `cond()` until it returns something truthy, and return that. An exception from
    `cond` counts as "not yet" (a process may be restarting). After `timeout` seconds:
    AssertionError naming `what` (a string, or a function called then to describe the
    state), the timeout and the last value or exception."""
    end = time.monotonic() + timeout
    while True:
        try:
            last = cond()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - not yet
            last = e
        _give_up_after(end, what, timeout, last)
        time.sleep(interval)


async def until(cond, what, timeout=10.0, interval=0.02):
    """`wait_until` for a test inside an event loop: the loop runs on while it waits, and
    `cond` may return an awaitable (e.g. be an async function), which is awaited. Its
    defaults suit in-process state: 10 s, polled every 20 ms."""
    end = time.monotonic() + timeout
    while True:
        try:
            last = cond()
            if inspect.isawaitable(last):
                last = await last
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - not yet
            last = e
        _give_up_after(end, what, timeout, last)
        await asyncio.sleep(interval)


def _give_up_after(end, what, timeout, last) -> None:
    """AssertionError once the monotonic clock passed `end`."""
    if time.monotonic() >= end:
        what = what() if callable(what) else what
        raise AssertionError(f"{what}: not within {timeout}s (last: {last!r})")
