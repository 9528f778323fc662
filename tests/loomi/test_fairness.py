"""A device's requests share the event loop with every other connection (docs/architecture.md,
"One command, socket to agent")."""

from __future__ import annotations

import asyncio

from loomi_adapter import codec
from tests.waiting import until

from .helpers import pair


async def test_a_burst_of_requests_lets_the_loop_turn_between_them(loomi):
    """Requests a device sent together are queued at once; each one that finishes without waiting
    must still let the loop turn before the next, or every other connection waits for all of them."""
    c, creds = await pair(loomi)
    fe = loomi.frontends["loomi"]
    conn = fe.registry.devices[creds["device_id"]].conn
    order: list = []
    handle = fe._handle

    async def recorded(conn_, req):
        order.append(req.request_id)
        await handle(conn_, req)

    fe._handle = recorded
    loop = asyncio.get_running_loop()
    for i in range(5):  # what _on_text queues for frames read in one go
        conn.queue.put_nowait(codec.TaskList(request_id=f"r{i}"))
    loop.call_soon(order.append, "turn")  # runs at the loop's next turn
    await until(lambda: len(order) == 6)
    assert order.index("turn") < 5, order  # not after the whole burst
    await c.close()
