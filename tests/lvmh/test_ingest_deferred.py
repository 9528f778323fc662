"""The ingest's deferred effects (durable before shown, lvmh_adapter/persistence.py ``later``; the
ingest figures in docs/performance.md): what a plugin's events leave waiting for their commit is kept
flat in the batch, no tuple, closure or method object made per event (the garbage collector then has
nothing of theirs to scan, and the ingest costs what it cost before events waited for their commit),
and each event still reaches a browser once stored, in order. Over a real socket, one bridge, its
SQLite store."""

from __future__ import annotations

import asyncio
import gc
import threading

from lvmh_adapter.persistence import _Batch
from tests.waiting import until

SID = "deferred-session-1"
EVENTS = 60


def _waiting_effects() -> list:
    """Every item the log's batches not yet committed hold for after their commit."""
    items: list = []
    for obj in gc.get_objects():
        if type(obj) is _Batch and not getattr(obj, "over", False):
            items.extend(obj.effects)
    return items


async def test_events_waiting_for_their_commit_hold_no_object_of_their_own_then_show_in_order(
        lvmh, plugins, browsers):
    fe = lvmh.frontends["lvmh"]
    store = lvmh.bridge.store
    p = plugins(SID)
    await p.connect()
    b = await browsers()
    await b.subscribe(SID)
    await p.event("agent_start")
    await b.events_until(SID, lambda e: e["type"] == "agent_start")

    release = threading.Event()
    blocked = store.submit(lambda c: release.wait(30))  # nothing commits: every event waits
    try:
        for _ in range(EVENTS):
            await p.event("tool_execution_update", toolCallId="t1", toolName="bash", partial="x" * 40)
        await until(lambda: fe.book.records[SID].high == EVENTS + 1, what="the events received")
        waiting = _waiting_effects()
        assert len(waiting) >= EVENTS  # every event's effect waits (none ran: nothing is stored)
        # the subject: what waits is the events' own data (text, numbers, their decoded objects, which
        # the collector does not track) and the few functions that show them, never an object per event
        tracked = {id(x) for x in waiting if gc.is_tracked(x)}
        assert len(tracked) <= 3, f"{len(tracked)} objects the collector tracks wait for {EVENTS} events"
    finally:
        release.set()
    got = await b.events_until(SID, lambda e: e["seq"] == EVENTS + 1, timeout=30)
    assert [e["seq"] for e in got] == list(range(2, EVENTS + 2))
    assert {e["type"] for e in got} == {"tool_execution_update"}
    rows = store.query("SELECT COUNT(*) FROM events WHERE sessionId=?", (SID,))
    assert rows == [(EVENTS + 1,)]
    await asyncio.wrap_future(blocked)
