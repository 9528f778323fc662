"""A gate on a bus's reads of Redis: a node stopped reading the stream (what it has not read stays unread until the
gate opens). Shared by the catch-up and join-loss tests (tests/scale/test_bus_catchup.py, test_bus_join_loss.py,
test_life_holes.py, test_join_loss_truncated.py, test_read_your_writes.py)."""

from __future__ import annotations

import asyncio

from tests.waiting import until


class Gate:
    """Holds a bus's reads of Redis while closed (the node stopped: what it has not read stays unread)."""

    def __init__(self, bus):
        self.open = asyncio.Event()
        self.open.set()
        self.parked = asyncio.Event()  # a read waits at the closed gate (none is under way past it)
        inner = bus._r.xread

        async def xread(*args, **kw):
            if not self.open.is_set():
                self.parked.set()
            await self.open.wait()
            return await inner(*args, **kw)

        bus._r.xread = xread

    def close(self):
        self.open.clear()


async def held(bus, what: str) -> Gate:
    """A closed gate on ``bus`` and a read of it waiting there (none under way past it): ``what`` for the wait."""
    gate = Gate(bus)
    gate.close()
    await until(lambda: gate.parked.is_set(), what=what)
    return gate
