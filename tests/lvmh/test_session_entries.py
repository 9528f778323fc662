"""The live session list and the agent's description, over real sockets (docs/web-ui.md).

Activity in a session sends every browser that one entry (``session_entry``, ``change:
"changed"``) with what the sidebar shows: ``lastEventAt``, ``status``, ``preview`` and the
decisions ``waiting`` (with their expiry), whichever session the browser watches; a
browser that connects afterwards gets them in its first ``session_list``.
``GET /api/agent`` says what the agent of new conversations can do. Who may hear and ask:
only the user's token, from a page of this origin.
"""

from __future__ import annotations

import time

import aiohttp

from bridge_core.model import commands as cmd
from bridge_core.bridge.demo import COMMANDS, DemoAgent
from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import session_snapshot

SID = "01a22693-a4c3-719c-9d1e-eeeeeeeeeeee"


def _ids(sessions):
    return {s["id"]: s for s in sessions}


async def _entry(b, sid, pred, timeout=5.0):
    frame = await b.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == sid
                               and pred(f["session"]), timeout)
    assert frame["change"] == "changed"
    return frame["session"]


async def test_a_waiting_approval_reaches_every_browser_as_one_entry(lvmh, api, browsers):
    watcher = await browsers()  # watches nothing: the sidebar of a page showing another conversation
    await watcher.session_list()
    status, made = await api.post("/api/conversations", {"name": "Deploy"})
    cid = made["id"]
    first = await watcher.session_list(lambda s: cid in _ids(s))  # the create's list
    seen = len(watcher.frames)
    await (await browsers()).session_list()  # a page opened now: the list it got is kept for the next ones
    assert _ids(first)[cid]["status"] == "idle" and _ids(first)[cid]["waiting"] == []
    assert _ids(first)[cid]["agentName"] == "demo" and _ids(first)[cid]["agentLabel"] == "Demo"

    before = time.time()
    status, body = await api.post(f"/api/sessions/{cid}/prompt", {"message": "/approve make deploy"})
    assert status == 200, body
    entry = await _entry(watcher, cid, lambda s: s["status"] == "waiting")
    [waiting] = entry["waiting"]
    assert waiting["kind"] == "approval" and waiting["text"] == "make deploy"
    approval_id = waiting["id"]
    assert approval_id in lvmh.bridge.conversations[cid].approvals
    # the demo denies an unanswered approval after [demo] approval_timeout (300 s): the entry says when
    assert before + 299 <= waiting["expiresAt"] / 1000 <= time.time() + 301
    assert entry["lastEventAt"] >= int(before * 1000)
    assert entry["preview"] == "/approve make deploy"
    # only entries went out for this activity: the whole list is not resent
    assert {f["type"] for f in watcher.frames[seen:]} == {"session_entry"}

    # a browser that connects now has it in its first list (not a list cached before the approval)
    late = await browsers()
    listed = _ids(await late.session_list())
    assert [w["id"] for w in listed[cid]["waiting"]] == [approval_id]

    status, body = await api.post(f"/api/approvals/{approval_id}", {"choice": "once"})
    assert status == 200, body
    done = await _entry(watcher, cid, lambda s: s["status"] == "idle" and s["preview"] == "Ran: make deploy")
    assert done["waiting"] == [] and done["lastEventAt"] >= entry["lastEventAt"]
    status, sessions = await api.get("/api/sessions")
    assert _ids(sessions)[cid]["waiting"] == [] and _ids(sessions)[cid]["status"] == "idle"


async def test_a_question_and_a_running_run_show_in_the_entry(lvmh, api, browsers):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Ask me"), cmd.LOCAL)
    cid = conv.conversation_id
    b = await browsers()
    await b.session_list(lambda s: cid in _ids(s))
    await api.post(f"/api/sessions/{cid}/prompt", {"message": "/clarify Ship it?"})
    entry = await _entry(b, cid, lambda s: s["status"] == "waiting")
    assert [(w["kind"], w["text"], w["expiresAt"]) for w in entry["waiting"]] == [("clarify", "Ship it?", None)]
    clarify_id = entry["waiting"][0]["id"]
    await api.post(f"/api/clarifications/{clarify_id}", {"response": "yes"})
    await _entry(b, cid, lambda s: s["status"] == "idle" and s["preview"] == 'You answered: "yes"')

    await api.post(f"/api/sessions/{cid}/prompt", {"message": "/slow 30"})
    await _entry(b, cid, lambda s: s["status"] == "running")
    await api.post(f"/api/sessions/{cid}/abort", {})
    await _entry(b, cid, lambda s: s["status"] == "idle")


async def test_a_pi_session_entry_follows_its_plugin(lvmh, plugins, browsers):
    b = await browsers()
    p = plugins(SID, session=session_snapshot(SID, name="pi work"))
    await p.connect()
    listed = _ids(await b.session_list(lambda s: SID in _ids(s)))
    assert listed[SID]["agentName"] == "lvmh" and listed[SID]["status"] == "idle"
    await p.run("fix the test", "Done, it passes now")
    entry = await _entry(b, SID, lambda s: s["preview"] == "Done, it passes now" and s["status"] == "idle")
    assert entry["lastEventAt"] is not None and entry["online"] is True
    # the spec's fields are all there, unchanged
    assert {k: entry[k] for k in ("id", "name", "cwd", "model", "provider", "agent", "repo", "startedAt")} == {
        "id": SID, "name": "pi work", "cwd": "/work/project", "model": "glm-5.3", "provider": "zai-renaud",
        "agent": False, "repo": "group/project", "startedAt": 1_700_000_000_000}


async def test_the_agent_says_what_it_can_do(lvmh, api):
    status, agent = await api.get("/api/agent")
    assert status == 200, agent
    assert agent["name"] == "demo" and agent["label"] == "Demo"
    # the demo's runs ignore the effort, though it accepts the canonical set (the model list keeps it)
    assert agent["reasoning"] is False
    assert [c["command"] for c in agent["commands"]] == [c.command for c in COMMANDS]
    usage = {c["command"]: c["usage"] for c in agent["commands"]}
    assert usage["/approve"] == "/approve <command>" and usage["/slow"] == "/slow [seconds]"
    assert all(c["description"] for c in agent["commands"])
    # every command listed is one the demo runs (none is echoed)
    assert all(callable(getattr(DemoAgent, "_" + c["command"][1:], None)) for c in agent["commands"])
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Tools"), cmd.LOCAL)
    status, _ = await api.post(f"/api/sessions/{conv.conversation_id}/prompt", {"message": "/tool grep"})
    evs = await api.wait_events(conv.conversation_id, lambda e: any(x["type"] == "agent_settled" for x in e))
    assert [e["message"]["text"] for e in evs if e["type"] == "message_end"][-1] == "Tool grep completed."


async def test_who_may_ask_what_the_agent_is_and_hear_entries(lvmh, api):
    port = lvmh.ports["lvmh"]
    base = f"http://127.0.0.1:{port}"
    worker = await lvmh.frontends["lvmh"].workers.issue(SID)  # a spawned container's credential
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/api/agent") as resp:
            assert resp.status == 401
        for token in ("wrong-token-wrong-token", worker):
            async with http.get(base + "/api/agent", headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status in (401, 403), token
                assert "commands" not in await resp.text()
        async with http.get(base + "/api/agent", headers={"Authorization": f"Bearer {LVMH_TOKEN}",
                                                          "Origin": "https://evil.example"}) as resp:
            assert resp.status == 403
        # the browser socket, where the entries go: a worker's credential opens nothing
        for token in (worker, "wrong-token-wrong-token"):
            try:
                ws = await http.ws_connect(f"{base}/ws?token={token}")
            except aiohttp.WSServerHandshakeError as exc:
                assert exc.status in (401, 403)
            else:  # pragma: no cover - the upgrade must be refused
                await ws.close()
                raise AssertionError(f"/ws opened with {token[:4]}...")
    # the user's token, from this origin: served
    status, agent = await api.get("/api/agent")
    assert status == 200 and agent["commands"]
