"""The Hermes agent source against fakes (no Hermes needed): 0.19.0 paths and the newer-Hermes ones."""

from __future__ import annotations

import os

import pytest

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from agent_bridge_cli.hermes.source import HermesAgent, tool_preview
from bridge_core.bridge.bridge import Bridge
from bridge_core.model.errors import BadRequest, NotFound
from tests.waiting import until

from .fakes import FakeAdapter, FakeApi

ORIGIN = cmd.Origin(surface="pheby")


@pytest.fixture
async def rig(tmp_path):
    made = []

    async def make(api=None, platforms=("pheby",)):
        api = api or FakeApi()
        source = HermesAgent(platforms, api=api)
        adapters = {p: FakeAdapter(p) for p in platforms}
        source.adapters.update(adapters)
        bridge = Bridge(str(tmp_path / f"data{len(made)}"), source)
        bridge.store.open()
        await bridge.start()
        events: list = []
        bridge.hub.subscribe(lambda seq, e: events.append(e))
        made.append(bridge)
        return bridge, source, adapters[platforms[0]], api, events

    yield make
    for b in made:
        await b.stop()


def of(events, t):
    return [e for e in events if isinstance(e, t)]


async def start_run(bridge, text="hi"):
    conv = bridge.create_conversation("t", source="hermes")
    res = await bridge.execute(cmd.SendMessage(text=text, conversation_id=conv.conversation_id, request_id="r1"), ORIGIN)
    return conv.conversation_id, res.run_id


async def test_streaming_from_cumulative_edits(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]
    assert event.text == "hi" and event.source.chat_id == cid and event.source.chat_type == "dm"
    assert source.session_key(cid) == f"agent:main:pheby:dm:{cid}"
    mid = source.on_send("pheby", cid, "Hel \u2589", None, {"expect_edits": True, "reply_to_message_id": "x"})
    assert source.on_edit("pheby", cid, mid, "Hello wor \u2589", False)
    assert source.on_edit("pheby", cid, mid, "Hello world", True)
    # after a tool call Hermes opens a new message, starting with a blank line
    mid2 = source.on_send("pheby", cid, "\n\nMore \u2589", None, {"expect_edits": True})
    source.on_edit("pheby", cid, mid2, "\n\nMore text", True)
    source.processing_complete("pheby", event, "SUCCESS")
    deltas = of(events, ev.TextDelta)
    assert [d.delta for d in deltas] == ["Hel", "lo wor", "ld", "\n\nMore", " text"]
    assert deltas[-1].text == "Hello world\n\nMore text"
    done = of(events, ev.MessageCompleted)
    assert [(d.text, d.message_id) for d in done] == [("Hello world\n\nMore text", f"draft-{run_id}")]
    fin = of(events, ev.RunFinished)
    assert [(f.status, f.run_id) for f in fin] == [("completed", run_id)]
    assert bridge.conversations[cid].run is None


async def test_non_streamed_reply_and_notices(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]
    source.on_send("pheby", cid, "📬 No home channel is set", None, None)  # a gateway notice
    source.on_send("pheby", cid, "Final answer", event.message_id, {"notify": True})
    source.processing_complete("pheby", event, "SUCCESS")
    notes = of(events, ev.Notification)
    assert len(notes) == 1 and notes[0].category == "diagnostic" and notes[0].conversation_id == cid
    assert of(events, ev.MessageCompleted)[-1].text == "Final answer"
    # outside any run: unsolicited (cron, background) -> a notification; unknown chat -> no conversation
    source.on_send("pheby", "agent-bridge-home", "cron result", None, None)
    n = of(events, ev.Notification)[-1]
    assert (n.conversation_id, n.text, n.category) == (None, "cron result", "result")


async def test_failed_turn_reports_hermes_error(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]
    source.on_send("pheby", cid, "Sorry, I encountered an error (APIError).", None, None)
    source.processing_complete("pheby", event, "FAILURE")
    fin = of(events, ev.RunFinished)[-1]
    assert fin.status == "failed" and "APIError" in fin.error


async def test_startup_restore_parking_is_not_the_end_of_the_run(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]
    adapter.gateway_runner._startup_restore_queue.append(event)
    source.processing_complete("pheby", event, "SUCCESS")
    assert not of(events, ev.RunFinished)
    adapter.gateway_runner._startup_restore_queue.clear()  # Hermes replays the same event
    source.processing_complete("pheby", event, "SUCCESS")
    assert len(of(events, ev.RunFinished)) == 1


async def test_newer_hermes_stream_hooks_carry_the_text(rig):
    bridge, source, adapter, api, events = await rig(FakeApi(stream_hooks=True))
    assert source.use_stream_hooks
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]
    mid = source.on_send("pheby", cid, "Hel \u2589", None, {"expect_edits": True})
    source.on_edit("pheby", cid, mid, "Hello \u2589", False)  # the platform edits: ignored for text
    source.stream_delta("pheby", cid, "Hel")
    source.stream_delta("pheby", cid, "lo", "text")
    source.stream_delta("pheby", cid, "thinking", "reasoning")
    source.interim("pheby", cid, "Let me check.", True)
    source.stream_ended("pheby", cid, "Hello", None)
    source.processing_complete("pheby", event, "SUCCESS")
    deltas = of(events, ev.TextDelta)
    assert [(d.delta, d.kind) for d in deltas] == [("Hel", "text"), ("lo", "text"), ("thinking", "reasoning")]
    assert of(events, ev.InterimMessage)[0].already_streamed is True
    assert of(events, ev.MessageCompleted)[-1].text == "Hello"


async def test_tool_events_redacted(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    source.tool_started("pheby", cid, "web_search", {"query": "cats", "api_key": "<redacted>"}, "call_1")
    source.tool_finished("pheby", cid, "web_search", "call_1", "ok", 12, None, '{"ok": true}')
    source.tool_started("pheby", cid, "terminal", {"command": "false"}, "call_2")
    source.tool_finished("pheby", cid, "terminal", "call_2", "error", None, "exit 1", "")
    started = of(events, ev.ToolStarted)
    assert [(s.call_id, s.run_id) for s in started] == [("call_1", run_id), ("call_2", run_id)]
    assert started[0].preview == "cats"
    fin = of(events, ev.ToolFinished)
    assert [(f.status, f.duration_ms, f.error) for f in fin] == [("completed", 12, None), ("failed", fin[1].duration_ms, "exit 1")]
    # no run: tool hooks of other turns are dropped
    source.tool_started("pheby", "someone-else", "terminal", {}, "call_3")
    assert len(of(events, ev.ToolStarted)) == 2


async def test_approvals_fifo_on_0_19(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    key = source.session_key(cid)
    assert source.approval_requested("pheby", cid, "rm -rf /tmp/a", key, "delete")
    assert source.approval_requested("pheby", cid, "rm -rf /tmp/b", key, "delete", allow_permanent=False)
    first, second = of(events, ev.ApprovalRequested)
    assert first.choices == ("once", "session", "always", "deny") and second.choices == ("once", "session", "deny")
    assert first.deadline_ts is not None and first.run_id == run_id
    # answering the newer one first: held until the older one is settled (Hermes resolves oldest first)
    await bridge.execute(cmd.ResolveApproval(approval_id=second.approval_id, choice="deny", reason="no"), ORIGIN)
    assert api.resolved == []
    await bridge.execute(cmd.ResolveApproval(approval_id=first.approval_id, choice="once"), ORIGIN)
    assert api.resolved == [(key, "once", None, None), (key, "deny", "no", None)]
    with pytest.raises(Exception) as info:
        await bridge.execute(cmd.ResolveApproval(approval_id=first.approval_id, choice="once"), ORIGIN)
    assert info.value.code == "already_resolved"
    # Hermes reports its own outcome afterwards: nothing pending any more, nothing published
    n = len(events)
    source.approval_settled(key, "once", "rm -rf /tmp/a")
    assert len(events) == n


async def test_approval_timeout_is_decided_by_timeout(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    key = source.session_key(cid)
    source.approval_requested("pheby", cid, "rm -rf /tmp/x", key, "delete")
    req = of(events, ev.ApprovalRequested)[0]
    source.approval_settled(key, "timeout", "rm -rf /tmp/x")
    res = of(events, ev.ApprovalResolved)[0]
    assert (res.approval_id, res.choice, res.decided_by, res.accepted) == (req.approval_id, "deny", "timeout", False)
    with pytest.raises(Exception) as info:
        await bridge.execute(cmd.ResolveApproval(approval_id=req.approval_id, choice="once"), ORIGIN)
    assert info.value.code == "already_resolved"


async def test_newer_hermes_approval_request_ids(rig):
    bridge, source, adapter, api, events = await rig(FakeApi(request_ids=True))
    cid, run_id = await start_run(bridge)
    key = source.session_key(cid)
    source.approval_requested("pheby", cid, "rm a", key, "d", request_id="req-1")
    source.approval_requested("pheby", cid, "rm b", key, "d", request_id="req-2")
    a, b = of(events, ev.ApprovalRequested)
    await bridge.execute(cmd.ResolveApproval(approval_id=b.approval_id, choice="session"), ORIGIN)
    assert api.resolved == [(key, "session", None, "req-2")]  # targeted, no FIFO wait
    source.approval_settled(key, "timeout", "rm a", request_id="req-1")
    assert of(events, ev.ApprovalResolved)[-1].approval_id == a.approval_id


async def test_clarify_round_trip(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    assert source.clarify_requested("pheby", cid, "Which?", ["a", "b"], "c1a2b3d4e5", source.session_key(cid))
    req = of(events, ev.ClarifyRequested)[0]
    assert (req.choices, req.allow_free_text, req.run_id) == (("a", "b"), True, run_id)
    await bridge.execute(cmd.AnswerClarify(clarify_id="c1a2b3d4e5", response="something else"), ORIGIN)
    assert api.clarified == [("c1a2b3d4e5", "something else")]
    assert not source.clarify_requested("pheby", "not-a-conversation", "?", None, "x", "k")


async def test_cancel_injects_stop_and_finishes_once(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    event = adapter.handled[-1]

    def hermes_stop(ctl):
        assert ctl.text == "/stop"
        source.on_send("pheby", cid, "⚡ Stopped.", ctl.message_id, {"notify": True})
        source.processing_complete("pheby", event, "CANCELLED")

    adapter.on_command = hermes_stop
    await bridge.execute(cmd.CancelRun(conversation_id=cid, run_id=run_id, request_id="x1"), ORIGIN)
    fin = of(events, ev.RunFinished)
    assert [(f.status, f.request_id) for f in fin] == [("cancelled", "x1")]
    assert not of(events, ev.Notification)  # the /stop reply is not chat content
    with pytest.raises(NotFound):
        await bridge.execute(cmd.CancelRun(conversation_id=cid, run_id=run_id), ORIGIN)


async def test_late_interrupt_of_an_old_turn_does_not_cancel_the_next_run(rig):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    source.turn_started("pheby", cid, "turn-1")
    source.processing_complete("pheby", adapter.handled[-1], "SUCCESS")
    res = await bridge.execute(cmd.SendMessage(text="again", conversation_id=cid), ORIGIN)
    source.turn_ended("pheby", cid, "turn-1", True)  # arrives late
    source.processing_complete("pheby", adapter.handled[-1], "SUCCESS")
    assert of(events, ev.RunFinished)[-1].status == "completed"


async def test_media_becomes_an_attachment_of_the_draft(rig, tmp_path):
    bridge, source, adapter, api, events = await rig()
    cid, run_id = await start_run(bridge)
    path = tmp_path / "report.pdf"
    path.write_bytes(b"%PDF-1.4 test")
    att_id = await source.media("pheby", cid, str(path))
    added = of(events, ev.AttachmentAdded)[0]
    assert added.attachment.attachment_id == att_id and added.attachment.message_id == f"draft-{run_id}"
    got = bridge.attachments.get(att_id)
    assert got is not None and open(got[1], "rb").read() == b"%PDF-1.4 test"
    assert os.path.exists(path)  # the original is untouched
    assert await source.media("pheby", cid, str(tmp_path / "missing.pdf")) is None


async def test_settings_through_hermes_state(rig):
    bridge, source, adapter, api, events = await rig()
    conv = bridge.create_conversation("s", source="hermes")
    cid = conv.conversation_id
    key = source.session_key(cid)
    runner = adapter.gateway_runner

    def hermes(ctl):
        words = ctl.text.split()
        if words[0] == "/model" and words[1] != "nope":
            if "--session" in words:
                runner._session_model_overrides[key] = {"model": words[1], "provider": "custom"}
            else:
                api.cfg["model"]["default"] = words[1]
            reply = f"Switched to {words[1]}"
        elif words[0] == "/reasoning":
            if "--global" in words:
                api.cfg["agent"]["reasoning_effort"] = words[1]
            else:
                runner._session_reasoning_overrides[key] = {"enabled": words[1] != "none", "effort": words[1]}
            reply = "ok"
        else:
            reply = "❌ Model not found: nope"
        source.on_send("pheby", ctl.source.chat_id, reply, ctl.message_id, {"notify": True})

    adapter.on_command = hermes
    cur = await bridge.execute(cmd.SetModel(model="fake-model-2", conversation_id=cid), ORIGIN)
    assert (cur.model, cur.scope) == ("fake-model-2", "conversation")
    assert adapter.handled[-1].text == "/model fake-model-2 --session"
    assert source.current_model(None).model == "fake-model"
    with pytest.raises(BadRequest) as info:
        await bridge.execute(cmd.SetModel(model="nope"), ORIGIN)
    assert "Model not found" in info.value.message
    g = await bridge.execute(cmd.SetModel(model="fake-model-2"), ORIGIN)
    assert g.scope == "global" and adapter.handled[-1].source.chat_id == "agent-bridge-control"
    snap = await bridge.execute(cmd.SetReasoning(effort="none", conversation_id=cid), ORIGIN)
    assert (snap.effort, snap.enabled, snap.scope) == ("none", False, "conversation")
    with pytest.raises(BadRequest):
        await bridge.execute(cmd.SetReasoning(effort="turbo"), ORIGIN)
    models = source.models(cid)
    assert models.providers[0].slug == "custom" and models.current_model == "fake-model-2"
    y = await bridge.execute(cmd.SetYolo(enabled=True, conversation_id=cid), ORIGIN)
    assert y.enabled and key in api.yolo_sessions
    gy = await bridge.execute(cmd.SetYolo(enabled=True), ORIGIN)
    assert gy.enabled and api.cfg["approvals"]["mode"] == "off"
    await bridge.execute(cmd.SetYolo(enabled=False), ORIGIN)
    assert api.cfg["approvals"]["mode"] == "manual"


async def test_conversations_come_from_hermes_session_db(tmp_path):
    api = FakeApi()
    cid = "ab" * 16
    api.db.rows = [
        {"id": "s1", "source": "pheby", "chat_id": cid, "title": "Trip plans", "message_count": 2, "started_at": 100.0},
        {"id": "s2", "source": "pheby", "chat_id": "agent-bridge-control", "title": None, "message_count": 1},
        {"id": "s3", "source": "telegram", "chat_id": "cd" * 16, "title": "x", "message_count": 4},
    ]
    api.db.messages = {"s1": [{"role": "user", "content": "where?"}, {"role": "tool", "content": "{}"},
                              {"role": "assistant", "content": "Lisbon"}]}
    source = HermesAgent(("pheby",), api=api)
    source.adapters["pheby"] = FakeAdapter()
    bridge = Bridge(str(tmp_path / "d"), source)
    bridge.store.open()
    await bridge.start()
    try:
        await until(lambda: cid in bridge.conversations, what="the adopted Hermes session")
        assert list(bridge.conversations) == [cid]
        conv = bridge.conversations[cid]
        assert conv.name == "Trip plans" and conv.session_id == "s1" and conv.source == "hermes"
        assert [(m.role, m.text) for m in conv.messages] == [("user", "where?"), ("assistant", "Lisbon")]
        await bridge.execute(cmd.DeleteConversation(conversation_id=cid), ORIGIN)
        assert api.db.deleted == ["s1"] and cid not in bridge.conversations
    finally:
        await bridge.stop()


def test_tool_preview():
    assert tool_preview({"command": "ls -la"}) == "ls -la"
    assert tool_preview({"x": 1}) == '{"x": 1}'
    assert len(tool_preview({"query": "q" * 500})) == 80
