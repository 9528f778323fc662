"""The bus contract on a real Redis (and the in-process bus): one order for every node,
numbers strictly increasing by one, each node's own events back in that order, commands
to one node only, liveness by heartbeat keys that expire."""

from __future__ import annotations

import pytest

from bridge_core.scale.bus import LocalBus
from bridge_core.scale.busauth import derive_key
from bridge_core.model.errors import Unavailable
from tests.waiting import until


class Node:
    def __init__(self, bus):
        self.bus = bus
        self.events: list[tuple[int, str, dict]] = []
        self.commands: list[tuple[str, dict]] = []

    async def start(self):
        await self.bus.start(lambda n, node, data: self.events.append((n, node, data)),
                             lambda node, data: self.commands.append((node, data)))  # fmt: skip
        return self


KEY = derive_key("test-pheby-secret-0123456789", "test-lvmh-token-0123456789")


def redis_bus(url, node, key=KEY, **kw):
    from bridge_core.scale.redisbus import RedisBus

    return RedisBus(url, node, key=key, **kw)


async def test_the_in_process_bus_delivers_at_once_in_order():
    node = await Node(LocalBus("solo")).start()
    for i in range(3):
        node.bus.publish({"i": i})
        assert node.events[-1] == (i + 1, "solo", {"i": i})  # in the caller's stack, no copy
    node.bus.send("solo", {"c": 1})
    node.bus.send("other", {"c": 2})
    assert node.commands == [("solo", {"c": 1})]
    assert await node.bus.live_nodes() == ["solo"]


async def test_every_node_sees_one_order_with_one_numbering(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    c = await Node(redis_bus(redis_url, "c")).start()
    try:
        for i in range(300):  # interleaved publishers
            (a, b)[i % 2].bus.publish({"i": i, "from": "ab"[i % 2]})
            if i % 3 == 0:
                c.bus.publish({"i": i, "from": "c"})
        total = 300 + 100
        await until(lambda: all(len(x.events) == total for x in (a, b, c)), timeout=20, what="every event everywhere")
        assert a.events == b.events == c.events  # one order, one numbering, on every node
        numbers = [n for n, _, _ in a.events]
        assert numbers == list(range(numbers[0], numbers[0] + total))
        for x, name in ((a, "a"), (b, "b"), (c, "c")):  # each publisher's own events come back in its order
            own = [d["i"] for _, node, d in x.events if node == name]
            assert own == sorted(own) and own
    finally:
        for x in (a, b, c):
            await x.bus.stop()


async def test_a_node_joins_at_the_end_of_the_stream(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    try:
        a.bus.publish({"before": True})
        await until(lambda: a.events, what="the first event")
        b = await Node(redis_bus(redis_url, "b")).start()
        a.bus.publish({"after": True})
        await until(lambda: b.events, what="the event after b joined")
        assert [d for _, _, d in b.events] == [{"after": True}]
        assert b.events[0][0] == a.events[0][0] + 1
        await b.bus.stop()
    finally:
        await a.bus.stop()


async def test_commands_reach_only_their_node(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        a.bus.send("b", {"type": "resolve", "id": "x"})
        b.bus.send("a", {"type": "cancel", "run": "r"})
        await until(lambda: a.commands and b.commands, what="both commands")
        await a.bus.flush()
        assert b.commands == [("a", {"type": "resolve", "id": "x"})]
        assert a.commands == [("b", {"type": "cancel", "run": "r"})]
    finally:
        await a.bus.stop()
        await b.bus.stop()


async def test_liveness_a_clean_stop_leaves_at_once_a_crash_expires(redis_url):
    a = await Node(redis_bus(redis_url, "a", ttl=1.0, every=0.2)).start()
    b = await Node(redis_bus(redis_url, "b", ttl=1.0, every=0.2)).start()
    c = await Node(redis_bus(redis_url, "c", ttl=1.0, every=0.2)).start()
    try:
        assert await a.bus.live_nodes() == ["a", "b", "c"]
        await b.bus.stop()
        assert await a.bus.live_nodes() == ["a", "c"]
        await c.bus.kill()  # no goodbye: its key lives on until its TTL runs out
        assert "c" in await a.bus.live_nodes()

        async def gone():
            return await a.bus.live_nodes() == ["a"]

        await until(gone, timeout=10, what="the crashed node's heartbeat to expire")
    finally:
        await a.bus.stop()


async def test_an_unreachable_bus_is_one_clear_error():
    from tests.engines import free_port, redis_missing

    if redis_missing():
        pytest.skip(redis_missing())
    bus = redis_bus(f"redis://:hunter2@127.0.0.1:{free_port()}/0", "a")
    with pytest.raises(Unavailable) as err:
        await bus.start(lambda *a: None)
    assert err.value.message.startswith("cannot reach the bus redis://")
    assert "hunter2" not in err.value.message



async def test_a_counter_redis_lost_goes_on_above_the_reservation(redis_server, redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        for bus in (a.bus, b.bus):
            bus.floor = 5000  # what the store reserved above every number given (cluster.py)
        for i in range(3):
            a.bus.publish({"i": i})
        await until(lambda: len(b.events) == 3, what="three events")
        assert [n for n, _, _ in b.events] == [1, 2, 3]
        redis_server.flush()  # the counter, the stream, the liveness keys: gone
        b.bus.publish({"i": 3})
        a.bus.publish({"i": 4})
        await until(lambda: len(a.events) == 5 and len(b.events) == 5, what="the events after the loss")
        assert a.events == b.events
        assert [n for n, _, _ in a.events] == [1, 2, 3, 5001, 5002]  # never a number given before
        noticed = [x.bus for x in (a, b) if x.bus.lost_recently(5.0)]  # the publisher that found it behind
        assert len(noticed) == 1
        await until(lambda: noticed[0].live_nodes(), what="its liveness key set again at once")
        assert await noticed[0].live_nodes() == [noticed[0].node_id]
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_a_node_starting_on_a_redis_that_lost_the_counter_raises_it(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    try:
        a.bus.publish({"i": 0})
        await until(lambda: a.events, what="one event")
    finally:
        await a.bus.stop()
    late = redis_bus(redis_url, "late")
    late.seen, late.floor = 40, 7000  # the store: 40 was given; 7000 reserved above everything
    node = await Node(late).start()  # the counter (1) is below what was given: raised to the reservation
    try:
        late.publish({"i": 1})
        await until(lambda: node.events, what="the event")
        assert node.events[0][0] == 7001
    finally:
        await late.stop()


async def test_relays_reach_every_other_node_in_stream_order_without_a_number(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    got: dict[str, list] = {"a": [], "b": []}
    for name, x in (("a", a), ("b", b)):
        x.bus.on_relay = lambda node, data, name=name: got[name].append((node, data, len(x_events[name])))
    x_events = {"a": a.events, "b": b.events}
    try:
        a.bus.publish({"e": 1})
        a.bus.relay({"r": 1})
        a.bus.publish({"e": 2})
        await until(lambda: len(b.events) == 2 and got["b"], what="both events and the relay on b")
        assert got["b"] == [("a", {"r": 1}, 1)]  # after the first event, before the second
        assert got["a"] == []  # never back to its sender
        assert [n for n, _, _ in b.events] == [1, 2]  # a relay takes no number
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_a_burst_goes_as_one_entry_its_events_numbered_one_by_one(redis_server, redis_url):
    import redis.asyncio as aioredis

    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    relays: list = []
    b.bus.on_relay = lambda node, data: relays.append((data, len(b.events)))
    r = aioredis.from_url(redis_url)
    try:
        for i in range(200):  # one loop turn
            a.bus.publish({"i": i})
            if i == 99:
                a.bus.relay({"r": 1})
        await until(lambda: len(b.events) == 200, what="the burst on b")
        assert [d["i"] for _, _, d in b.events] == list(range(200))
        assert [n for n, _, _ in b.events] == list(range(1, 201))
        assert relays == [({"r": 1}, 100)]  # in its place among the events
        assert await r.xlen(a.bus.events_key) == 1  # one stream entry, one script call
        for bus in (a.bus, b.bus):
            bus.floor = 9000
        redis_server.flush()  # the counter went: a batch after it is numbered above the reservation
        for i in range(3):
            b.bus.publish({"j": i})
        await until(lambda: len(a.events) == 203, what="the batch after the loss")
        assert [n for n, _, _ in a.events[200:]] == [9001, 9002, 9003]
        b.bus.publish({"j": 3})
        await until(lambda: len(a.events) == 204, what="the next event")
        assert a.events[-1][0] == 9004
    finally:
        await r.aclose()
        for x in (a, b):
            await x.bus.stop()
