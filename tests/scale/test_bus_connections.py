"""A burst of commands on one node opens no Redis connection each (bridge_core/scale/redisbus.py
``caught_up`` through sharedread.py): their read-your-writes checks share one read of the stream's end;
the pool the node keeps for good stays at the connections the bus's own tasks use."""

from __future__ import annotations

import asyncio

from tests.scale.test_bus import Node, redis_bus


async def test_a_burst_of_commands_shares_the_reads_of_the_streams_end(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        await asyncio.gather(*(a.bus.caught_up() for _ in range(50)))
        b.bus.publish({"i": 1})  # acknowledged by b before a's next command comes
        await b.bus.flush()
        await asyncio.gather(*(a.bus.caught_up() for _ in range(50)))
        assert [d for _, _, d in a.events] == [{"i": 1}]  # read-your-writes still: b's event was read first
        pool = a.bus._r.connection_pool
        assert len(pool._available_connections) + len(pool._in_use_connections) <= 4  # reader, writer, a read, a beat
    finally:
        for x in (a, b):
            await x.bus.stop()
