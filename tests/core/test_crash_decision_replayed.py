"""A kill -9 of the embedded node (one `serve` process, SQLite) right after an approval was resolved, the
resolution journaled for Loomi (durable at once) while the core's write of it was held: the phone replays
that ``approval.resolved`` after the restart and gets no second one (issue 41, ``decision_not_once``).

Before: the restart found the approval pending in the store (its resolution's write lost in the kill) and
the run open, and closed the run by the one rule, resolving the approval again (deny, ``agent``) after the
``once`` the phone had just replayed. The rule: every decision resolved once on every surface; the decision
a durable record carried wins over a restart's default.

Over real sockets to a real process; the test's own SQLite transaction holds the store's write lock (the
batch with the resolution waits, and so does every frame behind it) while the process is killed.
"""

from __future__ import annotations

import glob
import os
import sqlite3

import pytest

from bridge_core.bridge.decisions import PENDING_KEY
from loomi_adapter.journal import decode
from tests.hardening.clients import LoomiClient
from tests.hardening.proc import process_factory
from tests.waiting import until


@pytest.fixture
def serve(tmp_path):
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def _journaled(data_dir: str, kind: bytes, needle: str) -> bool:
    for path in glob.glob(os.path.join(data_dir, "loomi-journal.*")):
        with open(path, "rb") as f:
            events = decode(f.read())[0]
        if any(kind in body and needle.encode() in body for _, body in events):
            return True
    return False


def _pending(db: str, approval_id: str) -> bool:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT 1 FROM settings WHERE key=?", (PENDING_KEY + approval_id,)).fetchone() is not None
    finally:
        conn.close()


def _resolved(frames: list, approval_id: str) -> list:
    return [(f["payload"].get("choice"), f["payload"].get("decided_by")) for f in frames
            if f.get("type") == "approval.resolved" and f["payload"].get("approval_id") == approval_id]


async def test_an_approval_resolved_right_before_a_kill_is_resolved_once_after_the_restart(serve):
    srv = serve("embedded", adapters="loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    db = srv.db_path()
    held = None
    try:
        await phone.send("session.send", {"text": "/approve make all", "request_id": "m1"})
        asked = (await phone.until(lambda f: f.get("type") == "approval.required", 15))[-1]
        aid, run_id = asked["payload"]["approval_id"], asked["run_id"]
        await until(lambda: _pending(db, aid), what="the pending approval's row committed")
        held = sqlite3.connect(db, isolation_level=None)
        held.execute("BEGIN IMMEDIATE")  # the store's writer waits: the resolution is not committed
        await phone.send("approval.resolve", {"approval_id": aid, "choice": "once", "request_id": "a1"})
        await until(lambda: _journaled(srv.data_dir, b'"approval.resolved"', aid), 20, "the resolution journaled")
        srv.kill9()
        held.rollback()
        held.close()
        held = None
        assert _pending(db, aid)
        last_seq = phone.last_seq
        await phone.close()

        srv.start()
        phone = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
        await phone.until(lambda f: f.get("type") in ("run.completed", "run.failed") and f.get("run_id") == run_id, 15)
        await phone.send("session.send", {"text": "after the restart", "request_id": "m2", "task_id": asked["task_id"]})
        await phone.until(lambda f: f.get("type") == "run.completed" and f.get("run_id") not in (None, run_id), 15)
        assert _resolved(phone.frames, aid) == [("once", "remote")]  # once, as the phone decided
        await until(lambda: not _pending(db, aid), what="the resolution written")
    finally:
        if held is not None:
            held.close()
        await phone.close()


# --- the core's rule, on the store: a resolution a durable record holds leaves nothing pending to resolve ---


async def test_resolutions_a_durable_record_holds_are_not_resolved_again_by_the_restart(tmp_path):
    """Loomi's journaled ``approval.resolved`` and ``clarify.resolved`` frames (``journal.row_events``) drop
    the decisions' pending rows before the store is loaded: the restart's close of their run resolves
    neither again (before: both resolved again, denied and unanswered, ``decided_by`` restart)."""
    from bridge_core.bridge.bridge import Bridge
    from bridge_core.bridge.decisions import DecisionLedger
    from bridge_core.bridge.demo import DemoAgent
    from bridge_core.model import events as ev
    from loomi_adapter.codec import render
    from loomi_adapter.journal import row_events

    opened = [ev.ConversationCreated(conversation_id="c1", name="asked", ts=1.0),
              ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1", ts=2.0)]
    asked = [ev.ApprovalRequested(conversation_id="c1", run_id="r1", approval_id="a1", session_key="s",
                                  command="make all", description=""),
             ev.ClarifyRequested(conversation_id="c1", run_id="r1", clarify_id="k1", session_key="s",
                                 question="go on?")]  # fmt: skip
    answered = [ev.ApprovalResolved(conversation_id="c1", run_id="r1", approval_id="a1", choice="once"),
                ev.ClarifyResolved(conversation_id="c1", run_id="r1", clarify_id="k1", response="yes")]
    resolved = row_events(body[1:] for e in answered for body in render(e))  # as the journal's rows hold them
    assert [(type(e), e.run_id) for e in resolved] == [(ev.ApprovalResolved, "r1"), (ev.ClarifyResolved, "r1")]
    d = str(tmp_path / "d")
    b = Bridge(d, DemoAgent())  # the life that asked (the run, its decisions pending in the store), killed
    b.add_durable_rows(lambda: list(opened))
    await b.start()
    for e in asked:
        DecisionLedger.record(b.store, e)
    await b.stop()

    b = Bridge(d, DemoAgent())  # the restart: the record holds the resolutions the store lacks
    b.add_durable_rows(lambda: opened + resolved)
    await b.start()
    try:
        conv = b.conversations["c1"]
        assert conv.run is not None and conv.run.run_id == "r1"  # left open: closed by the restart
        assert not conv.approvals and not conv.clarifications
        published: list = []
        b.hub.subscribe(lambda n, e: published.append(e))
        assert b.report_interrupted() == 1
        await until(lambda: any(type(e) is ev.RunFinished for e in published), what="the run closed")
        assert not [e for e in published if type(e) in (ev.ApprovalResolved, ev.ClarifyResolved)], published
        assert b.store.query("SELECT key FROM settings WHERE key LIKE 'pending-decision:%'") == []
    finally:
        await b.stop()
