"""lvmh sockets (Transport 1 ``/agent/ws``, Transport 3 ``/ws``): the handshake, seqs per
session, fan-out to browsers, and what a malformed or oversized frame gets.

The spec defines no error frames; the bridge answers a frame it cannot take with
``{"type": "error", "code", "error"}`` (a type clients ignore when they do not know it)
and keeps the socket, except for a frame over its size limit (closed with 1009,
"message too big") and a ``hello`` of another protocol version (closed).
"""

from __future__ import annotations

import asyncio
import json
import uuid

import aiohttp

from tests.conformance.conftest import LVMH_TOKEN
from tests.conformance.lvmh_client import Browser, Plugin, Rest, eventually, now_ms, until

PLUGIN_LIMIT = 4 * 1024 * 1024  # the bridge's limit for a plugin frame (docs/conformance.md)
BROWSER_LIMIT = 64 * 1024


def errors(plugin_or_frames) -> list:
    frames = plugin_or_frames.received if hasattr(plugin_or_frames, "received") else plugin_or_frames
    return [f for f in frames if f.get("type") == "error"]


async def test_welcome_carries_the_highest_persisted_seq(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    try:
        assert await plugin.connect() == 0
        w = plugin.welcomes[0]
        assert w["type"] == "welcome" and w["v"] == 1 and w["sessionId"] == sid and isinstance(w["ts"], int)
        await plugin.run("one two", prompt="q")
        await plugin.emit("message_update", delta="a delta takes a seq, never stored")
        await plugin.drop()
        top = max(e["seq"] for e in plugin.sent if e["type"] != "message_update")
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        try:
            await eventually(lambda: _last(rest, sid, top), what="the events stored")
        finally:
            await rest.close()
        assert await plugin.connect() == top
        # resending what is already persisted stores nothing twice
        for e in plugin.sent[:4]:
            await plugin.send_raw(json.dumps(e))
        await plugin.run("three", prompt="again")
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        try:
            evs = await eventually(lambda: _last(rest, sid, plugin.seq), what="the new run stored")
            assert [e["seq"] for e in evs] == [e["seq"] for e in plugin.sent if e["type"] != "message_update"]
        finally:
            await rest.close()
    finally:
        await plugin.close()


async def _last(rest: Rest, sid: str, seq: int):
    evs = await rest.events(sid)
    return evs if evs and evs[-1]["seq"] == seq else None


async def test_seqs_are_per_session(server):
    a = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-a-{uuid.uuid4()}")
    b = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-b-{uuid.uuid4()}")
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        await a.connect()
        await b.connect()
        await a.run("from a", prompt="qa")
        await b.run("from b", prompt="qb")
        await a.run("a again", prompt="qa2")
        ea = await eventually(lambda: _last(rest, a.sid, a.seq), what="session a stored")
        eb = await eventually(lambda: _last(rest, b.sid, b.seq), what="session b stored")
        assert ea[0]["seq"] == 1 and eb[0]["seq"] == 1  # each session counts from 1
        assert {e["sessionId"] for e in ea} == {a.sid} and {e["sessionId"] for e in eb} == {b.sid}
    finally:
        await a.close()
        await b.close()
        await rest.close()


async def test_browsers_get_live_deltas_session_list_and_one_subscription(server):
    a = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-a-{uuid.uuid4()}")
    b = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-b-{uuid.uuid4()}")
    web = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await web.connect()
        lists = web.session_lists
        await a.connect()
        await until(lambda: (web.listed(a.sid) or {}).get("online") is True and web.session_lists > lists,
                    what="session_list on a new session")
        await b.connect()
        await web.subscribe(a.sid)
        await a.run("streamed live", prompt="q")
        first_run_end = a.seq
        await until(lambda: "agent_settled" in web.view(a.sid).types(), what="a's run")
        live = [e["delta"] for e in web.view(a.sid).events if e["type"] == "message_update"]
        assert live == ["streamed ", "live "]
        await web.subscribe(b.sid)  # one at a time: a's events stop
        await a.run("not for this browser", prompt="q2")
        await b.run("for this browser", prompt="q3")
        await until(lambda: "agent_settled" in web.view(b.sid).types(), what="b's run")
        got = [f for f in web.frames if f.get("type") == "events" and f["sessionId"] == a.sid]
        assert all(e["seq"] <= first_run_end for f in got for e in f["events"])
        await web.unsubscribe(b.sid)
        await b.run("after unsubscribe", prompt="q4")
        await a.drop()
        await until(lambda: (web.listed(a.sid) or {}).get("online") is False, what="a offline in session_list")
        assert all(e["message"]["text"] != "after unsubscribe" for e in web.view(b.sid).persisted()
                   if e["type"] == "message_end")
        for f in web.frames:
            if f.get("type") == "events":
                assert set(f) >= {"sessionId", "after", "events"} and isinstance(f["after"], int)
    finally:
        await web.close()
        await a.close()
        await b.close()


async def test_malformed_plugin_frames_get_an_error_and_the_socket_goes_on(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    try:
        # before hello: an event is refused, the hello still works
        plugin.ws = await plugin.http.ws_connect(plugin.url, headers={"Authorization": f"Bearer {LVMH_TOKEN}"})
        plugin.reader = asyncio.ensure_future(plugin._read(plugin.ws))
        await plugin.send_raw(json.dumps(plugin.envelope("agent_start", 1)))
        await until(lambda: errors(plugin), what="an error for an event before hello")
        await plugin.send_raw(json.dumps(plugin.envelope("hello", 0, session=plugin.session)))
        await until(lambda: plugin.welcomes, what="welcome after a late hello")
        bad = [
            "not json at all",
            "[1, 2]",
            '"a string"',
            json.dumps({"v": 1, "sessionId": sid, "seq": 1, "ts": now_ms()}),  # no type
            json.dumps({"v": 1, "sessionId": sid, "seq": "one", "ts": now_ms(), "type": "agent_start"}),
            json.dumps({"v": 1, "sessionId": sid, "seq": 0, "ts": now_ms(), "type": "agent_start"}),
            json.dumps({"v": 1, "sessionId": sid, "seq": -3, "ts": now_ms(), "type": "agent_start"}),
            json.dumps({"v": 1, "sessionId": sid, "ts": now_ms(), "type": "agent_start"}),  # no seq
            json.dumps({"v": 1, "seq": 1, "ts": now_ms(), "type": "agent_start"}),  # no sessionId
            json.dumps({"v": 1, "sessionId": "another-session", "seq": 1, "ts": now_ms(), "type": "agent_start"}),
            json.dumps({"v": 2, "sessionId": sid, "seq": 1, "ts": now_ms(), "type": "agent_start"}),
            json.dumps({"v": 1, "sessionId": sid, "seq": 1, "ts": now_ms(), "type": "message_update", "delta": 5}),
            '{"v":1,"sessionId":"' + sid + '","seq":1,"type":"agent_start"}{"second":"object"}',
            "[" * 100_000,
        ]
        for n, data in enumerate(bad, 1):
            await plugin.send_raw(data)
            await until(lambda: len(errors(plugin)) > n, what=f"an error for bad frame {n}")
        for e in errors(plugin):
            assert isinstance(e["error"], str) and e["error"] and isinstance(e["code"], str)
        assert not plugin.ws.closed
        await plugin.run("still works", prompt="q")
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        try:
            evs = await eventually(lambda: _last(rest, sid, plugin.seq), what="the run after the bad frames")
            assert [e["seq"] for e in evs] == [e["seq"] for e in plugin.sent if e["type"] != "message_update"]
        finally:
            await rest.close()
    finally:
        await plugin.close()


async def test_a_hello_of_another_version_is_refused_and_closed(server):
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(server.url("lvmh", "/agent/ws", scheme="ws"),
                                   headers={"Authorization": f"Bearer {LVMH_TOKEN}"})
        await ws.send_str(json.dumps({"v": 99, "type": "hello", "sessionId": "s-v99", "seq": 0, "ts": now_ms(),
                                      "session": {"id": "s-v99"}}))
        frames = []
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                frames.append(json.loads(msg.data))
        assert ws.closed and [f["type"] for f in frames] == ["error"]
        assert "version" in frames[0]["error"].lower()


async def test_oversized_frames_close_with_1009_and_the_server_keeps_serving(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    web = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await plugin.connect()
        await plugin.run("before", prompt="q")
        huge = json.dumps(plugin.envelope("tool_execution_update", plugin.seq + 1, toolCallId="t", toolName="x",
                                          partial="x" * (PLUGIN_LIMIT + 1024)))
        try:
            await plugin.send_raw(huge)
        except (ConnectionError, aiohttp.ClientError):
            pass  # the server may close while the frame is still being written
        await until(lambda: plugin.reader.done(), what="the plugin socket closed")
        # 1009 "message too big"; a client still writing the frame when the server closes may
        # see the connection reset before it reads the close frame (1006)
        assert plugin.ws.close_code in (1009, 1006)
        assert await plugin.connect() >= 1  # reconnects; the session goes on
        await plugin.run("after", prompt="q2")

        await web.connect()
        await web.ws.send_str(json.dumps({"type": "subscribe", "sessionId": "x" * (BROWSER_LIMIT + 10)}))
        await until(lambda: web.reader.done(), what="the browser socket closed")
        assert web.close_code == 1009
        await web.connect()
        assert web.listed(sid) is not None
    finally:
        await web.close()
        await plugin.close()


async def test_malformed_browser_frames_get_an_error_and_the_socket_goes_on(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    web = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await plugin.connect()
        await web.connect()
        bad = ["nope", "[]", "7", json.dumps({"type": "subscribe"}), json.dumps({"type": "subscribe", "sessionId": 5}),
               json.dumps({"type": "dance"}), json.dumps({"sessionId": sid}), "{" * 10_000]
        for n, data in enumerate(bad, 1):
            await web.ws.send_str(data)
            await until(lambda: len(errors(web.frames)) >= n, what=f"an error for bad browser frame {n}")
        await web.subscribe(sid)
        await plugin.run("the stream still works", prompt="q")
        await until(lambda: "agent_settled" in web.view(sid).types(), what="events after the bad frames")
    finally:
        await web.close()
        await plugin.close()


async def test_session_info_bye_and_other_event_types(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    web = Browser(server.url("lvmh"), LVMH_TOKEN)
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        await web.connect()
        await plugin.connect()
        await until(lambda: web.listed(sid), what="the session listed")
        renamed = dict(plugin.session, name="a new name", model="glm-6")
        await plugin.emit("session_info", session=renamed)  # on rename/model change
        await until(lambda: (web.listed(sid) or {}).get("name") == "a new name", what="session_list after session_info")
        assert web.listed(sid)["model"] == "glm-6"
        # a type the daemon gives no meaning to (the plugin's buffer_overflow notice) is stored as sent
        await plugin.emit("buffer_overflow", dropped=120)
        await plugin.emit("tool_execution_start", toolCallId="t1", toolName="todo", args={"todos": ["a", "b"]})
        await plugin.emit("tool_execution_update", toolCallId="t1", toolName="todo", partial="...")
        await plugin.emit("tool_execution_end", toolCallId="t1", toolName="todo", isError=False, resultPreview="ok")
        await plugin.emit("bye", reason="shutdown")
        evs = await eventually(lambda: _last(rest, sid, plugin.seq), what="the events stored")
        assert [e["type"] for e in evs] == ["session_info", "buffer_overflow", "tool_execution_start",
                                           "tool_execution_update", "tool_execution_end", "bye"]
        assert evs[1]["dropped"] == 120 and evs[2]["args"] == {"todos": ["a", "b"]}
        assert (await rest.session(sid))["name"] == "a new name"
        await plugin.drop()
        await until(lambda: (web.listed(sid) or {}).get("online") is False, what="offline after bye and close")
    finally:
        await rest.close()
        await web.close()
        await plugin.close()


async def test_stated_limits(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        await plugin.connect()
        for i in range(30):
            await plugin.emit("agent_start")
        await eventually(lambda: _last(rest, sid, plugin.seq), what="events stored")
        status, page = await rest.call("GET", f"/api/sessions/{sid}/events?after=0&limit=1000000")
        assert status == 200 and len(page) == 30  # a limit past the cap is clamped, not refused
        status, body = await rest.prompt(sid, "x" * 64_001)  # a prompt is at most 64,000 characters
        assert status == 413 and isinstance(body["error"], str)
        status, body = await rest.prompt(sid, "x" * 64_000)
        assert status == 200
    finally:
        await rest.close()
        await plugin.close()
