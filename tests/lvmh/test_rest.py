"""REST /api over real HTTP: auth, errors, paging, decisions and attachments of demo runs."""

from __future__ import annotations

import aiohttp
import pytest

from bridge_core.model import commands as cmd
from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import Api

SID = "0b9f3c1e-1111-4222-8333-944445555666"


async def demo_session(lvmh) -> str:
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Demo chat"), cmd.LOCAL)
    return conv.conversation_id


# --- auth ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {LVMH_TOKEN}"},
     {"Authorization": LVMH_TOKEN}, {"Authorization": "Bearer "}],
)
async def test_rest_without_the_token_is_401(lvmh, headers):
    api = Api(lvmh.ports["lvmh"])
    try:
        for path in ("/api/sessions", "/api/sessions/x/events", "/api/gitlab/status", "/api/nothing"):
            status, body = await api.get(path, headers=headers)
            assert status == 401 and isinstance(body["error"], str), (path, status, body)
        status, body = await api.call("POST", "/api/sessions/x/prompt", json_body={"message": "hi"}, headers=headers)
        assert status == 401
    finally:
        await api.close()


async def test_token_in_query_is_not_accepted_on_rest(lvmh):
    api = Api(lvmh.ports["lvmh"])
    try:
        status, _ = await api.get(f"/api/sessions?token={LVMH_TOKEN}", headers={})
        assert status == 401
    finally:
        await api.close()


@pytest.mark.parametrize("path", ["/agent/ws", "/ws"])
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}])
async def test_ws_upgrade_without_the_token_is_refused(lvmh, path, headers):
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"http://127.0.0.1:{lvmh.ports['lvmh']}{path}", headers=headers)
        assert info.value.status == 401


async def test_browser_ws_token_query_and_header(lvmh):
    port = lvmh.ports["lvmh"]
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"http://127.0.0.1:{port}/ws?token=wrong")
        assert info.value.status == 401
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws?token={LVMH_TOKEN}")
        assert (await ws.receive_json(timeout=5))["type"] == "session_list"
        await ws.close()
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws", headers={"Authorization": f"Bearer {LVMH_TOKEN}"})
        assert (await ws.receive_json(timeout=5))["type"] == "session_list"
        await ws.close()
        # the plugin socket takes the header only
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await http.ws_connect(f"http://127.0.0.1:{port}/agent/ws?token={LVMH_TOKEN}")


async def test_web_ui_needs_no_token(lvmh):
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{lvmh.ports['lvmh']}/") as resp:
            assert resp.status == 200
            assert "lvmh" in await resp.text()


# --- errors -------------------------------------------------------------------------------------------


async def test_unknown_api_path_is_json_404(api):
    status, body = await api.get("/api/does/not/exist")
    assert status == 404 and body["error"]
    status, body = await api.call("PUT", "/api/sessions")
    assert status in (404, 405) and body["error"]


@pytest.mark.parametrize(
    "data, status",
    [
        (b"not json", 400),
        (b"[1,2]", 400),
        (b'"text"', 400),
        (b"{}", 400),
        (b'{"message": 5}', 400),
        (b'{"message": "   "}', 400),
        (b'{"message": null}', 400),
        (b"", 400),
        (b'{"message": "' + b"x" * 70_000 + b'"}', 413),
        (b"\xff\xfe", 400),
    ],
)
async def test_bad_prompt_bodies(lvmh, api, data, status):
    sid = await demo_session(lvmh)
    got, body = await api.call("POST", f"/api/sessions/{sid}/prompt", data=data)
    assert got == status and isinstance(body["error"], str)


async def test_body_over_the_limit_is_413(lvmh, api):
    sid = await demo_session(lvmh)
    got, body = await api.call("POST", f"/api/sessions/{sid}/prompt", data=b"x" * (2 * 1024 * 1024))
    assert got == 413 and isinstance(body["error"], str)


@pytest.mark.parametrize(
    "query",
    ["after=-1", "after=abc", "limit=0", "limit=-5", "limit=x", "after=1.5", "after=99999999999999999999",
     "limit=%00", "after= 1 2"],
)
async def test_bad_query_values_are_400(lvmh, api, query):
    sid = await demo_session(lvmh)
    status, body = await api.get(f"/api/sessions/{sid}/events?{query}")
    assert status == 400 and isinstance(body["error"], str)


async def test_events_paging_and_limit_cap(plugins, api):
    p = plugins(SID)
    await p.connect()
    for _ in range(1205):
        await p.event("tool_execution_update", toolCallId="c", toolName="bash", partial="")
    await api.wait_events(SID, lambda e: len(e) == 1000)
    evs = await api.events(SID, limit=5000)
    assert len(evs) == 1000 and evs[0]["seq"] == 1 and evs[-1]["seq"] == 1000
    rest = await api.events(SID, after=1000, limit=5000)
    assert [e["seq"] for e in rest] == list(range(1001, 1206))
    page = await api.events(SID, after=10, limit=3)
    assert [e["seq"] for e in page] == [11, 12, 13]
    assert await api.events(SID, after=5000) == []


# --- the bridge's own conversations over REST ------------------------------------------------------------


def _shape(evs):
    return [(e["type"], e.get("message", {}).get("role")) for e in evs]


async def test_demo_run_visible_over_rest(lvmh, api):
    sid = await demo_session(lvmh)
    status, sessions = await api.get("/api/sessions")
    mine = [s for s in sessions if s["id"] == sid][0]
    assert mine == {
        "id": sid, "name": "Demo chat", "cwd": "", "model": "demo-small", "provider": "demo", "agent": False,
        "repo": None, "startedAt": mine["startedAt"], "online": True, "lastEventAt": None,
        # the web UI's extension fields (lvmh_adapter/activity.py)
        "status": "idle", "preview": "", "waiting": [], "agentName": "demo", "agentLabel": "Demo",
    }
    status, body = await api.post(f"/api/sessions/{sid}/prompt", {"message": "hello there"})
    assert status == 200 and body["ok"] is True and body["runId"]
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    assert _shape(evs) == [
        ("message_start", "user"), ("message_end", "user"), ("agent_start", None), ("message_start", "assistant"),
        ("message_end", "assistant"), ("agent_end", None), ("agent_settled", None),
    ]
    assert [e["seq"] for e in evs] == sorted(e["seq"] for e in evs)
    assert evs[1]["message"]["text"] == "hello there"
    assert evs[4]["message"] == {
        "role": "assistant", "id": f"draft-{body['runId']}", "text": "Echo: hello there", "thinking": None,
        "toolCalls": [], "toolCallId": None,
    }
    assert evs[3]["message"]["id"] == evs[4]["message"]["id"]
    assert evs[5]["status"] == "completed" and evs[6]["aborted"] is False
    assert all(e["sessionId"] == sid and e["v"] == 1 for e in evs)
    status, sessions = await api.get("/api/sessions")
    assert [s for s in sessions if s["id"] == sid][0]["lastEventAt"] == evs[-1]["ts"]


async def test_prompt_during_a_demo_run_is_409_and_abort_cancels(lvmh, api):
    sid = await demo_session(lvmh)
    status, body = await api.post(f"/api/sessions/{sid}/abort")
    assert status == 409
    status, body = await api.post(f"/api/sessions/{sid}/prompt", {"message": "/slow 20"})
    assert status == 200
    status, again = await api.post(f"/api/sessions/{sid}/prompt", {"message": "more"})
    assert status == 409 and again["code"] == "run_active"
    status, aborted = await api.post(f"/api/sessions/{sid}/abort")
    assert status == 200 and aborted["runId"] == body["runId"]
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    assert evs[-1]["aborted"] is True and evs[-2]["status"] == "cancelled"


async def test_tool_run_renders_tool_events(lvmh, api):
    sid = await demo_session(lvmh)
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "/tool search"})
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    tools = [e for e in evs if e["type"].startswith("tool_execution")]
    assert [t["type"] for t in tools] == ["tool_execution_start", "tool_execution_end"]
    assert tools[0]["toolName"] == "search" and tools[0]["args"] == {"input": "demo"}
    assert tools[1]["toolCallId"] == tools[0]["toolCallId"] and tools[1]["isError"] is False
    assert tools[1]["resultPreview"] == "ok"


async def test_approval_over_rest_first_answer_wins(lvmh, api):
    sid = await demo_session(lvmh)
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "/approve rm -rf build"})
    evs = await api.wait_events(sid, lambda e: any(x["type"] == "approval_request" for x in e))
    req = [e for e in evs if e["type"] == "approval_request"][0]
    assert req["command"] == "rm -rf build" and req["choices"] == ["once", "session", "always", "deny"]
    aid = req["approvalId"]
    status, body = await api.post(f"/api/approvals/{aid}", {"choice": "maybe"})
    assert status == 400
    status, body = await api.post(f"/api/approvals/{aid}", {"choice": "once"})
    assert (status, body) == (200, {"ok": True, "approvalId": aid, "choice": "once", "accepted": True})
    status, body = await api.post(f"/api/approvals/{aid}", {"choice": "deny"})
    assert status == 409 and body["code"] == "already_resolved"
    status, body = await api.post("/api/approvals/unknown", {"choice": "once"})
    assert status == 404
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    res = [e for e in evs if e["type"] == "approval_resolved"][0]
    assert res["approvalId"] == aid and res["choice"] == "once" and res["surface"] == "lvmh"
    assert res["decidedBy"] == "remote"
    assert [e for e in evs if e["type"] == "message_end"][-1]["message"]["text"] == "Ran: rm -rf build"


async def test_clarification_over_rest(lvmh, api):
    sid = await demo_session(lvmh)
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "/clarify Proceed?"})
    evs = await api.wait_events(sid, lambda e: any(x["type"] == "clarify_request" for x in e))
    req = [e for e in evs if e["type"] == "clarify_request"][0]
    assert req["question"] == "Proceed?" and req["choices"] == ["yes", "no"] and req["allowFreeText"] is True
    status, body = await api.post(f"/api/clarifications/{req['clarifyId']}", {"response": 3})
    assert status == 400
    status, body = await api.post(f"/api/clarifications/{req['clarifyId']}", {"response": "yes"})
    assert status == 200 and body["ok"] is True
    status, body = await api.post(f"/api/clarifications/{req['clarifyId']}", {"response": "no"})
    assert status == 409
    status, body = await api.post("/api/clarifications/nope", {"response": "no"})
    assert status == 404
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    assert [e for e in evs if e["type"] == "clarify_resolved"][0]["response"] == "yes"


async def test_attachment_download(lvmh, api):
    sid = await demo_session(lvmh)
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "/attach"})
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    att = [e for e in evs if e["type"] == "attachment_added"][0]["attachment"]
    assert att["filename"] == "demo.txt" and att["mimeType"] == "text/plain" and att["size"] == 16
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{lvmh.ports['lvmh']}{att['url']}"
        async with http.get(url) as resp:
            assert resp.status == 401
        async with http.get(url, headers=api.headers) as resp:
            assert resp.status == 200
            assert await resp.read() == b"demo attachment\n"
            assert resp.headers["Content-Type"].startswith("text/plain")
            assert "demo.txt" in resp.headers["Content-Disposition"]
    for bad in ("0" * 32, "../../etc/passwd", "x"):
        status, body = await api.get(f"/api/attachments/{bad}")
        assert status == 404


async def test_deleted_conversation_leaves_the_session_list(lvmh, api):
    sid = await demo_session(lvmh)
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "hi"})
    await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    await lvmh.bridge.execute(cmd.DeleteConversation(conversation_id=sid), cmd.LOCAL)
    status, sessions = await api.get("/api/sessions")
    assert sid not in [s["id"] for s in sessions]
    status, body = await api.get(f"/api/sessions/{sid}/events")
    assert status == 404
    await lvmh.frontends["lvmh"].log.aflush()
    assert lvmh.bridge.store.query("SELECT COUNT(*) FROM events WHERE sessionId=?", (sid,)) == [(0,)]


async def test_wrong_tokens_are_slowed_and_the_right_token_still_works(lvmh):
    """Wrong tokens are answered 401 at the address's pace (never a lockout); none is a plain 401."""
    api = Api(lvmh.ports["lvmh"])
    fe = lvmh.frontends["lvmh"]
    try:
        statuses = [(await api.get("/api/sessions", headers={"Authorization": "Bearer wrong"}))[0] for _ in range(33)]
        assert statuses == [401] * 33
        assert fe.limiter.wrong_total == 33
        status, _ = await api.get("/api/sessions", headers={"Authorization": "Basic x"})  # no bearer: not a guess
        assert status == 401 and fe.limiter.wrong_total == 33
        status, body = await api.get("/api/sessions")
        assert status == 200 and isinstance(body, list)
    finally:
        await api.close()
