"""Entries Redis loses before a node delivered its first one (chaos seed 2003): a node just (re)started,
still reading its join, told no gap while it had delivered nothing, so what it missed vanished: no
refetch from its writer, no hole, no ``truncated`` on the phones. Its gaps are told from its join's
number now (bridge_core/scale/busjoin.py ``number_at``); what comes before the point its join delivers
from never counts as a gap."""

from __future__ import annotations

import orjson
import redis.asyncio as aioredis

from bridge_core.scale import busjoin, catchup
from bridge_core.scale.busauth import Signer
from tests.scale.test_bus import KEY, Node, redis_bus
from tests.scale.gates import held
from tests.waiting import until


def _has(node, n: int) -> bool:
    return any(k == n for k, _, _ in node.events)


def _told(bus) -> list:
    """The gaps ``bus`` passes, as (lo, hi, lost), from now on."""
    passed: list = []
    bus.on_passed = lambda gap, lost: passed.append((gap.lo, gap.hi, lost))
    return passed


async def _held_from_the_start(redis_url):
    """``a``, then ``b`` held at its very first read (``start`` spawns the reader without yielding)."""
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    gate = await held(b.bus, "b's first read held")
    for bus in (a.bus, b.bus):
        bus.floor = 5000
    return a, b, gate, _told(b.bus)


async def test_entries_lost_before_the_first_delivery_come_back_from_their_writer(redis_server, redis_url):
    a, b, gate, passed = await _held_from_the_start(redis_url)
    try:
        for i in range(1, 6):
            a.bus.publish({"i": i})
            await a.bus.flush()
        await until(lambda: len(a.events) == 5, what="every event on a")
        redis_server.flush()  # b never read 1 to 5: gone from the stream
        gate.open.set()
        a.bus.publish({"i": 6})
        await until(lambda: _has(b, 5001), what="the event after the loss on b")
        assert b.events == a.events  # in their place, under their numbers, before what follows
        assert [n for n, _, _ in b.events] == [1, 2, 3, 4, 5, 5001]
        assert b.bus.refetched == 5 and b.bus.gone == 0
        assert passed == [(0, 5001, [])]
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_entries_lost_before_the_first_delivery_that_no_writer_kept_are_said_gone(
        redis_server, redis_url, caplog):  # fmt: skip
    a, b, gate, passed = await _held_from_the_start(redis_url)
    a.bus._written = catchup.Written(keep=2)  # it keeps its last 2 entries
    try:
        for i in range(1, 6):
            a.bus.publish({"i": i})
            await a.bus.flush()
        await until(lambda: len(a.events) == 5, what="every event on a")
        redis_server.flush()
        a.bus.publish({"i": 6})
        await a.bus.flush()  # a keeps 5 and 5001 now
        gate.open.set()
        await until(lambda: _has(b, 5001), what="the event after the loss on b")
        assert [n for n, _, _ in b.events] == [5, 5001]
        assert b.bus.refetched == 1
        assert b.bus.gone == 4  # 1 to 4: known given (5 came back), kept by nobody
        assert passed == [(0, 5001, [(1, 4)])]  # told (gone.py records the hole, Loomi says truncated)
        assert "events 1 to 4 came back from no node: gone for good" in caplog.text
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_what_came_before_the_join_is_no_gap(redis_server, redis_url):
    """A node joins at the stream's end: the entries before it are not delivered, and a loss right after
    the join asks for nothing below them (its writer still keeps them) and says none of them gone."""
    a = await Node(redis_bus(redis_url, "a")).start()
    try:
        for i in range(1, 4):
            a.bus.publish({"i": i})
            await a.bus.flush()
        b = await Node(redis_bus(redis_url, "b")).start()
        gate = await held(b.bus, "b's first read held")
        passed = _told(b.bus)
        for bus in (a.bus, b.bus):
            bus.floor = 5000
        redis_server.flush()
        a.bus.publish({"i": 4})
        await a.bus.flush()
        gate.open.set()
        await until(lambda: _has(b, 5001), what="the event after the loss on b")
        assert [n for n, _, _ in b.events] == [5001]  # 1 to 3 were before b's join: never delivered there
        assert passed[:1] == [(3, 5001, [])] and b.bus.refetched == 0 and b.bus.gone == 0
        await b.bus.stop()
    finally:
        await a.bus.stop()


async def test_a_join_passes_over_a_gone_nodes_entries_before_its_first_delivery(redis_server, redis_url):
    """Gaps told from the join must not turn the join's window into one: entries there from a node no longer
    live (a previous life of a restarted node, a node stopped), read before the first delivery, are passed
    over as before (the store the node loads has what they did), not asked for as a gap nobody can answer
    and said gone, which closed every phone of a restarted node (test_life_holes.py). A loss of Redis's keys
    right after is still told, from the number after them."""
    a = await Node(redis_bus(redis_url, "a")).start()
    for i in range(1, 4):
        a.bus.publish({"i": i})
        await a.bus.flush()
    await a.bus.stop()  # its liveness key deleted: not live any more
    b = await Node(redis_bus(redis_url, "b", join_back=5.0)).start()  # joins 5 s back: a's 1 to 3 in its window
    c = await Node(redis_bus(redis_url, "c")).start()
    passed = _told(b.bus)
    try:
        c.bus.publish({"i": 4})
        await until(lambda: _has(b, 4), what="c's event on b")
        assert [n for n, _, _ in b.events] == [4]  # a's not delivered (not live), and no gap before c's
        assert passed == [] and b.bus.gone == 0 and b.bus.refetched == 0
        assert b.bus.dropped["not_live"] == 3
        gate = await held(b.bus, "b's reads held")
        for bus in (b.bus, c.bus):
            bus.floor = 5000
        c.bus.publish({"i": 5})
        await c.bus.flush()
        redis_server.flush()  # b never read 5
        c.bus.publish({"i": 6})
        gate.open.set()
        await until(lambda: _has(b, 5001), what="the event after the loss on b")
        assert [n for n, _, _ in b.events] == [4, 5, 5001]  # 5 came back from c, its writer
        assert passed == [(4, 5001, [])] and b.bus.gone == 0
    finally:
        for x in (b, c):
            await x.bus.stop()


def _entry(ms: int, n: int, events: int, node: str = "a") -> tuple[str, dict]:
    body = orjson.dumps([["e", {"i": n + k, "ts": ms / 1000}] for k in range(events)])
    h, m = Signer(KEY, node, "e1", clock=lambda: ms / 1000).sign("agent-bridge:events", body)
    return f"{ms}-0", {"n": n, "h": h, "b": body, "m": m}


async def test_the_number_a_join_starts_from(redis_url):
    """The last event at or before the point the join delivers from (an entry's events take consecutive
    numbers); one below the stream's first when the join delivers all of it; the counter with no stream.
    Who can write to Redis cannot raise it: an unsigned entry is passed over, and a genuine one put back
    with a higher ``n`` (not under the MAC) is capped by the counter, so what follows is never dropped."""
    r = aioredis.from_url(redis_url)
    key, counter_key = "agent-bridge:events", "agent-bridge:n"
    try:
        assert await busjoin.number_at(r, key, counter_key, KEY, None, 7) == (7, None)
        for ms, n, k in ((1000, 10, 2), (2000, 12, 3), (3000, 15, 1)):
            await r.xadd(key, _entry(ms, n, k)[1], id=f"{ms}-0")
        await r.set(counter_key, 15)
        assert await busjoin.number_at(r, key, counter_key, KEY, (2000, 0), 15) == (14, 2.0)
        assert await busjoin.number_at(r, key, counter_key, KEY, (3000, 0), 15) == (15, 3.0)
        assert await busjoin.number_at(r, key, counter_key, KEY, (500, 0), 15) == (9, None)  # all of it delivered
        await r.xadd(key, {"n": 1 << 40, "b": b'[["e",{}]]'}, id="4000-0")  # unsigned: passed over
        assert await busjoin.number_at(r, key, counter_key, KEY, (4000, 0), 15) == (15, 3.0)
        _, copy = _entry(3000, 15, 1)
        copy["n"] = 1 << 40  # a genuine entry put back renumbered
        await r.xadd(key, copy, id="5000-0")
        assert (await busjoin.number_at(r, key, counter_key, KEY, (5000, 0), 15))[0] == 15
    finally:
        await r.aclose()
