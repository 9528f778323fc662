"""The plugin socket /agent/ws over real sockets: handshake, persistence, replay, bad frames."""

from __future__ import annotations

import json

import aiohttp
import pytest

from lvmh_adapter import plugin_ws
from tests.lvmh.helpers import AUTH, FakePlugin, db_rows, message, session_snapshot

SID = "01a22693-a4c3-719c-9d1e-aaaaaaaaaaaa"


def _code(msg, ws):
    """The close code the server sent (aiohttp's client may report 1006 once its side has gone)."""
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
    return msg.data if msg.type == aiohttp.WSMsgType.CLOSE else ws.close_code


async def test_handshake_welcome_exact(plugins):
    p = plugins(SID)
    welcome = await p.connect()
    assert isinstance(welcome["ts"], int) and welcome["ts"] > 1_600_000_000_000
    assert {k: v for k, v in welcome.items() if k != "ts"} == {
        "v": 1, "type": "welcome", "sessionId": SID, "seq": 0, "lastSeq": 0,
    }


async def test_every_event_but_message_update_is_persisted_with_gaps(lvmh, plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.run("Please run echo", "The tool said hello.")
    evs = await api.wait_events(SID, lambda e: e and e[-1]["type"] == "agent_settled")
    assert [e["type"] for e in evs] == [
        "agent_start", "message_start", "message_end", "message_start", "message_end", "agent_end", "agent_settled",
    ]
    seqs = [e["seq"] for e in evs]
    assert seqs == [1, 2, 3, 4, 9, 10, 11]  # 5-8 were message_update: numbered, never stored
    assert all(e["v"] == 1 and e["sessionId"] == SID and isinstance(e["ts"], int) for e in evs)
    assert evs[4]["message"] == message("assistant", "a3", "The tool said hello.")
    rows = await db_rows(lvmh, "SELECT seq, type FROM events WHERE sessionId=? ORDER BY seq", (SID,))
    assert [r[0] for r in rows] == seqs
    (last_seq, online), = await db_rows(lvmh, "SELECT lastSeq, online FROM sessions WHERE id=?", (SID,))
    assert last_seq == 11 and online == 1


async def test_resent_seq_is_never_a_second_row(lvmh, plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.event("agent_start", seq=1)
    await p.event("message_start", seq=2, message={"role": "user", "id": "first"})
    await p.event("message_start", seq=2, message={"role": "user", "id": "second"})  # same seq again
    await p.event("agent_start", seq=1)
    await p.event("agent_settled", seq=3, aborted=False)
    evs = await api.wait_events(SID, lambda e: len(e) >= 3)
    assert [(e["seq"], e["type"]) for e in evs] == [(1, "agent_start"), (2, "message_start"), (3, "agent_settled")]
    assert evs[1]["message"]["id"] == "first"
    rows = await db_rows(lvmh, "SELECT COUNT(*) FROM events WHERE sessionId=?", (SID,))
    assert rows == [(3,)]


async def test_replay_after_reconnect_from_welcome_last_seq(lvmh, plugins, api):
    p = plugins(SID)
    assert (await p.connect())["lastSeq"] == 0
    for _ in range(5):
        await p.event("tool_execution_update", toolCallId="c1", toolName="bash", partial="x")
    await p.event("message_update", delta="not stored")  # seq 6
    await p.close()

    # the plugin kept seq 4..9 buffered (4, 5 were sent but it cannot know whether they landed)
    q = plugins(SID)
    welcome = await q.connect()
    assert welcome["lastSeq"] == 5
    for seq in range(welcome["lastSeq"] + 1, 10):
        if seq == 6:
            continue  # deltas are never replayed
        await q.event("tool_execution_update", seq=seq, toolCallId="c1", toolName="bash", partial=f"r{seq}")
    await q.event("tool_execution_update", seq=4, toolCallId="c1", toolName="bash", partial="dup")
    evs = await api.wait_events(SID, lambda e: e and e[-1]["seq"] == 9)
    assert [e["seq"] for e in evs] == [1, 2, 3, 4, 5, 7, 8, 9]
    assert evs[3]["partial"] == "x"  # the resent 4 did not replace the stored one
    await q.close()
    r = plugins(SID)
    assert (await r.connect())["lastSeq"] == 9


async def test_last_seq_survives_a_restart(service_factory, tmp_path):
    data = tmp_path / "shared"
    svc = await service_factory(adapters=("lvmh",), data_dir=data)
    p = FakePlugin(svc.ports["lvmh"], SID)
    await p.connect()
    for _ in range(3):
        await p.event("agent_start")
    await p.event("message_update", delta="x")
    await p.close()
    await svc.stop()

    svc2 = await service_factory(adapters=("lvmh",), data_dir=data)
    q = FakePlugin(svc2.ports["lvmh"], SID)
    try:
        assert (await q.connect())["lastSeq"] == 3
        async with aiohttp.ClientSession(headers=AUTH) as http:
            async with http.get(f"http://127.0.0.1:{svc2.ports['lvmh']}/api/sessions") as resp:
                sessions = await resp.json()
        assert [s["id"] for s in sessions if s["id"] == SID] == [SID]
        assert svc2.bridge.conversations[SID].source == "lvmh"
    finally:
        await q.close()


async def test_session_info_updates_the_session(lvmh, plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.event("session_info", session=session_snapshot(SID, name="Refactor", model="glm-5.4"))
    status, sessions = await api.get("/api/sessions")
    await api.wait_events(SID, lambda e: len(e) == 1)
    status, sessions = await api.get("/api/sessions")
    mine = [s for s in sessions if s["id"] == SID][0]
    assert mine["name"] == "Refactor" and mine["model"] == "glm-5.4" and mine["online"] is True
    assert lvmh.bridge.conversations[SID].name == "Refactor"
    (info,), = await db_rows(lvmh, "SELECT info FROM sessions WHERE id=?", (SID,))
    assert json.loads(info)["name"] == "Refactor"


async def test_bye_and_buffer_overflow_are_kept(plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.event("buffer_overflow", dropped=12, fromSeq=1, toSeq=12)
    await p.event("bye", reason="shutdown")
    evs = await api.wait_events(SID, lambda e: len(e) == 2)
    assert evs[0]["type"] == "buffer_overflow" and evs[0]["dropped"] == 12 and evs[0]["toSeq"] == 12
    assert evs[1]["type"] == "bye" and evs[1]["reason"] == "shutdown"


async def test_malformed_frames_are_answered_and_the_session_goes_on(plugins, api):
    p = plugins(SID)
    await p.connect()
    bad = [
        "not json",
        "[1, 2]",
        json.dumps({"v": 1, "sessionId": SID, "seq": 1, "ts": 1}),  # no type
        json.dumps({"v": 1, "sessionId": SID, "seq": "7", "ts": 1, "type": "agent_start"}),
        json.dumps({"v": 1, "sessionId": SID, "seq": 0, "ts": 1, "type": "agent_start"}),
        json.dumps({"v": 1, "sessionId": SID, "seq": True, "ts": 1, "type": "agent_start"}),
        json.dumps({"v": 1, "sessionId": SID, "seq": 2, "ts": 1, "type": "message_update"}),  # no delta
        json.dumps({"v": 1, "sessionId": "someone-else", "seq": 2, "ts": 1, "type": "agent_start"}),
        json.dumps({"v": 2, "sessionId": SID, "seq": 2, "ts": 1, "type": "agent_start"}),
        json.dumps({"v": 1, "sessionId": SID, "seq": 2, "ts": 1, "type": "Agent Start"}),
        '{"v": 1, "sessionId": "' + SID + '", "seq": 99999999999999999999999, "ts": 1, "type": "agent_start"}',
    ]
    for frame in bad:
        await p.send_raw(frame)
        err = await p.recv_type("error")
        assert set(err) >= {"type", "code", "error"} and isinstance(err["error"], str), (frame, err)
    await p.ws.send_bytes(b"\xff\xfe garbage")
    assert (await p.recv_type("error"))["code"] == "invalid_json"
    await p.event("agent_start", seq=5)
    evs = await api.wait_events(SID, lambda e: len(e) == 1)
    assert evs[0]["seq"] == 5 and not p.ws.closed


async def test_missing_ts_is_filled_in(plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.send_raw({"v": 1, "sessionId": SID, "seq": 1, "type": "agent_start"})
    await p.send_raw({"v": 1, "sessionId": SID, "seq": 2, "ts": 1.5e12, "type": "agent_end", "usage": {}})
    evs = await api.wait_events(SID, lambda e: len(e) == 2)
    assert isinstance(evs[0]["ts"], int) and evs[0]["ts"] > 1_600_000_000_000
    assert evs[1]["ts"] == 1_500_000_000_000


async def test_unknown_event_types_are_stored(plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.event("turn_start", turnIndex=0)
    evs = await api.wait_events(SID, lambda e: len(e) == 1)
    assert evs[0]["type"] == "turn_start" and evs[0]["turnIndex"] == 0


async def test_oversized_frame_closes_with_1009(plugins, monkeypatch):
    from lvmh_adapter import codec

    monkeypatch.setattr(codec, "MAX_PLUGIN_FRAME", 64 * 1024)  # small enough to fit the socket buffers
    p = plugins(SID)
    await p.connect()
    await p.event("agent_start", blob="x" * (100 * 1024))
    msg = await p.ws.receive(timeout=5)
    while msg.type == aiohttp.WSMsgType.TEXT:
        msg = await p.ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert _code(msg, p.ws) == 1009


async def test_hello_must_come_first(plugins):
    p = await plugins(SID).open()
    await p.event("agent_start", seq=1)
    err = await p.recv_type("error")
    assert err["code"] == "hello_expected"
    assert (await p.connect())["lastSeq"] == 0


async def test_no_hello_in_time_closes(plugins, monkeypatch):
    monkeypatch.setattr(plugin_ws, "HELLO_TIMEOUT", 0.2)
    p = await plugins(SID).open()
    err = await p.recv_type("error")
    assert err["code"] == "auth_timeout"
    msg = await p.ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert _code(msg, p.ws) == 4001


async def test_wrong_protocol_version_in_hello_closes(plugins):
    p = await plugins(SID).open()
    await p.send_raw({"v": 2, "type": "hello", "sessionId": SID, "seq": 0, "ts": 1, "session": {}})
    err = await p.recv_type("error")
    assert err["code"] == "version_mismatch"
    msg = await p.ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_a_bridge_conversation_id_cannot_be_claimed(lvmh, plugins):
    conv = lvmh.bridge.create_conversation("mine")
    p = plugins(conv.conversation_id)
    await p.open()
    await p.send_raw({"v": 1, "type": "hello", "sessionId": conv.conversation_id, "seq": 0, "ts": 1, "session": {}})
    err = await p.recv_type("error")
    assert err["code"] == "conflict"
    msg = await p.ws.receive(timeout=5)
    assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    assert _code(msg, p.ws) == 4009
    assert lvmh.bridge.conversations[conv.conversation_id].source == "demo"


async def test_a_newer_connection_takes_over(plugins, api):
    old = plugins(SID)
    await old.connect()
    await old.event("agent_start")
    new = plugins(SID)
    assert (await new.connect())["lastSeq"] == 1
    msg = await old.ws.receive(timeout=5)
    assert _code(msg, old.ws) == 4002
    status, body = await api.post(f"/api/sessions/{SID}/prompt", {"message": "to the new one"})
    assert status == 200
    prompt = await new.recv_type("prompt")
    assert prompt["message"] == "to the new one"


async def test_prompt_and_abort_reach_the_plugin(plugins, api):
    p = plugins(SID)
    await p.connect()
    status, body = await api.post(f"/api/sessions/{SID}/prompt", {"message": "fix the bug"})
    assert status == 200 and body["ok"] is True
    prompt = await p.recv_type("prompt")
    assert isinstance(prompt["ts"], int)
    assert {k: v for k, v in prompt.items() if k != "ts"} == {
        "v": 1, "type": "prompt", "sessionId": SID, "seq": 0, "promptId": body["promptId"], "message": "fix the bug",
    }
    status, body = await api.post(f"/api/sessions/{SID}/abort")
    assert (status, body) == (200, {"ok": True})
    abort = await p.recv_type("abort")
    assert {k: v for k, v in abort.items() if k != "ts"} == {"v": 1, "type": "abort", "sessionId": SID, "seq": 0}


async def test_offline_session_prompt_is_409(plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.close()
    status, sessions = await api.get("/api/sessions")
    for _ in range(100):
        status, sessions = await api.get("/api/sessions")
        if not [s for s in sessions if s["id"] == SID][0]["online"]:
            break
    assert [s for s in sessions if s["id"] == SID][0]["online"] is False
    status, body = await api.post(f"/api/sessions/{SID}/prompt", {"message": "hello?"})
    assert status == 409 and isinstance(body["error"], str)
    status, body = await api.post(f"/api/sessions/{SID}/abort")
    assert status == 409 and isinstance(body["error"], str)


@pytest.mark.parametrize("path", ["/prompt", "/abort", "/events"])
async def test_unknown_session_is_404(api, path):
    method = api.get if path == "/events" else api.post
    kw = {} if path == "/events" else {"body": {"message": "x"}}
    status, body = await method(f"/api/sessions/nope{path}", **kw)
    assert status == 404 and isinstance(body["error"], str)


async def test_tool_arguments_are_redacted_before_they_are_stored_or_served(lvmh, plugins, api):
    p = plugins(SID)
    await p.connect()
    await p.event("tool_execution_start", seq=1, toolCallId="t1", toolName="bash",
                  args={"command": "deploy", "env": {"API_KEY": "sk-live-123", "region": "eu"}})
    await p.event("message_end", seq=2, message={
        "role": "assistant", "id": "a1", "text": "", "thinking": None, "toolCallId": None,
        "toolCalls": [{"id": "t1", "name": "bash", "argsJson": json.dumps({"password": "hunter2", "user": "me"})}],
    })
    evs = await api.wait_events(SID, lambda e: len(e) >= 2)
    assert evs[0]["args"] == {"command": "deploy", "env": {"API_KEY": "<redacted>", "region": "eu"}}
    assert json.loads(evs[1]["message"]["toolCalls"][0]["argsJson"]) == {"password": "<redacted>", "user": "me"}
    rows = await db_rows(lvmh, "SELECT payload FROM events WHERE sessionId=?", (SID,))
    assert rows and not any("sk-live-123" in r[0] or "hunter2" in r[0] for r in rows)
