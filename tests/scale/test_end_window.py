"""A run's end read back at the edge of the window comes with its message's completion (chaos seed 2104,
``transcript_contradicts_client``, docs/performance.md "Chaos"). A node killed 0.5 s after a short run ended
left the end and the completion in the stream, not in its store; its restart, 15 s later (its claim let go
by another node, nobody took the run over), read them back (bridge_core/scale/cluster.py ``read_end``) one
read after another, each over the last ``TEXT_BACK`` s from the stream's newest entry then. The busy
stream moved on between the reads: the end, at the window's oldest edge, was found, the completion, a
millisecond older, was not. The end was written, the run no longer open, and its message was never
written: every phone had ``Ran: cmd-phone-3-10``, no transcript had the message.

Over a real Redis: the previous life's events signed and published by its bus, the stream moved on by
another node while the restart reads (``Moving``: the state the run hit, reached by waiting for Redis's
own clock, never a fixed sleep). One pass over one window (``readback.RunBack``) finds both."""

from __future__ import annotations

import redis.asyncio as aioredis

from bridge_core.scale import cluster
from bridge_core.scale.busauth import entry_order
from bridge_core.scale.cluster import Cluster
from bridge_core.scale.redisbus import RedisBus
from tests.scale.test_crash_text import KEY
from tests.waiting import until

RUN = "r2104"
BACK = 3.0  # s: TEXT_BACK for the test (16 s in the product)
APART = 1.5  # s between the completion's entry and the end's (milliseconds in the run: the same edge)


def _completed() -> dict:
    return {"event": "MessageCompleted", "conversation_id": "c1", "message_id": f"draft-{RUN}",
            "text": "Ran: cmd-phone-3-10", "run_id": RUN, "kind": "normal", "ts": 1.0}


def _finished() -> dict:
    return {"event": "RunFinished", "conversation_id": "c1", "run_id": RUN, "status": "completed",
            "error": None, "text": "Ran: cmd-phone-3-10", "ts": 1.0}


def _filler(k: int) -> dict:
    return {"event": "TextDelta", "conversation_id": "c2", "run_id": "other", "message_id": "draft-other",
            "delta": "tok ", "draft": "tok " * k, "kind": "text", "iteration": 0, "ts": 1.0}


async def _now_ms(r: aioredis.Redis) -> int:
    sec, usec = await r.time()
    return sec * 1000 + usec // 1000


class Moving(RedisBus):
    """A restarted node's bus while another node keeps publishing: after its first read back, the stream's newest
    entry is past ``target`` ms (the completion out of a window taken from there, the end still in)."""

    target = 0
    other: RedisBus
    raw: aioredis.Redis

    async def newest(self, needle, match, back):
        got = await super().newest(needle, match, back)
        if self.target:
            target, self.target = self.target, 0
            await until(lambda: _past(self.raw, target), 10, "Redis's clock past the edge")
            self.other.publish(_filler(1))
            await until(lambda: self._newest_past(target), 10, "the other node's entry in the stream")
        return got

    async def _newest_past(self, target: int) -> bool:
        last = await self.raw.xrevrange(self.events_key, count=1)
        return bool(last) and entry_order(last[0][0])[0] > target


async def _entry_ms(r: aioredis.Redis, key: str, event: str) -> int:
    for entry_id, fields in await r.xrevrange(key):
        if event.encode() in fields[b"b"]:
            return entry_order(entry_id)[0]
    raise AssertionError(f"no {event} entry")


async def test_a_run_end_at_the_window_edge_is_read_back_with_its_completion(redis_url, monkeypatch):
    monkeypatch.setattr(cluster, "TEXT_BACK", BACK)
    raw = aioredis.from_url(redis_url)
    first, other, reader = RedisBus(redis_url, "n1", key=KEY), RedisBus(redis_url, "n2", key=KEY), None
    got: list = []
    await first.start(lambda n, node, data: got.append(data))
    await other.start(lambda n, node, data: None)
    try:
        first.publish(_completed())
        await until(lambda: len(got) == 1, what="the completion in the stream")
        done_ms = await _entry_ms(raw, first.events_key, "MessageCompleted")
        await until(lambda: _past(raw, done_ms + APART * 1000), 10, "the run's end, later")
        first.publish(_finished())
        await until(lambda: len(got) == 2, what="the end in the stream")
        end_ms = await _entry_ms(raw, first.events_key, "RunFinished")
        await first.kill()  # its store never had them

        reader = Moving(redis_url, "n1", key=KEY)  # restarted under its own name
        reader.other, reader.raw = other, raw
        await reader.start(lambda n, node, data: None)
        reader.target = done_ms + int(BACK * 1000)  # the stream moves on past it after the first read
        node = Cluster.__new__(Cluster)
        node.bus = reader
        read = await node.read_end(RUN)
        newest = entry_order((await raw.xrevrange(first.events_key, count=1))[0][0])[0]
        assert newest - int(BACK * 1000) <= end_ms, "the window moved past the end too: no edge tested"
        assert [d["event"] for d in read] == ["MessageCompleted", "RunFinished"], read
        assert read[0]["text"] == "Ran: cmd-phone-3-10"
    finally:
        for bus in (other, reader):
            if bus is not None:
                await bus.stop()
        await raw.aclose()


async def _past(r: aioredis.Redis, ms: float) -> bool:
    return await _now_ms(r) > ms
