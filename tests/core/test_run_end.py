"""The core's run-end rule: a run closes what it opened, whatever ends it, for every source.

A source that drives its own runs (as Hermes and lvmh plugins do) publishes a
``RunFinished`` with its message still open and decisions still pending; the
bridge completes the message (the text so far) and resolves each decision
(``deny``, not accepted, ``decided_by`` saying why) before the run's end goes
out, and the snapshot lists none of them. After a crash the same happens at
the next start (``report_interrupted``).
"""

from __future__ import annotations

import pytest

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.bridge.agent import AgentSource
from bridge_core.bridge.demo import DemoAgent
from bridge_core.bridge.bridge import Bridge
from bridge_core.model.errors import AlreadyResolved
from bridge_core.model.ids import draft_message_id
from tests.waiting import until

PHEBY = cmd.Origin(surface="pheby")


class SelfDrivenSource(AgentSource):
    """Publishes a run's start, some text and two decisions; the test ends the run."""

    name = "self"

    async def send_message(self, conv, text, run_id, request_id):
        cid = conv.conversation_id
        pub = self.bridge.publish
        pub(ev.UserMessageSent(conversation_id=cid, message_id=f"u-{run_id}", text=text, run_id=run_id))
        pub(ev.RunStarted(conversation_id=cid, run_id=run_id, message_id=draft_message_id(run_id)))
        draft = ev.Draft()
        draft.append("half an ans")
        pub(ev.TextDelta(conversation_id=cid, run_id=run_id, message_id=draft_message_id(run_id),
                         delta="half an ans", draft=draft))  # fmt: skip
        pub(ev.ApprovalRequested(conversation_id=cid, run_id=run_id, approval_id=f"a-{run_id}",
                                 session_key="k", command="rm x", description="d"))  # fmt: skip
        pub(ev.ClarifyRequested(conversation_id=cid, run_id=run_id, clarify_id=f"c-{run_id}",
                                session_key="k", question="q?", choices=("yes", "no")))  # fmt: skip
        return run_id


@pytest.fixture
async def bridge(tmp_path):
    b = Bridge(str(tmp_path / "d"), SelfDrivenSource())
    await b.start()
    yield b
    await b.stop()


@pytest.mark.parametrize("status, error, why", [("failed", "boom", "failed"), ("cancelled", None, "cancelled"),
                                                ("completed", None, "completed")])  # fmt: skip
async def test_run_end_closes_message_and_decisions(bridge, status, error, why):
    res = await bridge.execute(cmd.SendMessage(text="go"), PHEBY)
    seen = []
    bridge.hub.subscribe(lambda s, e: seen.append(e))
    bridge.publish(ev.RunFinished(conversation_id=res.conversation_id, run_id=res.run_id, status=status, error=error))
    assert [type(e).__name__ for e in seen] == ["MessageCompleted", "ApprovalResolved", "ClarifyResolved", "RunFinished"]
    done, approval, clarify, _ = seen
    assert (done.message_id, done.text) == (draft_message_id(res.run_id), "half an ans")
    assert (approval.choice, approval.accepted, approval.decided_by) == ("deny", False, why)
    assert (clarify.accepted, clarify.decided_by) == (False, why)
    snap = bridge.snapshot(res.conversation_id)
    assert snap.run is None and snap.approvals == [] and snap.clarifications == []
    assert [m.text for m in snap.messages] == ["go", "half an ans"]
    with pytest.raises(AlreadyResolved):
        await bridge.execute(cmd.ResolveApproval(approval_id=approval.approval_id, choice="once"), PHEBY)


async def test_a_completed_message_is_not_completed_twice(bridge):
    res = await bridge.execute(cmd.SendMessage(text="go"), PHEBY)
    mid = draft_message_id(res.run_id)
    bridge.publish(ev.MessageCompleted(conversation_id=res.conversation_id, message_id=mid, text="full", run_id=res.run_id))
    seen = []
    bridge.hub.subscribe(lambda s, e: seen.append(e))
    bridge.publish(ev.RunFinished(conversation_id=res.conversation_id, run_id=res.run_id, status="completed"))
    assert not any(isinstance(e, ev.MessageCompleted) for e in seen)


async def test_restart_closes_interrupted_run_with_its_pending_decision(tmp_path):
    d = str(tmp_path / "d")
    b = Bridge(d, DemoAgent(approval_timeout=None))
    await b.start()
    res = await b.execute(cmd.SendMessage(text="/approve reboot"), PHEBY)
    conv = b.conversation(res.conversation_id)
    await until(lambda: conv.approvals, what="the demo run's approval request")
    (aid,) = conv.approvals
    b.store.flush()
    b.store.close()  # a crash: nothing more is written, the run never finishes
    b2 = Bridge(d, DemoAgent(approval_timeout=None))
    await b2.start()
    try:
        seen = []
        b2.hub.subscribe(lambda s, e: seen.append(e))
        assert b2.report_interrupted() == 1
        names = [type(e).__name__ for e in seen]
        assert names == ["MessageCompleted", "ApprovalResolved", "RunFinished", "Notification"], names
        resolved = seen[1]
        assert (resolved.approval_id, resolved.choice, resolved.accepted, resolved.decided_by) == (
            aid, "deny", False, "restart")  # fmt: skip
        snap = b2.snapshot(res.conversation_id)
        assert snap.run is None and snap.approvals == []
        b2.store.flush()
        assert b2.store.query("SELECT key FROM settings WHERE key LIKE 'pending-decision:%'") == []
        with pytest.raises(AlreadyResolved):
            await b2.execute(cmd.ResolveApproval(approval_id=aid, choice="once"), PHEBY)
        # and the conversation is usable again
        again = await b2.execute(cmd.SendMessage(text="hi", conversation_id=res.conversation_id), PHEBY)
        assert again.run_id
    finally:
        await b2.stop()
        for t in list(b.tasks._tasks):
            t.cancel()


async def test_a_draft_save_holds_no_frame(bridge):
    """Streaming drafts are saved together at most every DRAFT_SAVE_INTERVAL, a snapshot that may lag what
    was sent by design: the frames after it do not wait for its commit (Store.ticket stays)."""
    res = await bridge.execute(cmd.SendMessage(text="go"), PHEBY)
    await bridge.store.aflush()
    store = bridge.store
    bridge.drafts.save()  # what the run streamed so far
    await store.aflush()
    ticket, submitted = store.ticket, store.submitted
    draft = ev.Draft()
    draft.append("more text")
    mid = draft_message_id(res.run_id)
    bridge.drafts.changed(ev.TextDelta(conversation_id=res.conversation_id, run_id=res.run_id,
                                       message_id=mid, delta="more text", draft=draft))
    assert store.submitted == submitted  # a delta only marks its draft as changed
    bridge.drafts.save()  # what the timer does
    assert store.submitted == submitted + 1 and store.ticket == ticket
    await store.aflush()
    assert store.query("SELECT text FROM messages WHERE message_id=?", (mid,)) == [("more text",)]


async def test_drafts_of_every_streaming_run_are_saved_in_one_write(bridge):
    """Many runs streaming at once cost one write per interval, not one per run; a completed message's
    draft is not saved over its final text; the timer saves what changed without being asked."""
    convs = [(await bridge.execute(cmd.SendMessage(text="go"), PHEBY)) for _ in range(3)]
    await bridge.store.aflush()
    bridge.drafts.save()
    await bridge.store.aflush()
    submitted = bridge.store.submitted
    for i, res in enumerate(convs):
        draft = ev.Draft()
        draft.append(f"draft {i}")
        bridge.drafts.changed(ev.TextDelta(conversation_id=res.conversation_id, run_id=res.run_id,
                                           message_id=draft_message_id(res.run_id), delta="x", draft=draft))
    bridge.drafts.done(draft_message_id(convs[0].run_id))  # completed meanwhile: its own row is final
    await until(lambda: bridge.store.submitted == submitted + 1, timeout=10)  # the timer, one write
    await bridge.store.aflush()
    rows = dict(bridge.store.query("SELECT message_id, text FROM messages WHERE role='assistant'"))
    assert rows.get(draft_message_id(convs[1].run_id)) == "draft 1"
    assert rows.get(draft_message_id(convs[2].run_id)) == "draft 2"
    assert rows.get(draft_message_id(convs[0].run_id)) != "draft 0"
