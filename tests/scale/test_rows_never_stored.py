"""Rows a node numbered for a phone and never stored: the phone's next hello is told ``truncated``
(chaos seed 2001, ``deltas_incomplete``; issue 41, "Deltas missing without a trace").

What the history showed: phone-1 streamed a run's deltas from n1 and was cut off at 45.76 s; n1 went on
numbering it over its rows (a source numbers a device that went away until another hello claims it:
loomi_adapter/history.py). PostgreSQL restarted at 45.98 s to 46.42 s; the three deltas n1 rendered at
46.02 s to 46.03 s never reached ``loomi_frames`` (their batch's write failed; the batches before and
after committed). The phone's hello to n2 at 47.27 s rebuilt its numbering from the store: ``m +
offset`` over n1's rows, so the replay went 37617, 37621 and the three events in between were lost with
``truncated: false``.

The core's real store and Loomi's real rows and claims, no socket: the rule is what a rebuild makes of
a row missing between two stored ones of a span (``history.rebuild``). The batch's failure is made by
its write raising, as a refused commit does (the store logs it and goes on with the next batch).
"""

from __future__ import annotations

import sqlite3

import orjson

from loomi_adapter import codec
from loomi_adapter.cluster import ClusterRegistry
from tests.scale.claims import delta_tail, hello, texts as _texts

T = 1_796_570_714.0
LOST = range(11, 14)  # the events whose rows' batch failed


def _tail(n: int) -> bytes:
    return delta_tail(n, T)


def _failing(write):
    """The registry's row write, failing for every batch holding a row of the ``LOST`` events."""
    def fn(c, b):
        if any(row[2] in LOST for row in b.events):
            raise sqlite3.OperationalError("the connection was lost (a PostgreSQL restart)")
        write(c, b)
    return fn


async def test_a_phone_numbered_over_rows_never_stored_is_told_truncated(store):
    n1 = ClusterRegistry(store, "n1")
    await n1.prepare()
    d, credential = await n1.pair(codec.DeviceInfo(model="Pixel 9"))
    d, _ = await hello(n1, d.device_id, credential, None)
    got = []
    for n in range(1, 6):
        assert n1.wants(n)
        got += [f for dev, f in n1.record([_tail(n)], n) if dev is d]
        store.flush()
    last_seq = orjson.loads(got[-1])["seq"]
    assert _texts(got) == ["e1", "e2", "e3", "e4", "e5"]

    # the phone is cut off; n1 goes on numbering it over its rows, and one batch of them fails
    n1.detach(d)
    n1._rows._write = _failing(n1._rows._write)
    for n in range(6, 21):
        assert n1.wants(n)
        n1.record([_tail(n)], n)
        if n in (10, 13):
            store.flush()
    store.flush()
    stored = [n for (n,) in store.query("SELECT n FROM loomi_frames WHERE source=? ORDER BY m", (n1.source,))]
    assert stored == [n for n in range(1, 21) if n not in LOST]  # the batch failed, those after it committed

    # the phone's hello to n2: the events it can be given, and told the three it cannot
    n2 = ClusterRegistry(store, "n2")
    await n2.prepare()
    d2, res = await hello(n2, d.device_id, credential, last_seq)
    assert _texts(res.frames) == [f"e{n}" for n in range(6, 21) if n not in LOST]
    assert res.truncated is True, "events numbered for the phone and never stored were passed over silently"


async def test_a_catch_up_served_over_another_nodes_rows_never_stored_is_truncated(store):
    """The same hole met by a node catching the phone up from another source's rows (``_catch_up``): the
    phone left n1's numbering at event 5 (a hello to n3, which then numbered nothing), n1's rows of events
    6..20 lack 11..13, and n2, which joined at 21, serves the phone 6..20 from n1's rows."""
    n1 = ClusterRegistry(store, "n1")
    await n1.prepare()
    d, credential = await n1.pair(codec.DeviceInfo(model="Pixel 9"))
    d, _ = await hello(n1, d.device_id, credential, None)
    for n in range(1, 6):
        assert n1.wants(n)
        n1.record([_tail(n)], n)
    store.flush()
    n3 = ClusterRegistry(store, "n3")
    await n3.prepare()
    d3, res = await hello(n3, d.device_id, credential, d.log.seq)
    assert res.truncated is False
    last_seq = d3.log.seq
    n3.detach(d3)  # then n3 is gone, having numbered nothing more

    n1._rows._write = _failing(n1._rows._write)
    for n in range(6, 21):
        assert n1.wants(n)
        n1.record([_tail(n)], n)
        if n in (10, 13):
            store.flush()
    store.flush()
    n2 = ClusterRegistry(store, "n2")
    await n2.prepare()
    for n in (21, 22):
        assert n2.wants(n)
        n2.record([_tail(n)], n)
    store.flush()
    _, res = await hello(n2, d.device_id, credential, last_seq)
    assert _texts(res.frames) == [f"e{n}" for n in range(6, 23) if n not in LOST]
    assert res.truncated is True, "a catch-up over rows never stored passed over their events silently"


async def test_consecutive_rows_replay_untruncated(store):
    """The legitimate path beside it: every row stored, the replay whole and not truncated."""
    n1 = ClusterRegistry(store, "n1")
    await n1.prepare()
    d, credential = await n1.pair(codec.DeviceInfo(model="Pixel 9"))
    d, _ = await hello(n1, d.device_id, credential, None)
    assert n1.wants(1)
    got = [f for dev, f in n1.record([_tail(1)], 1) if dev is d]
    last_seq = orjson.loads(got[-1])["seq"]
    n1.detach(d)
    for n in range(2, 21):
        assert n1.wants(n)
        n1.record([_tail(n)], n)
    store.flush()
    n2 = ClusterRegistry(store, "n2")
    await n2.prepare()
    _, res = await hello(n2, d.device_id, credential, last_seq)
    assert _texts(res.frames) == [f"e{n}" for n in range(2, 21)]
    assert [orjson.loads(f)["seq"] for f in res.frames] == list(range(last_seq + 1, last_seq + 20))
    assert res.truncated is False
