"""A node whose fold of another node's event cannot read the store holds that delivery and every later one, and
folds and shows them in stream order once the store answers again (issue 41; chaos seeds 2018 ``view_diverged``,
2022 ``turn_out_of_order``, 2104: "bus: delivering event N failed" while PostgreSQL restarted;
bridge_core/scale/foldwait.py).

Folding an event that names a message asks whether the conversation's transcript holds it (seen.py); a cold
transcript is read from the store then, and a restarting PostgreSQL makes that read raise ``Unavailable``. The
bus reader logged the failure and went on: the user's message and the run's completion were never in that
node's state nor on its front ends. Here node b's reads of the conversation's transcript fail while a's run
streams, until the test lets them through again; the events go through b's real bus reader, and the clients
(Pheby, Loomi) are spec-built over real sockets.
"""

from __future__ import annotations

import logging

from bridge_core.model.errors import Unavailable
from bridge_core.model.ids import draft_message_id
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.loomi.helpers import new_token
from tests.scale.test_behind_transcript import _cold
from tests.scale.test_cluster import _app, _nodes
from tests.scale.test_pheby_lost_completion import _store_down_for
from tests.waiting import until

TEXT = "says m63 while the store restarts"
ADAPTERS = ("pheby", "loomi")


def _hub(svc) -> list:
    """What ``svc``'s hub publishes, as (number, event type, conversation id), in order."""
    out: list = []
    svc.bridge.hub.subscribe(lambda n, e: out.append((n, type(e).__name__, getattr(e, "conversation_id", None))))
    return out


async def test_a_fold_that_cannot_read_the_store_waits_for_it_and_loses_nothing(
        service_factory, engines, tmp_path, caplog):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=ADAPTERS)
    pa, pb, phone = await _app(a), None, LoomiApp("Phone on b")
    try:
        cid = await pa.create("made before b started")
        first = (await pa.chat(cid, "first"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == first)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b", adapters=ADAPTERS)
        pb = await _app(b)
        await phone.pair(dict(await new_token(b), url=f"ws://127.0.0.1:{b.ports['loomi']}/ws"))
        await _cold(b, pa, pb, cid)  # as on n2, restarted: the transcript is read when first needed
        on_a, on_b = _hub(a), _hub(b)
        calls = _store_down_for(b, cid)
        with caplog.at_level(logging.WARNING):
            run_id = (await pa.chat(cid, TEXT))["run_id"]
            mid = draft_message_id(run_id)
            await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 20)
            (end,) = [n for n, t, c in on_a if t == "RunFinished" and c == cid]
            await until(lambda: b.bridge.cluster.bus._last_n >= end, what="b's bus reading the run's end")
            assert calls, "b never read the transcript: its fold did not need the store"
            # b's bus read the whole run; b showed none of it: the user's message could not be folded, and all
            # that follows waits behind it (stream order), the run's end included
            assert [x for x in on_b if x[2] == cid] == [], on_b
            assert not [f for f in pb.conn_frames if f.get("run_id") == run_id], pb.conn_frames[-4:]
            assert not phone.find("run.started", run_id=run_id)

            del b.bridge.store.transcript  # PostgreSQL is back: the store's own read again
            finished = await pb.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 20)
            done = (await phone.wait_for("run.completed", run_id=run_id))["payload"]
        assert not [r for r in caplog.records if "delivering event" in r.getMessage()], "an event was dropped"
        assert any("wait for it" in r.getMessage() for r in caplog.records)

        # b's hub published every event of the conversation a's did, with the same numbers, in order, once
        ours = [x for x in on_a if x[2] == cid]
        assert [x for x in on_b if x[2] == cid] == ours, (on_b, ours)
        assert [t for _, t, _ in ours][:2] == ["UserMessageSent", "RunStarted"] and "MessageCompleted" in [
            t for _, t, _ in ours]  # fmt: skip

        # the Pheby client on b: the turn in the spec's order, the real completion before the run's end
        assert finished["status"] == "completed"
        turn = [f for f in pb.conn_frames if f.get("run_id") == run_id or f.get("message_id") == mid]
        kinds = [f["type"] for f in turn if f["type"] != "message.delta"]
        assert kinds == ["run.accepted", "message.start", "message.complete", "run.finished"], kinds
        assert pb.violations == [] and pa.violations == [], (pb.violations, pa.violations)
        assert pb.view(cid).open_bubbles() == []

        # the phone on b: the user's message, the run whole, each once
        said = [f["payload"] for f in phone.find("session.message") if f["payload"]["text"] == TEXT]
        assert [(m["role"], m["run_id"]) for m in said] == [("user", run_id)], said
        assert len(phone.find("run.started", run_id=run_id)) == len(phone.completed(run_id)) == 1
        assert done["status"] == "completed" and done["text"] == phone.run_text(run_id) == f"Echo: {TEXT}", done
        assert phone.seqs() == sorted(set(phone.seqs())) and phone.dropped == []

        # b's state: the conversation's messages, each once
        texts = [(m.role, m.text) for m in b.bridge.conversations[cid].messages]
        assert texts[-2:] == [("user", TEXT), ("assistant", f"Echo: {TEXT}")], texts
        assert texts.count(("user", TEXT)) == 1 and len(b.bridge.cluster.waits.held) == 0
    finally:
        await close_all()
        await pa.close()
        if pb is not None:
            await pb.close()

