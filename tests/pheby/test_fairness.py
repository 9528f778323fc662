"""A client's requests share the event loop with every other connection (docs/architecture.md,
"One command, socket to agent", step 5): the reader lets the loop turn after each request."""

from __future__ import annotations

import asyncio
import json

from tests.pheby.client import PhebyClient
from tests.waiting import until


async def test_a_burst_of_requests_lets_the_loop_turn_between_them(service_factory):
    """Frames a client sent together are read at once; each request that finishes without waiting must
    still let the loop turn before the next, or every other connection waits for all of them."""
    svc = await service_factory(adapters=("pheby",))
    fe = svc.frontends["pheby"]
    client = await PhebyClient.connect(svc.ports["pheby"])
    order: list = []
    execute = fe._execute
    loop = asyncio.get_running_loop()

    async def recorded(conn, command, origin):
        if not order:
            loop.call_soon(order.append, "turn")  # runs at the loop's next turn
        order.append(command.request_id)
        await execute(conn, command, origin)

    fe._execute = recorded
    try:
        for i in range(5):  # written back to back: the server reads them in one go
            await client.ws.send_str(json.dumps({"type": "conversation.list", "request_id": f"r{i}"}))
        replies = [await client.recv_type("conversation.snapshot") for _ in range(5)]
        assert [r["request_id"] for r in replies] == [f"r{i}" for i in range(5)]  # each answered, in order
        await until(lambda: len(order) == 6)
        assert order.index("turn") < 5, order  # not after the whole burst
    finally:
        await client.close()
