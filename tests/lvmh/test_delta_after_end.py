"""A run's text delta delivered again once the run ended here renders nothing, as its completed message
does (lvmh_adapter/render.py ``_delta``, ``_completed``; issue 41).

Every node stores the lvmh events it renders of a bridge conversation (docs/scale-out.md "Durable before
shown"): a node restarted folds the last seconds of the stream again, runs that ended among them. A delta
of such a run was rendered as a new message ``assistant`` (no draft id: a ``message_start`` no browser
was shown), which that node would now store under the delta's seq.
"""

from __future__ import annotations

from bridge_core.model import events as ev
from lvmh_adapter.render import Renderer

CID = "c-again"


def _delta(text: str) -> ev.TextDelta:
    return ev.TextDelta(conversation_id=CID, run_id="r1", message_id="draft-r1", delta=text)


def test_a_delta_of_a_run_that_ended_here_renders_nothing():
    r = Renderer(lambda cid: {"id": cid})
    r.render(ev.RunStarted(conversation_id=CID, run_id="r1", message_id="draft-r1"))
    assert r.render(_delta("hi")) == [("message_update", {"delta": "hi"})]
    r.render(ev.MessageCompleted(conversation_id=CID, run_id="r1", message_id="draft-r1", text="hi"))
    r.render(ev.RunFinished(conversation_id=CID, run_id="r1", status="completed"))
    assert r.render(_delta("hi")) == []
    assert r.open_message(CID) is None


def test_a_delta_of_a_run_the_store_shows_ended_renders_nothing():
    """A node restarted after the run ended: ``_rebuild`` finds it not open in the store (None)."""
    r = Renderer(lambda cid: {"id": cid})
    r.rebuild(CID, "r1", None)
    assert r.render(_delta("late")) == []
    r.render(ev.RunStarted(conversation_id=CID, run_id="r2", message_id="draft-r2"))
    assert r.render(ev.TextDelta(conversation_id=CID, run_id="r2", message_id="draft-r2", delta="x")) == [
        ("message_update", {"delta": "x"})]
