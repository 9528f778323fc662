"""Signed bus entries on a real (password-protected) Redis (docs/scale-out.md "Signed entries"):
what a process with Redis access adds to the streams, forged, copied, moved, held back, or
signed by a node that is not live, is dropped and counted by reason on every node that reads
it; what the nodes themselves send in the same streams is delivered, in order, beside it."""

from __future__ import annotations

import asyncio
import collections
import time

import orjson
import pytest

from bridge_core.scale.busauth import Signer, entry_mac
from tests.scale.test_bus import KEY, Node, redis_bus
from tests.waiting import until

Counter = collections.Counter


@pytest.fixture
async def attacker(redis_server, redis_url):
    """A Redis client with the password: anything it likes in any stream, no cluster key."""
    import redis.asyncio as aioredis

    r = aioredis.from_url(redis_url)
    yield r
    await r.aclose()


@pytest.fixture
async def nodes(redis_url):
    started: list[Node] = []

    async def start(*names: str, **kw) -> list[Node]:
        out = []
        for name in names:
            node = await Node(redis_bus(redis_url, name, **kw)).start()
            started.append(node)
            out.append(node)
        return out

    yield start
    for node in started:
        await node.bus.stop()


def _forged(stream: str, payload: bytes, key: bytes = b"k" * 32, node: str = "a") -> dict:
    """An entry in the signed format under a key that is not the cluster's."""
    h = orjson.dumps(["ab1", stream, node, "0123456789abcdef", 1, int(time.time() * 1000)])
    return {"h": h, "b": payload, "m": entry_mac(key, h, payload)}


async def test_forged_entries_are_dropped_and_counted_and_genuine_ones_delivered(nodes, attacker):
    a, b = await nodes("a", "b")
    resolve = {"t": "req", "id": "x1", "cmd": "ResolveApproval", "args": {"approval_id": "ap1", "choice": "always"},
               "origin": {"surface": "pheby"}, "hosted": False}  # fmt: skip
    # the entries, as today's nodes read them: no MAC at all
    await attacker.xadd("agent-bridge:inbox:b", {"c": orjson.dumps({"from": "ghost", "c": resolve})})
    await attacker.xadd("agent-bridge:events", {"n": 7, "node": "ghost", "b": b'[["e",{"forged":1}]]'})
    # the signed format, under a key that is not the cluster's (and one claiming to be node a)
    await attacker.xadd("agent-bridge:inbox:b", _forged("agent-bridge:inbox:b", orjson.dumps(resolve)))
    await attacker.xadd("agent-bridge:events", {"n": 8, **_forged("agent-bridge:events", b'[["e",{"forged":2}]]')})
    await attacker.xadd("agent-bridge:inbox:b", {"h": b"[]", "b": b"{}"})  # half of one
    # the nodes themselves, after all that
    a.bus.send("b", {"t": "req", "id": "legit"})
    a.bus.publish({"legit": 1})
    await until(lambda: b.commands and len(b.events) == 1 and len(a.events) == 1, what="the genuine entries")
    assert b.commands == [("a", {"t": "req", "id": "legit"})]
    assert b.events == a.events and [d for _, _, d in b.events] == [{"legit": 1}]
    assert b.bus.dropped == Counter(unsigned=3, bad_mac=2)  # two in its inbox, one in the events; two forged MACs
    assert a.bus.dropped == Counter(unsigned=1, bad_mac=1)  # the events stream only


async def test_a_copy_of_a_genuine_entry_is_dropped_in_its_stream_and_moved_to_another(nodes, attacker):
    a, b, c = await nodes("a", "b", "c")
    a.bus.send("b", {"t": "req", "id": "cancel-1"})
    a.bus.publish({"e": 1})
    await until(lambda: b.commands and len(b.events) == 1 and len(c.events) == 1, what="the originals")
    [(_, command)] = await attacker.xrange("agent-bridge:inbox:b")
    [(_, event)] = await attacker.xrange("agent-bridge:events")
    await attacker.xadd("agent-bridge:inbox:b", command)  # the same entry again
    await attacker.xadd("agent-bridge:events", event)  # the same numbers
    await attacker.xadd("agent-bridge:events", {**event, b"n": b"2"})  # the next number
    await attacker.xadd("agent-bridge:inbox:c", command)  # a's command to b, into c's inbox
    await attacker.xadd("agent-bridge:events", {b"n": b"3", **{k: command[k] for k in (b"h", b"b", b"m")}})
    a.bus.send("b", {"t": "req", "id": "cancel-2"})
    a.bus.send("c", {"t": "req", "id": "for-c"})
    a.bus.publish({"e": 2})
    await until(lambda: len(b.commands) == 2 and c.commands and len(b.events) == 2 and len(c.events) == 2,
                what="the genuine entries after the copies")  # fmt: skip
    assert [d["id"] for _, d in b.commands] == ["cancel-1", "cancel-2"]
    assert c.commands == [("a", {"t": "req", "id": "for-c"})]
    for x in (a, b, c):
        assert [(n, d) for n, _, d in x.events] == [(1, {"e": 1}), (2, {"e": 2})]
    assert b.bus.dropped == Counter(replayed=3, wrong_stream=1)
    assert c.bus.dropped == Counter(replayed=2, wrong_stream=2)


async def test_a_node_started_later_drops_copies_of_what_was_signed_before_it_started(nodes, attacker):
    (a,) = await nodes("a")
    a.bus.send("late", {"t": "req", "id": "before"})  # sits in late's inbox: late is not running yet
    a.bus.publish({"e": "before"})
    await until(lambda: a.events, what="a's event")
    await a.bus.flush()
    [(_, command)] = await attacker.xrange("agent-bridge:inbox:late")
    [(_, event)] = await attacker.xrange("agent-bridge:events")
    (late,) = await nodes("late")  # joins both streams at their end
    await attacker.xadd("agent-bridge:inbox:late", command)
    await attacker.xadd("agent-bridge:events", {**event, b"n": b"2"})
    a.bus.send("late", {"t": "req", "id": "after"})
    a.bus.publish({"e": "after"})
    await until(lambda: late.commands and late.events, what="what a sent after late started")
    assert late.commands == [("a", {"t": "req", "id": "after"})]
    assert [(n, d) for n, _, d in late.events] == [(2, {"e": "after"})]
    assert late.bus.dropped == Counter(replayed=2)  # it read them before its start, for their counters only


async def test_an_entry_signed_long_before_redis_took_it_is_dropped(nodes, attacker):
    a, b = await nodes("a", "b")
    inbox = "agent-bridge:inbox:b"
    for offset in (-60.0, +60.0):  # a's own signature, its clock a minute off (a copy kept a minute; a bad clock)
        signer = Signer(KEY, "a", a.bus.epoch, clock=lambda offset=offset: time.time() + offset)
        payload = orjson.dumps({"t": "req", "id": f"off-{offset:+.0f}"})
        h, m = signer.sign(inbox, payload)
        await attacker.xadd(inbox, {"h": h, "b": payload, "m": m})
    a.bus.send("b", {"t": "req", "id": "now"})
    await until(lambda: b.commands, what="the command signed now")
    assert b.commands == [("a", {"t": "req", "id": "now"})]
    assert b.bus.dropped == Counter(stale=1, early=1)


async def test_entries_of_a_node_that_is_not_live_are_dropped(nodes, attacker):
    a, b = await nodes("a", "b", ttl=1.0, every=0.2)
    (zombie,) = await nodes("z", ttl=1.0, every=0.2)
    zombie.bus.send("b", {"t": "req", "id": "z-alive"})
    await until(lambda: b.commands, what="z's command while it is live")
    a.bus.send("b", {"t": "req", "id": "a-first-run"})
    await until(lambda: len(b.commands) == 2, what="a's command")
    inbox = "agent-bridge:inbox:b"
    [copied] = [f for _, f in await attacker.xrange(inbox) if b"a-first-run" in f[b"b"]]
    await zombie.bus.kill()  # no goodbye: its key expires
    await a.bus.stop()  # a clean stop, then a restart under its name: a new epoch
    (a2,) = await nodes("a", ttl=1.0, every=0.2)
    loop = asyncio.get_running_loop()
    await until(lambda: not b.bus.live.known("z", zombie.bus.epoch, loop.time()), timeout=10, what="z gone for b")
    # entries signed with the cluster key by a node that is not live: z's next one (its key, its epoch,
    # its next counter), and the first run of a's next one; and a copy of a's first run's command
    for old in (zombie, a):
        payload = orjson.dumps({"t": "req", "id": f"{old.bus.node_id}-zombie"})
        h, m = old.bus._signer.sign(inbox, payload)
        await attacker.xadd(inbox, {"h": h, "b": payload, "m": m})
    await attacker.xadd(inbox, copied)
    a2.bus.send("b", {"t": "req", "id": "a-second-run"})  # the restarted node is heard
    await until(lambda: len(b.commands) == 3, what="the restarted a's command")
    assert [(n, d["id"]) for n, d in b.commands] == [("z", "z-alive"), ("a", "a-first-run"), ("a", "a-second-run")]
    assert b.bus.dropped == Counter(not_live=2, replayed=1)


async def test_a_forger_renumbering_a_genuine_entry_can_only_leave_a_gap(nodes, attacker):
    a, b = await nodes("a", "b")
    for x in (a, b):
        x.bus.floor = 5000  # the store's reservation above every number given (cluster.py)
    a.bus.publish({"e": 1})
    await until(lambda: len(b.events) == 1, what="the first event")
    # a genuine entry the forger took out of the stream before any node read it, put back with a number
    # of its choosing: one already delivered, then one far ahead
    for n, e in ((1, "back"), (100, "ahead")):
        body = orjson.dumps([["e", {"e": e}]])
        h, m = a.bus._signer.sign("agent-bridge:events", body)
        await attacker.xadd("agent-bridge:events", {"n": n, "h": h, "b": body, "m": m})
    await until(lambda: len(a.events) == 2 and len(b.events) == 2, what="the entry put back ahead, delivered")
    a.bus.publish({"e": 2})  # Redis's counter is behind what was delivered: numbered above the reservation
    await until(lambda: len(b.events) == 3 and len(a.events) == 3, what="the events after the forger's")
    for x in (a, b):
        assert [(n, d["e"]) for n, _, d in x.events] == [(1, 1), (100, "ahead"), (5001, 2)]
        assert x.bus.dropped == Counter(renumbered=1)
