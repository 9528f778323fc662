"""Waiting on a condition, never on the clock: the one poll-until helper of the suite.

``await until(cond)`` polls ``cond`` (a plain or an async callable) until it returns something
truthy and returns that value; past the deadline it fails with ``what`` in the message. The
deadline is an upper bound for a condition that should hold quickly, never a timing assertion.
``until_sync`` is the same for code outside an event loop. (The conformance clients keep their
own helpers: they import nothing of ours.)
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any, Callable

TIMEOUT = 10.0
INTERVAL = 0.01
CHECK_AT_LEAST = 5.0  # seconds an async check is given even at the deadline (a read under load)


async def until(cond: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition",
                interval: float = INTERVAL) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):  # a check that never answers (a store's read) is bounded too
            try:
                value = await asyncio.wait_for(value, max(deadline - time.monotonic(), CHECK_AT_LEAST))
            except asyncio.TimeoutError:
                raise AssertionError(f"timed out after {timeout:g}s waiting for {what} (its check never answered)")
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        await asyncio.sleep(interval)


def until_sync(cond: Callable[[], Any], timeout: float = TIMEOUT, what: str = "condition",
               interval: float = INTERVAL) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


async def turns(n: int = 100) -> None:
    """Let every task that is ready run, ``n`` loop turns (no clock): before asserting that
    something did NOT happen when nothing but those tasks could make it happen."""
    for _ in range(n):
        await asyncio.sleep(0)
