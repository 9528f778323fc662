"""A device's requests share the event loop with every other connection (docs/architecture.md,
"One command, socket to agent")."""

from __future__ import annotations

import asyncio

import orjson

from tests.waiting import until

from .helpers import pair


async def test_a_burst_of_requests_lets_the_loop_turn_between_them(loomi):
    """Requests a device sent together are queued at once; each one that finishes without waiting
    must still let the loop turn before the next, or every other connection waits for all of them."""
    c, creds = await pair(loomi)
    fe = loomi.frontends["loomi"]
    conn = fe.registry.devices[creds["device_id"]].conn
    order: list = []
    run = fe._run

    async def recorded(conn_, job):
        order.append(job.request_id)
        await run(conn_, job)

    fe._run = recorded
    loop = asyncio.get_running_loop()
    for i in range(5):  # frames read in one go: each queued for the connection's worker
        frame = orjson.dumps({"v": 1, "type": "task.list", "payload": {"request_id": f"r{i}"}}).decode()
        fe._on_text(conn, frame, loop.time())
    loop.call_soon(order.append, "turn")  # runs at the loop's next turn
    await until(lambda: len(order) == 6)
    assert order.index("turn") < 5, order  # not after the whole burst
    await c.close()
