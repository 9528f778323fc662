"""A node joining the stream stores events a phone got elsewhere after a reply of its opened a span:
the phone's next hello must not replay them under new seqs (chaos seed 2003, ``event_twice``; issue 41).

What the history showed: a Redis restart, then n3 killed -9 while a phone streamed there. n3, started
again, took the phone's hello before it had stored any event: its position was the newest event any
node stored (``ClusterRegistry.prepare``), the phone's cursor no higher, so the phone was to be numbered
from the next event on. A gap in the stream closed the phone (``error unavailable``, a reply's seq):
the reply's span started over n3's next rows. Then n3 stored the events of its join (the stream's last
5 s, below the phone's cursor: the phone had got them from n3's previous life, the new life's rows lack
only that life's own entries). The next hello rebuilt the device from the store (``history.rebuild``:
every row of a span's source after it is the device's) and replayed them under new seqs: a user's
message, a run's start and its completion twice on the phone.

The core's real store (SQLite) and Loomi's real rows and claims, no socket: the rule is which rows a
reply's span covers. With the fix the reply's seq is the epoch's reply seq (no span) until the node
stored the events up to the phone's cursor, and the next hello replays exactly what the phone missed.
"""

from __future__ import annotations

import orjson

from bridge_core.bridge.sqlite import Store
from loomi_adapter import codec
from loomi_adapter.cluster import ClusterRegistry
from tests.scale.claims import hello, with_tables

T = 1_796_560_000.0


def _tail(n: int) -> bytes:
    """Event ``n``'s frame as a node stores it (without the opening brace)."""
    body = orjson.dumps({"v": 1, "ts": T + n / 10, "type": "run.delta", "task_id": "c1", "run_id": "r1",
                         "payload": {"text": f"e{n}"}})
    return body[1:]


def _event(reg: ClusterRegistry, n: int) -> list[tuple]:
    """Event ``n`` delivered to ``reg`` as the server hands it over (loomi_adapter/server.py ``on_event``)."""
    assert reg.wants(n)
    return reg.record([_tail(n)], n)


def _events(frames: list[bytes]) -> list[str]:
    return [orjson.loads(f)["payload"]["text"] for f in frames]


async def test_events_a_joining_node_stores_below_a_phones_cursor_are_not_replayed_again(tmp_path):
    store = with_tables(Store(str(tmp_path / "core.db")).open())  # (the cluster's holes: none here)
    try:
        # n3's previous life: the phone numbered for events 1..20 there, then n3 killed (nothing more written)
        old = ClusterRegistry(store, "n3")
        await old.prepare()
        d, credential = await old.pair(codec.DeviceInfo(model="Pixel 9"))
        d, res = await hello(old, d.device_id, credential, None)
        got = []
        for n in range(1, 21):
            got += [f for dev, f in _event(old, n) if dev is d]
        store.flush()
        last_seq = d.log.seq
        assert len(got) == 20

        # n3 started again: no event stored yet, its position the newest event stored (20)
        new = ClusterRegistry(store, "n3")
        await new.prepare()
        assert new.position == 20
        d, res = await hello(new, d.device_id, credential, last_seq)
        assert res.frames == [] and res.truncated is False
        reply = new.next_seq(d)  # a gap closed the phone: ``error unavailable`` takes a seq
        assert reply == last_seq + 1
        new.detach(d)
        store.flush()

        # then n3 stores its join: the stream's last seconds (events 15..20, the phone had them), and what
        # follows (21, 22: the phone is away, it missed them)
        for n in range(15, 23):
            _event(new, n)
        store.flush()

        # the phone's next hello: exactly what it missed, once, right after the reply's seq
        d, res = await hello(new, d.device_id, credential, reply)
        assert res.truncated is False
        assert _events(res.frames) == ["e21", "e22"], _events(res.frames)
        assert [orjson.loads(f)["seq"] for f in res.frames] == [reply + 1, reply + 2]
        live = [f for dev, f in _event(new, 23) if dev is d]
        assert [orjson.loads(f)["seq"] for f in live] == [reply + 3] and _events(live) == ["e23"]
    finally:
        store.close()
