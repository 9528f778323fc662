"""One read shared by the callers that asked for it before it was sent (a burst of commands'
read-your-writes checks: redisbus.py ``caught_up``). Each caller's answer comes from a read sent after
it asked, as if it had read alone; but one read is under way at a time, and every caller that asks
meanwhile shares the next one. A burst of N callers thus costs at most two reads and two of the
client's connections, where N concurrent reads would make its pool open N connections (each a
socket and its buffers, kept open by the pool for good: docs/performance.md "Per-node memory").
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

from ..bridge.tasks import TaskSet


class SharedRead:
    """``await shared()``: the value of ``read()``, from a read sent after this call began."""

    def __init__(self, read: Callable[[], Awaitable[Any]], tasks: TaskSet):
        self._read = read
        self._tasks = tasks
        self._next: Optional[asyncio.Future] = None  # the read the callers asking now share (not sent yet)
        self._running = False
        self.reads = 0  # reads sent

    async def __call__(self) -> Any:
        fut = self._next
        if fut is None:
            fut = self._next = asyncio.get_running_loop().create_future()
            if not self._running:
                self._running = True
                self._tasks.spawn(self._run(), name="shared-read")
        return await asyncio.shield(fut)

    async def _run(self) -> None:
        fut: Optional[asyncio.Future] = None
        try:
            while self._next is not None:
                fut, self._next = self._next, None  # who asks from now on waits for the next read
                self.reads += 1
                try:
                    value = await self._read()
                except Exception as exc:  # every caller of this read gets its error
                    fut.set_exception(exc)
                else:
                    fut.set_result(value)
        finally:
            self._running = False
            for left in (fut, self._next):  # cancelled (the bus stopping): nobody waits for good
                if left is not None and not left.done():
                    left.set_exception(ConnectionError("the shared read stopped"))
            self._next = None


def of_script(script: Callable[..., Awaitable[Any]], keys: list, tasks: TaskSet) -> SharedRead:
    """A Redis script's reads of ``keys``, shared as above."""
    return SharedRead(lambda: script(keys=keys), tasks)
