"""One read shared by the callers that asked before it was sent (bridge_core/scale/sharedread.py): a
burst of callers costs one or two reads, never one each (each concurrent read of a Redis client opens a
connection its pool keeps), and no caller gets a value read before it asked (read-your-writes)."""

from __future__ import annotations

import asyncio

import pytest

from bridge_core.bridge.tasks import TaskSet
from bridge_core.scale.sharedread import SharedRead
from tests.waiting import until


class _Source:
    """A read that answers how many reads were sent before it (its own number), held until released."""

    def __init__(self) -> None:
        self.sent = 0
        self.inflight = 0
        self.most = 0  # the most reads under way at once
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.fail: Exception | None = None

    async def read(self) -> int:
        self.sent += 1
        mine = self.sent
        self.inflight += 1
        self.most = max(self.most, self.inflight)
        self.started.set()
        try:
            await self.release.wait()
            if self.fail is not None:
                raise self.fail
            return mine
        finally:
            self.inflight -= 1


async def test_a_burst_of_callers_shares_one_read():
    src, tasks = _Source(), TaskSet("test")
    shared = SharedRead(src.read, tasks)
    callers = [asyncio.ensure_future(shared()) for _ in range(30)]
    await src.started.wait()
    src.release.set()
    assert await asyncio.gather(*callers) == [1] * 30
    assert src.sent == 1 and shared.reads == 1
    await tasks.close()


async def test_a_caller_during_a_read_gets_the_next_one_shared_with_the_others_then():
    """The read under way was sent before they asked: what another node acknowledged in between may be
    missing from it, so they wait for the next read, one for all of them, and only one read runs at a time."""
    src, tasks = _Source(), TaskSet("test")
    shared = SharedRead(src.read, tasks)
    first = asyncio.ensure_future(shared())
    await src.started.wait()  # read 1 is under way
    later = [asyncio.ensure_future(shared()) for _ in range(20)]
    await until(lambda: shared._next is not None, what="the callers waiting for the next read")
    assert src.sent == 1
    src.release.set()
    assert await first == 1
    assert await asyncio.gather(*later) == [2] * 20
    assert src.sent == 2 and src.most == 1
    src.release.clear()
    src.started.clear()
    again = asyncio.ensure_future(shared())  # after the burst: a read of its own
    await src.started.wait()
    src.release.set()
    assert await again == 3
    await tasks.close()


async def test_an_error_reaches_every_caller_of_that_read_and_the_next_call_reads_again():
    src, tasks = _Source(), TaskSet("test")
    shared = SharedRead(src.read, tasks)
    src.fail = OSError("connection reset")
    callers = [asyncio.ensure_future(shared()) for _ in range(5)]
    await src.started.wait()
    src.release.set()
    results = await asyncio.gather(*callers, return_exceptions=True)
    assert all(isinstance(r, OSError) and str(r) == "connection reset" for r in results)
    src.fail = None
    assert await shared() == 2
    await tasks.close()


async def test_stopping_leaves_no_caller_waiting():
    src, tasks = _Source(), TaskSet("test")
    shared = SharedRead(src.read, tasks)
    first = asyncio.ensure_future(shared())
    await src.started.wait()
    waiting = asyncio.ensure_future(shared())  # for the next read, which will never be sent
    await until(lambda: shared._next is not None, what="a caller waiting for the next read")
    await tasks.close()  # the bus stopping
    for fut in (first, waiting):
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(fut, 5)


async def test_a_caller_cancelled_does_not_cancel_the_read_of_the_others():
    src, tasks = _Source(), TaskSet("test")
    shared = SharedRead(src.read, tasks)
    gone, stays = asyncio.ensure_future(shared()), asyncio.ensure_future(shared())
    await src.started.wait()
    gone.cancel()
    src.release.set()
    assert await stays == 1
    with pytest.raises(asyncio.CancelledError):
        await gone
    await tasks.close()
