"""lvmh Transport 2 (REST) as a web UI meets it: auth, errors, prompts, hostile bodies.

Against ``agent-bridge serve`` as a subprocess; the client is tests/conformance/lvmh_client.py.
"""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from tests.conformance.conftest import LVMH_TOKEN, PHEBY_SECRET
from tests.conformance.lvmh_client import Browser, Plugin, Rest, create_conversation, eventually, until

# every REST endpoint that takes a body (the lvmh protocol "Transport 2", plus the bridge's
# decision endpoints), with a well-formed body for each
SID = "unknown-session"
POSTS = [
    ("POST", "/api/sessions/{sid}/prompt", {"message": "hi"}),
    ("POST", "/api/sessions/{sid}/abort", {}),
    ("POST", "/api/spawn", {"repo": "group/project"}),
    ("POST", "/api/gitlab/connect", {"token": "glpat-xxxxxxxxxxxxxxxxxxxx"}),
    ("POST", "/api/approvals/none", {"choice": "once"}),
    ("POST", "/api/clarifications/none", {"response": "yes"}),
]

HOSTILE = [
    ("not json", b"this is not json", "application/json", 400),
    ("bad utf-8", b"\xff\xfe{}", "application/json", 400),
    ("array", b"[1, 2, 3]", "application/json", 400),
    ("string", b'"message"', "application/json", 400),
    ("number", b"42", "application/json", 400),
    ("null", b"null", "application/json", 400),
    ("deep array", b"[" * 100_000, "application/json", 400),
    ("deep array closed", b"[" * 5000 + b"]" * 5000, "application/json", 400),
    ("deep object", b'{"a":' * 5000 + b"1" + b"}" * 5000, "application/json", 400),
    ("deep inside", b'{"message": ' + b"[" * 200 + b"]" * 200 + b"}", "application/json", 400),
    ("huge", b'{"message": "' + b"x" * (3 * 1024 * 1024) + b'"}', "application/json", 413),
    ("form", b"message=hi&repo=group%2Fproject", "application/x-www-form-urlencoded", 400),
    ("multipart", b"--b\r\nContent-Disposition: form-data; name=\"message\"\r\n\r\nhi\r\n--b--\r\n",
     "multipart/form-data; boundary=b", 400),
]


@pytest.mark.parametrize("method, path, good", POSTS, ids=[p for _, p, _ in POSTS])
async def test_hostile_bodies_get_400_or_413_json_and_the_server_keeps_serving(server, method, path, good):
    sid = await create_conversation(server.url("pheby", "/ws", scheme="ws"), PHEBY_SECRET, "bodies")
    path = path.format(sid=sid)  # a known session: the body is what is judged
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        for name, data, ctype, status in HOSTILE:
            got, body = await rest.call(method, path, data=data, headers={"Content-Type": ctype})
            assert got == status, (name, got, body)
            assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], (name, body)
        # wrong types in an otherwise good body
        for field, value in good.items():
            for bad in (5, True, ["x"], {"x": 1}):
                got, body = await rest.call(method, path, {**good, field: bad})
                assert got in (400, 404, 409, 503), (field, bad, got, body)  # not 400: the type was not the issue
                assert isinstance(body.get("error"), str)
                if got == 400:
                    assert field in body["error"] or "must" in body["error"], body
        got, body = await rest.call("GET", "/api/sessions")
        assert got == 200 and isinstance(body, list)
    finally:
        await rest.close()


async def test_a_body_nested_too_deeply_says_so(server):
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        got, body = await rest.call("POST", "/api/spawn", data=b"[" * 100_000,
                                    headers={"Content-Type": "application/json"})
        assert got == 400 and "deep" in body["error"], body
        got, body = await rest.call("POST", "/api/spawn", data=b'{"repo": ' + b"[" * 100 + b"]" * 100 + b"}",
                                    headers={"Content-Type": "application/json"})
        assert got == 400 and "deep" in body["error"], body
    finally:
        await rest.close()


async def test_errors_are_json_error_objects_and_auth_is_bearer(server):
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        for path in ("/api/sessions", f"/api/sessions/{SID}/events", "/api/spawn/status", "/api/gitlab/status"):
            got, body = await rest.call("GET", path, token="wrong-token-wrong-token")
            assert got == 401 and isinstance(body["error"], str), (path, got, body)
        got, body = await rest.call("GET", "/api/sessions", headers={"Authorization": ""})
        assert got == 401
        got, body = await rest.call("GET", f"/api/sessions/{SID}/events")
        assert got == 404 and isinstance(body["error"], str)
        got, body = await rest.call("GET", "/api/no/such/thing")
        assert got == 404 and isinstance(body["error"], str)
    finally:
        await rest.close()


async def test_prompt_while_a_run_is_active_is_409_saying_so(server):
    sid = await create_conversation(server.url("pheby", "/ws", scheme="ws"), PHEBY_SECRET, "busy")
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        got, body = await rest.prompt(sid, "/slow 5")
        assert got == 200 and body["ok"] is True
        got, body = await rest.prompt(sid, "and another thing")
        assert got == 409, body
        assert "run" in body["error"].lower() and "active" in body["error"].lower(), body
        assert "offline" not in body["error"].lower()
        got, body = await rest.abort(sid)
        assert got == 200 and body["ok"]
        await rest.settled(sid)
        got, body = await rest.prompt(sid, "now it is idle")
        assert got == 200, body
        await rest.settled(sid, runs=2)
    finally:
        await rest.close()


async def test_prompt_and_abort_unknown_session_404_offline_409(server):
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    try:
        for call in (rest.prompt(f"nope-{uuid.uuid4()}", "hi"), rest.abort(f"nope-{uuid.uuid4()}")):
            got, body = await call
            assert got == 404 and isinstance(body["error"], str)
        await plugin.connect()
        got, body = await rest.prompt(sid, "hello pi")
        assert got == 200 and body["ok"] is True
        await until(lambda: plugin.prompts(), what="the prompt at the plugin")
        p = plugin.prompts()[0]
        assert p["type"] == "prompt" and p["message"] == "hello pi" and isinstance(p["promptId"], str)
        assert p["sessionId"] == sid and p["v"] == 1
        got, body = await rest.abort(sid)
        assert got == 200 and body["ok"]
        await until(lambda: any(f.get("type") == "abort" for f in plugin.received), what="abort at the plugin")
        await plugin.drop()
        await eventually(lambda: _offline(rest, sid), what="the session offline")
        for call in (rest.prompt(sid, "hi"), rest.abort(sid)):
            got, body = await call
            assert got == 409 and isinstance(body["error"], str), body
    finally:
        await plugin.close()
        await rest.close()


async def _offline(rest: Rest, sid: str) -> bool:
    s = await rest.session(sid)
    return s is not None and s["online"] is False


async def test_sessions_list_shape_and_events_paging(server):
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    try:
        await plugin.connect()
        for i in range(5):
            await plugin.run(f"reply {i}", prompt=f"question {i}")
        last = plugin.seq
        persisted = list(plugin.buffer)  # what the plugin sent, deltas excluded

        async def all_stored():
            got = await rest.events(sid, after=0, limit=3)  # pages of 3
            return got if len(got) >= len(persisted) else None

        got = await eventually(all_stored, what="every event stored")
        assert [e["seq"] for e in got] == [e["seq"] for e in persisted]  # seq ascending, each once, no deltas
        assert got[-1]["seq"] <= last
        for mine, theirs in zip(persisted, got):
            for key in ("v", "sessionId", "seq", "ts", "type"):
                assert theirs[key] == mine[key]
        status, page = await rest.call("GET", f"/api/sessions/{sid}/events?after={got[2]['seq']}&limit=2")
        assert status == 200 and [e["seq"] for e in page] == [e["seq"] for e in got[3:5]]
        for bad in ("after=-1", "after=x", "limit=0", "limit=abc"):
            status, body = await rest.call("GET", f"/api/sessions/{sid}/events?{bad}")
            assert status == 400 and isinstance(body["error"], str), bad
        s = await rest.session(sid)
        assert set(s) >= {"id", "name", "cwd", "model", "provider", "agent", "repo", "startedAt", "online",
                          "lastEventAt"}
        assert s["online"] is True and s["cwd"] == plugin.session["cwd"] and s["model"] == "glm-5.3"
    finally:
        await plugin.close()
        await rest.close()


async def test_browser_socket_token_in_query(server):
    b = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await b.connect()
        assert isinstance(b.sessions, list)
    finally:
        await b.close()
    async with aiohttp.ClientSession() as http:
        for q in ("", "?token=wrong-token-wrong-token"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(server.url("lvmh", "/ws" + q, scheme="ws"))
            assert info.value.status == 401
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(server.url("lvmh", "/agent/ws", scheme="ws"))
        assert info.value.status == 401


async def test_endpoints_without_a_body_ignore_a_hostile_one(server):
    sid = await create_conversation(server.url("pheby", "/ws", scheme="ws"), PHEBY_SECRET, "no body")
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        for method, path in (("GET", "/api/sessions"), ("GET", f"/api/sessions/{sid}/events"),
                             ("GET", "/api/spawn/status"), ("GET", "/api/gitlab/status"),
                             ("GET", "/api/gitlab/repos"), ("DELETE", "/api/gitlab/connect"),
                             ("DELETE", f"/api/sessions/{sid}/container")):
            for data in (b"[" * 100_000, b"\xff\xfe", b"x" * (2 * 1024 * 1024)):
                got, body = await rest.call(method, path, data=data, headers={"Content-Type": "application/json"})
                assert got != 500 and got < 600, (method, path, got, body)
                assert body is not None and not isinstance(body, bytes), (method, path, got, body)
                if got >= 400:
                    assert isinstance(body.get("error"), str), (method, path, body)
        got, body = await rest.call("GET", "/api/sessions")
        assert got == 200
    finally:
        await rest.close()
