"""Catching up (bridge_core/scale/catchup.py) on a real Redis: a node behind in the stream when Redis
loses its keys gets the entries it had not read back from their writers, in number order, before
what follows; a command waits until the node has read the stream to where it ended."""

from __future__ import annotations

import asyncio

from bridge_core.scale import catchup
from tests.scale.gates import Gate
from tests.scale.test_bus import Node, redis_bus
from tests.waiting import until


async def test_entries_the_stream_lost_come_back_from_their_writer(redis_server, redis_url):
    """Seed 4107's loss in one process: ``b`` behind while Redis loses its keys."""
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        for bus in (a.bus, b.bus):
            bus.floor = 5000
        a.bus.publish({"i": 0})
        await until(lambda: len(b.events) == 1, what="the first event on b")
        gate = Gate(b.bus)
        gate.close()
        a.bus.publish({"i": 1})  # b's reader is blocked on Redis now: it reads this one, not the next ones
        await until(lambda: len(a.events) == 2, what="the second event on a")
        await until(lambda: len(b.events) == 2, what="the second event on b")
        for i in range(2, 6):
            a.bus.publish({"i": i})
            await a.bus.flush()
        await until(lambda: len(a.events) == 6, what="every event on a")
        redis_server.flush()  # b never read 3 to 6: gone from the stream
        gate.open.set()
        a.bus.publish({"i": 6})
        await until(lambda: len(b.events) == 7, what="every event on b")
        assert b.events == a.events  # the lost ones came back, in their place and under their numbers
        assert [n for n, _, _ in b.events] == [1, 2, 3, 4, 5, 6, 5001]
        assert b.bus.refetched == 4
        assert b.bus.gone == 0  # everything came back: nothing said gone
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_a_gap_nobody_can_fill_does_not_stop_delivery(redis_server, redis_url):
    """Numbering jumping after a loss that took nothing unread: asked about, then delivery goes on."""
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        for bus in (a.bus, b.bus):
            bus.floor = 5000
        a.bus.publish({"i": 0})
        await until(lambda: len(b.events) == 1 and len(a.events) == 1, what="the first event")
        redis_server.flush()
        b.bus.publish({"i": 1})
        await until(lambda: len(a.events) == 2 and len(b.events) == 2, what="the event after the loss")
        assert a.events == b.events
        assert a.bus.refetched == b.bus.refetched == 0
        assert a.bus.gone == b.bus.gone == 0  # a jump in numbering is no loss
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_entries_their_writer_no_longer_kept_are_said_gone(redis_server, redis_url, caplog):
    """Seed 4107 under load: the writer's ``Written`` is bounded (a run's deltas carry their text so far,
    so 8 MB are a few hundred of them late in a long run) and kept fewer entries than ``b`` missed. What
    came back is delivered; the rest is counted and logged as gone for good, never passed over."""
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    a.bus._written = catchup.Written(keep=3)  # it keeps its last 3 entries
    try:
        for bus in (a.bus, b.bus):
            bus.floor = 5000
        a.bus.publish({"i": 0})
        await until(lambda: len(b.events) == 1, what="the first event on b")
        gate = Gate(b.bus)
        gate.close()
        a.bus.publish({"i": 1})  # b's reader is blocked on Redis now: it reads this one, not the next ones
        await until(lambda: len(b.events) == 2, what="the second event on b")
        for i in range(2, 6):
            a.bus.publish({"i": i})
            await a.bus.flush()
        await until(lambda: len(a.events) == 6, what="every event on a")
        redis_server.flush()  # b never read 3 to 6: gone from the stream
        a.bus.publish({"i": 6})
        await a.bus.flush()  # a keeps 5, 6 and 5001 now
        gate.open.set()
        await until(lambda: len(b.events) == 5, what="what b can have")
        assert [n for n, _, _ in b.events] == [1, 2, 5, 6, 5001]
        assert b.bus.refetched == 2
        assert b.bus.gone == 2  # 3 and 4: known given (5 came back), kept by nobody
        assert "events 3 to 4 came back from no node: gone for good" in caplog.text
        assert a.bus.gone == 0  # a read its own entries before the loss: nothing gone there
    finally:
        for x in (a, b):
            await x.bus.stop()


async def test_a_command_waits_until_the_node_read_the_stream_to_its_end(redis_url):
    a = await Node(redis_bus(redis_url, "a")).start()
    b = await Node(redis_bus(redis_url, "b")).start()
    try:
        gate = Gate(b.bus)
        gate.close()
        a.bus.publish({"i": 0})
        await a.bus.flush()
        waiting = asyncio.ensure_future(b.bus.caught_up())
        await until(lambda: a.events, what="the event on a")
        assert not b.events and not waiting.done()
        gate.open.set()
        await waiting
        assert len(b.events) == 1  # read before the command goes on
        await b.bus.caught_up()  # nothing newer: at once
    finally:
        for x in (a, b):
            await x.bus.stop()


def test_a_refetch_answer_carries_the_entries_as_written():
    w = catchup.Written(keep=3)
    for n in (1, 3, 7, 9):
        w.add(n, b'[["e",{"n":%d}]]' % n)
    assert [n for n, _ in w.between(0, 100)] == [3, 7, 9]  # the oldest gone
    assert [n for n, _ in w.between(3, 9)] == [7]
    gap = catchup.Gap("r1", 2, 9)
    gap.asked = {"a"}
    import orjson

    gap.add("a", orjson.loads(catchup.answer("r1", w.between(2, 9)))["entries"] + [[12, []], "junk"])
    assert gap.complete()
    assert gap.recovered() == [(3, "a", [["e", {"n": 3}]]), (7, "a", [["e", {"n": 7}]])]


def test_the_numbers_a_gap_knows_gone():
    """Between ``lo`` and the last event found, what no entry found covers (an entry's events take
    consecutive numbers from its ``n``; relays none); above it, nothing is known (numbering jumped)."""
    e, r = ["e", {}], ["r", {}]
    gap = catchup.Gap("r1", 10, 5001)
    assert gap.lost() == []  # nothing found: a jump, or a loss nobody can tell
    gap.add("a", [[11, [e, r, e]], [16, [e]], [18, [r, e, e]], [30, [e]]])
    assert gap.lost() == [(13, 15), (17, 17), (20, 29)]
    gap.add("b", [[13, [e, e, e]], [17, [e]]])  # another writer's entries fill two holes
    assert gap.lost() == [(20, 29)]
    assert catchup.spans(gap.lost() + [(40, 40)]) == "20 to 29, 40"
    assert catchup.spans([(k, k) for k in range(7)], most=2) == "0, 1, ..."


def test_what_a_node_keeps_for_a_refetch_is_bounded_in_bytes():
    w = catchup.Written(keep=100, keep_bytes=1000)
    for n in range(1, 11):
        w.add(n, b"x" * 300)
    assert [n for n, _ in w.between(0, 100)] == [8, 9, 10]
    assert w.size == 900


async def test_a_refetch_or_an_answer_written_to_redis_by_another_hand_is_dropped(redis_url):
    """Who can write to Redis can put a refetch (or an answer) in a node's inbox: unsigned, it is dropped,
    never answered nor delivered; the signed ones between the nodes go on (the tests above)."""
    import orjson
    import redis.asyncio as aioredis

    a = await Node(redis_bus(redis_url, "a")).start()
    try:
        a.bus.publish({"i": 0})
        await until(lambda: a.events, what="the event")
        queued = a.bus.queued
        r = aioredis.from_url(redis_url)
        try:
            for forged in ({"bus": "refetch", "id": "x", "lo": 0, "hi": 10},
                           {"bus": "refetched", "id": "x", "entries": [[2, [["e", {"forged": 1}]]]]}):
                await r.xadd(a.bus.inbox_key, {"b": orjson.dumps(forged)})
        finally:
            await r.aclose()
        await until(lambda: a.bus.dropped["unsigned"] == 2, what="both dropped")
        assert a.bus.queued == queued  # nothing answered
        assert a.events == [(a.events[0][0], "a", {"i": 0})]
    finally:
        await a.bus.stop()
