"""A Pheby client on a node that lost a run's completion still gets the turn in the spec's order (issue 41,
chaos seed 2022 at 2561942, ``turn_out_of_order``: pheby-1 on n2 got ``message.start``, ``message.delta``
'Echo:', then ``run.finished``, and never the message's ``message.complete``).

What the history showed: n2, restarted at 59.3 s, had its conversations' transcripts cold (read from the
store when first needed). PostgreSQL restarted from 60.67 s to 61.47 s while phone-3's run ran on n1. Folding
another node's event that names a message (the user's message, the run's ``MessageCompleted``) asks
whether the transcript holds it already (bridge_core/scale/seen.py), which read the cold transcript from
the store; the read raised ``Unavailable`` ("the database system is shutting down"), the bus reader logged
"delivering event 3145731 failed" and "... 3145737 failed" and went on without them: neither was folded nor
sent to n2's front ends. The run's start, deltas and end name no message and went through. Loomi's
``run.completed`` carries the text; Pheby's ``run.finished`` does not, and the message stayed open. Now a
run that ends while its message is open on a connection gets that message's ``message.complete`` first,
with the text the run's end carries (pheby_adapter/protocol.py ``Turns``).

A fold the store cannot answer now waits for it (bridge_core/scale/foldwait.py;
tests/scale/test_fold_waits_for_store.py); the rule here still covers an event lost otherwise (a fold
failing for another reason, events gone for good from the stream). So here node b's reads of the
conversation's transcript fail while a's run streams with an error that is not the store being away; the
events go through b's real bus reader, and the clients are spec-built over real sockets.
"""

from __future__ import annotations

import logging

from bridge_core.model.errors import Unavailable
from bridge_core.model.ids import draft_message_id
from tests.scale.test_behind_transcript import _cold
from tests.scale.test_cluster import _app, _nodes

TEXT = "says m63"


def _store_down_for(svc, cid: str, error: type = Unavailable) -> list:
    """``svc``'s reads of ``cid``'s transcript raise as a restarting PostgreSQL made them (``Unavailable``), or
    ``error`` (the calls, kept); ``del svc.bridge.store.transcript`` lets them through again."""
    store = svc.bridge.store
    read = store.transcript
    calls: list = []

    def transcript(conversation_id, *args, **kw):
        if conversation_id == cid:
            calls.append(conversation_id)
            raise error("cannot reach the store: FATAL: the database system is shutting down")
        return read(conversation_id, *args, **kw)

    store.transcript = transcript
    return calls


async def test_a_run_whose_completion_its_node_lost_still_completes_its_message_first(
        service_factory, engines, tmp_path, caplog):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    pb = None
    try:
        cid = await pa.create("made before b started")
        first = (await pa.chat(cid, "first"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == first)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b")
        pb = await _app(b)
        await _cold(b, pa, pb, cid)  # as on n2, restarted: the transcript is read when first needed
        calls = _store_down_for(b, cid, RuntimeError)  # (Unavailable: the delivery waits, foldwait.py)
        with caplog.at_level(logging.ERROR, logger="agent_bridge.bus"):
            run_id = (await pa.chat(cid, TEXT))["run_id"]
            mid = draft_message_id(run_id)
            finished = await pb.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 20)
        assert calls, "b never read the transcript: the completion was not lost for the seed's reason"
        assert any("delivering event" in r.getMessage() for r in caplog.records), "no event was dropped"
        assert finished["status"] == "completed"

        turn = [f for f in pb.conn_frames if f.get("run_id") == run_id or f.get("message_id") == mid]
        kinds = [f["type"] for f in turn if f["type"] != "message.delta"]
        assert kinds == ["run.accepted", "message.start", "message.complete", "run.finished"], kinds
        (complete,) = [f for f in turn if f["type"] == "message.complete"]
        done = await pa.wait_frame(lambda f: f["type"] == "message.complete" and f["message_id"] == mid)
        assert complete["text"] == done["text"] == f"Echo: {TEXT}", (complete, done)
        assert pb.violations == [] and pa.violations == [], (pb.violations, pa.violations)
        assert pb.view(cid).open_bubbles() == []
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()
