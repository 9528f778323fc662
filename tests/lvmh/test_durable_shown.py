"""Durable before shown, and a pi session fenced (lvmh_adapter/persistence.py ``after_durable``,
``claim``; docs/scale-out.md "Fenced ownership"): a browser sees an event only once it is stored, in
order, deltas included; a batch whose session another node claimed writes nothing for it and runs
nothing queued behind it. Over a real socket (one bridge, its SQLite store), and the log's rules
beside it on the same store."""

from __future__ import annotations

import asyncio
import threading

from lvmh_adapter.persistence import EFFECT, EventLog
from lvmh_adapter.registry import SessionRecord
from tests.waiting import until

SID = "shown-session-1"


async def test_a_browser_sees_an_event_only_once_it_is_stored(lvmh, plugins, browsers):
    store = lvmh.bridge.store
    p = plugins(SID)
    await p.connect()
    b = await browsers()
    await b.subscribe(SID)
    await p.event("agent_start")
    await b.events_until(SID, lambda e: e["type"] == "agent_start")

    release = threading.Event()
    blocked = store.submit(lambda c: release.wait(30))  # the writer thread is busy: nothing commits
    try:
        await p.event("message_start", message={"role": "assistant", "id": "m1"})
        await p.event("message_update", delta="live")  # never stored, but behind an event that is
        await until(lambda: lvmh.frontends["lvmh"].book.records[SID].high == 2, what="the events received")
        receiving = asyncio.ensure_future(b.events_until(SID, lambda e: e["type"] == "message_update", timeout=30))
        # the subject: both events handled, what shows them waits for a commit that cannot come yet
        log = lvmh.frontends["lvmh"].book.log
        await until(lambda: _waiting(log, SID) >= 2, what="the two events' showing deferred behind their commit")
        assert not receiving.done()
        assert store.query("SELECT seq FROM events WHERE sessionId=?", (SID,)) == [(1,)]
    finally:
        release.set()
    got = await receiving
    assert [(e["seq"], e["type"]) for e in got] == [(2, "message_start"), (3, "message_update")]
    assert store.query("SELECT seq FROM events WHERE sessionId=?", (SID,)) == [(1,), (2,)]
    await asyncio.wrap_future(blocked)


def _waiting(log: EventLog, sid: str) -> int:
    """Effects of ``sid`` held until a batch commits: in the batch submitted last (not yet over) and the next."""
    batches = [b for b in (log._tail, log._batch) if b is not None and not b.over]
    return sum(b.effects[0::EFFECT].count(sid) for b in batches)


async def test_what_is_shown_runs_after_its_commit_in_order_and_at_once_when_nothing_waits(lvmh):
    store = lvmh.bridge.store
    log = EventLog(store)
    seen: list = []
    log.after_durable(SID, seen.append, "idle")  # nothing queued: at once
    assert seen == ["idle"]
    log.upsert_session(SID, {"id": SID}, "plugin")
    log.append(SID, 1, 1, "agent_start", '{"seq": 1}')
    log.after_durable(SID, lambda: seen.append(store.query("SELECT COUNT(*) FROM events WHERE sessionId=?", (SID,))))
    log.after_durable(SID, seen.append, "delta")  # nothing of its own to store: behind the row all the same
    log.flush()
    log.after_durable(SID, seen.append, "behind the batch in flight")
    assert seen == ["idle"]
    await log.settle(SID)
    await until(lambda: len(seen) == 4, what="the effects")
    assert seen == ["idle", [(1,)], "delta", "behind the batch in flight"]


async def test_a_session_claimed_by_another_node_gets_nothing_written_or_shown(lvmh):
    store = lvmh.bridge.store
    log = EventLog(store)
    lost: list = []
    log.on_lost = lost.append
    assert await log.claim(SID, {"id": SID}) == 1
    assert await log.claim(SID, {"id": SID}) == 2  # each hello takes the next epoch
    log.append(SID, 1, 1, "agent_start", '{"seq": 1}')
    shown: list = []
    log.after_durable(SID, shown.append, 1)
    await log.settle(SID)
    assert shown == [1] and lost == [] and log.committed[SID] == 1

    # another node's hello takes the session (the store's epoch moves on); this node does not know yet
    await store.write(lambda c: c.execute("UPDATE sessions SET epoch=epoch+1 WHERE id=?", (SID,)))
    log.append(SID, 2, 2, "message_start", '{"seq": 2}')
    log.reserve(SID, 5000)
    log.set_online(SID, False)
    log.after_durable(SID, shown.append, 2)
    await log.settle(SID)
    await until(lambda: lost, what="the loss reported")
    assert lost == [SID] and shown == [1] and log.committed[SID] == 1
    assert store.query("SELECT seq FROM events WHERE sessionId=?", (SID,)) == [(1,)]
    assert store.query("SELECT lastSeq, seqReserved, epoch FROM sessions WHERE id=?", (SID,)) == [(1, 0, 3)]

    # a delta alone is guarded too (nothing to store, but nothing shown for a lost session either)
    log.after_durable(SID, shown.append, "delta")
    log.check(SID)
    await until(lambda: len(lost) == 2, what="one more guard (one batch)")
    assert shown == [1]
    # taken back by a hello here: written and shown again
    assert await log.claim(SID, {"id": SID}) == 4
    log.append(SID, 3, 3, "agent_start", '{"seq": 3}')
    log.after_durable(SID, shown.append, 3)
    await log.settle(SID)
    await until(lambda: shown == [1, 3], what="shown after the claim")


def test_a_lost_session_counts_its_seqs_from_the_store_again():
    rec = SessionRecord("s", "plugin", {}, high=10)
    rec.plugin_event(200, 1)  # read from a socket after another node's claim: refused by the store
    rec.plugin_delta(250)
    rec.lost()
    rec.refreshed(12, 20, 100)  # the store, at the next hello here
    assert (rec.high, rec.top, rec.reserved, rec.stored) == (12, 20, 20, 100)
    assert rec.plugin_event(13, 2) is True
