"""A node's lvmh rendering of a run is a function of the stored events, not of what its memory saw
(issue 41, chaos seed 2000 ``view_diverged``; docs/scale-out.md "Durable before shown").

Several nodes store a bridge conversation's lvmh events under the same seqs (``INSERT OR IGNORE``):
a node restarted mid-run folds what the bus held before its front ends restore what the store left
open, so its renderer met the run's end without the run: it rendered the run's completed message as
a message outside any run (a ``message_start`` then a ``message_end``) where the others rendered only
the ``message_end``. The store then held, one seq after the ``message_end`` every browser saw, a second
``message_end`` of the same message no browser saw. Rendered events of a run whose start this renderer
never saw now rebuild the run and its open message from the stored events first.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from lvmh_adapter.render import OpenRun, Renderer

CID = "c-rebuilt"


def test_a_restored_run_numbers_its_later_messages_from_the_draft_id():
    """What a restart restores opens the run's later messages with the ids every other node gives them
    (before: ``assistant-1``, no draft id)."""
    seen = Renderer(lambda cid: {"id": cid})
    seen.render(ev.RunStarted(conversation_id=CID, run_id="r1", message_id="draft-r1"))
    seen.render(ev.InterimMessage(conversation_id=CID, run_id="r1", text="first"))
    stored = OpenRun()
    for etype, obj in [("agent_start", {"runId": "r1"}),
                       ("message_start", {"message": {"role": "assistant", "id": "draft-r1"}}),
                       ("message_end", {"message": {"role": "assistant", "id": "draft-r1", "text": "first"}})]:
        stored.feed(etype, obj)
    restored = Renderer(lambda cid: {"id": cid})
    restored.restore(CID, stored)
    delta = ev.TextDelta(conversation_id=CID, run_id="r1", message_id="draft-r1", delta="more")
    want = seen.render(delta)
    assert want[0] == ("message_start", {"message": {"role": "assistant", "id": "draft-r1-1"}})
    assert restored.render(delta) == want


async def test_a_renderer_that_never_saw_the_run_start_renders_its_end_as_every_node_does(lvmh, api):
    """Over the daemon: the renderer's memory of a run is lost while the run waits for an approval (as a
    node restarted mid-run holds it); the run's end stores one ``message_start`` and one ``message_end``
    of its message, as a node that saw the whole run stores."""
    fe = lvmh.frontends["lvmh"]
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="rebuilt"), cmd.LOCAL)
    sid = conv.conversation_id
    status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "/approve make all"})
    assert status == 200
    evs = await api.wait_events(sid, lambda e: any(x["type"] == "approval_request" for x in e))
    draft = next(e["message"]["id"] for e in evs if e["type"] == "message_start" and e["message"]["role"] == "assistant")
    aid = next(e["approvalId"] for e in evs if e["type"] == "approval_request")

    fe.book.renderer.forget(sid)  # what a node restarted mid-run holds of it before its front ends start

    status, _ = await api.post(f"/api/approvals/{aid}", {"choice": "once"})
    assert status == 200
    evs = await api.wait_events(sid, lambda e: bool(e) and e[-1]["type"] == "agent_settled")
    assistant = [(e["type"], e["message"]["id"]) for e in evs
                 if e["type"] in ("message_start", "message_end") and e["message"]["role"] == "assistant"]
    assert assistant == [("message_start", draft), ("message_end", draft)], assistant
    end = next(e for e in evs if e["type"] == "message_end" and e["message"]["id"] == draft)
    assert end["message"]["text"] == "Ran: make all"
    assert [e["type"] for e in evs].count("agent_end") == 1
