"""Plugin sessions as bridge conversations: a pi session seen and prompted from a Pheby client."""

from __future__ import annotations

import pytest

from tests.lvmh.helpers import Api, FakePlugin, message, session_snapshot
from tests.pheby.client import PhebyClient, types
from tests.waiting import until

SID = "01a22693-a4c3-719c-9d1e-cccccccccccc"


@pytest.fixture
async def both(service_factory):
    return await service_factory(adapters=("pheby", "lvmh"))


async def test_plugin_session_prompted_from_pheby(both):
    plugin = FakePlugin(both.ports["lvmh"], SID, session=session_snapshot(SID, name="pi refactor"))
    pheby = await PhebyClient.connect(both.ports["pheby"])
    api = Api(both.ports["lvmh"])
    try:
        await plugin.connect()
        listed = await pheby.request({"type": "conversation.list", "request_id": "l"}, "conversation.snapshot")
        mine = [c for c in listed["conversations"] if c["conversation_id"] == SID]
        assert mine and mine[0]["name"] == "pi refactor" and mine[0]["source"] == "lvmh"

        await pheby.send({"type": "chat.send", "conversation_id": SID, "text": "please fix it", "request_id": "r1"})
        accepted = await pheby.recv_type("run.accepted", "error")
        assert accepted["type"] == "run.accepted" and accepted["request_id"] == "r1", accepted
        run_id = accepted["run_id"]

        prompt = await plugin.recv_type("prompt")
        assert prompt["message"] == "please fix it" and prompt["sessionId"] == SID and prompt["promptId"]

        # a second send while that run is open is refused by the bridge (pi would merge it as a steer)
        await pheby.send({"type": "chat.send", "conversation_id": SID, "text": "again", "request_id": "r2"})
        err = await pheby.recv_type("error")
        assert err["error"]["code"] == "run_active" and err["request_id"] == "r2"

        # pi's answer, as the plugin mirrors it
        await plugin.event("agent_start")
        await plugin.event("message_start", message={"role": "user", "id": "u1"})
        await plugin.event("message_end", message=message("user", "u1", "please fix it"))
        await plugin.event("message_start", message={"role": "assistant", "id": "a1"})
        await plugin.event("message_update", delta="Looking")
        await plugin.event("message_end", message=message(
            "assistant", "a1", "Looking", toolCalls=[{"id": "call1", "name": "bash", "argsJson": "{}"}]))
        await plugin.event("tool_execution_start", toolCallId="call1", toolName="bash",
                           args={"command": "make test", "api_key": "sk-secret"})
        await plugin.event("tool_execution_update", toolCallId="call1", toolName="bash", partial="ok\n")
        await plugin.event("tool_execution_end", toolCallId="call1", toolName="bash", isError=False,
                           resultPreview="ok\n", durationMs=12)
        await plugin.event("message_start", message={"role": "toolResult", "id": "t1"})
        await plugin.event("message_end", message=message("toolResult", "t1", "ok\n", toolCallId="call1"))
        await plugin.event("message_start", message={"role": "assistant", "id": "a2"})
        for piece in ("Fixed", " it."):
            await plugin.event("message_update", delta=piece)
        await plugin.event("message_end", message=message("assistant", "a2", "Fixed it."))
        await plugin.event("agent_end", usage={"inputTokens": 84, "outputTokens": 14, "totalCost": 0})
        await plugin.event("agent_settled", aborted=False)

        frames = await pheby.collect_until("run.finished", run_id=run_id)
        shown = [f for f in frames if f.get("conversation_id") == SID and f["type"] != "message.delta"]
        assert types(shown) == ["tool.event", "tool.event", "message.complete", "run.finished"]
        tool_running, tool_done = shown[0], shown[1]
        assert tool_running["status"] == "running" and tool_running["tool_name"] == "bash"
        assert tool_running["args_redacted"]["api_key"] != "sk-secret"
        assert tool_done["status"] == "completed"
        complete = shown[2]
        assert complete["text"] == "Fixed it." and complete["message_id"] == f"draft-{run_id}"
        assert shown[3]["status"] == "completed"
        deltas = [f["text"] for f in frames if f["type"] == "message.delta"]
        # cumulative per assistant message; Pheby coalesces drafts, message.complete has the final text
        assert deltas and all("Looking".startswith(t) or "Fixed it.".startswith(t) for t in deltas)

        # the transcript the bridge keeps for Pheby
        hist = await pheby.request({"type": "conversation.open", "conversation_id": SID, "request_id": "o"},
                                   "conversation.history")
        texts = [(m["role"], m["text"]) for m in hist["messages"]]
        assert ("user", "please fix it") in texts and ("assistant", "Fixed it.") in texts

        # and nothing was rendered back into the lvmh session: its events are what the plugin sent
        evs = await api.wait_events(SID, lambda e: e and e[-1]["type"] == "agent_settled")
        assert [e["seq"] for e in evs] == [n for n in range(1, 18) if n not in (5, 13, 14)]
    finally:
        await api.close()
        await pheby.close()
        await plugin.close()


async def test_abort_from_pheby_and_offline_send(both):
    plugin = FakePlugin(both.ports["lvmh"], SID)
    pheby = await PhebyClient.connect(both.ports["pheby"])
    try:
        await plugin.connect()
        await pheby.send({"type": "chat.send", "conversation_id": SID, "text": "long job", "request_id": "r1"})
        accepted = await pheby.recv_type("run.accepted")
        await plugin.recv_type("prompt")
        await plugin.event("agent_start")
        source = both.frontends["lvmh"].source
        # pi has begun the run (a run pi never began is cancelled at once)
        await until(lambda: source.runs[SID].seen, what="the run begun by pi")
        await pheby.send({"type": "run.cancel", "conversation_id": SID, "run_id": accepted["run_id"], "request_id": "c"})
        await plugin.recv_type("abort")
        await plugin.event("agent_end", usage={})
        await plugin.event("agent_settled", aborted=True)
        fin = await pheby.recv_type("run.finished")
        assert fin["status"] == "cancelled" and fin["run_id"] == accepted["run_id"]

        await plugin.close()
        await until(lambda: not both.frontends["lvmh"].plugin_online(SID), what="the plugin offline")
        await pheby.send({"type": "chat.send", "conversation_id": SID, "text": "anyone?", "request_id": "r3"})
        err = await pheby.recv_type("error")
        # the core's "unavailable", in Pheby's closed set of codes
        assert err["error"]["code"] == "not_found" and "offline" in err["error"]["message"]
        assert err["request_id"] == "r3"
    finally:
        await pheby.close()
        await plugin.close()


async def test_a_run_started_in_the_tui_is_visible_and_finishes(both):
    plugin = FakePlugin(both.ports["lvmh"], SID)
    pheby = await PhebyClient.connect(both.ports["pheby"])
    try:
        await plugin.connect()
        await plugin.run("typed in the terminal", "Sure thing")
        frames = await pheby.collect_until("run.finished")
        assert types([f for f in frames if f["type"] != "message.delta" and not f["type"].startswith("conversation.")]) == [
            "run.accepted", "message.start", "message.complete", "run.finished",
        ]
        assert frames[-1]["status"] == "completed"
        conv = both.bridge.conversations[SID]
        assert conv.run is None and conv.messages[-1].text == "Sure thing"
    finally:
        await pheby.close()
        await plugin.close()


async def test_disconnect_mid_run_fails_the_run_after_the_grace(both, monkeypatch):
    from lvmh_adapter import plugin_source

    monkeypatch.setattr(plugin_source, "DISCONNECT_GRACE", 0.1)
    plugin = FakePlugin(both.ports["lvmh"], SID)
    pheby = await PhebyClient.connect(both.ports["pheby"])
    try:
        await plugin.connect()
        await plugin.event("agent_start")
        await pheby.recv_type("run.accepted")
        await plugin.close()
        fin = await pheby.recv_type("run.finished")
        assert fin["status"] == "failed"
    finally:
        await pheby.close()


async def test_cancel_before_pi_began_the_run_ends_it_at_once(both):
    plugin = FakePlugin(both.ports["lvmh"], SID)
    pheby = await PhebyClient.connect(both.ports["pheby"])
    try:
        await plugin.connect()
        await pheby.send({"type": "chat.send", "conversation_id": SID, "text": "x", "request_id": "r1"})
        accepted = await pheby.recv_type("run.accepted")
        await plugin.recv_type("prompt")
        await pheby.send({"type": "run.cancel", "conversation_id": SID, "run_id": accepted["run_id"], "request_id": "c"})
        await plugin.recv_type("abort")
        fin = await pheby.recv_type("run.finished")
        assert fin["status"] == "cancelled" and fin["run_id"] == accepted["run_id"]
        assert both.bridge.conversations[SID].run is None
    finally:
        await pheby.close()
        await plugin.close()
