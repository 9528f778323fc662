"""The session list in pages and as deltas, over real sockets (docs/lvmh.md, "The session list in pages").

``GET /api/sessions`` stays the spec's full list; with ``limit``, ``cursor`` or ``q`` it is a page
``{sessions, total, next}`` in the web UI's order. A browser socket opened with ``ext=list-deltas``
gets the first page, then one ``session_entry`` per change of the list (added, changed, removed);
a spec client (no ``ext``) still gets the whole ``session_list`` on every change.
"""

from __future__ import annotations

import json

import pytest

from bridge_core.model import commands as cmd
from tests.lvmh.helpers import session_snapshot
from tests.waiting import until

PI = "01a22693-a4c3-719c-9d1e-0000000000a1"


def _order(s: dict) -> tuple:
    return (0 if s["online"] else 1, -(s.get("lastEventAt") or s.get("startedAt") or 0), s["id"])


async def test_pages_cover_the_list_once_in_order(lvmh, api, plugins):
    for i in range(130):
        lvmh.bridge.create_conversation(f"{'alpha' if i % 3 == 0 else 'beta'} {i}")
    p = plugins(PI, session=session_snapshot(PI, name="pi work", cwd="/home/dev/Alpha-app"))
    await p.connect()
    await p.close()  # an offline pi session: listed after every online one
    status, full = await api.get("/api/sessions")
    assert status == 200 and isinstance(full, list) and len(full) == 131  # the spec's answer, unchanged

    seen, cursor = [], None
    while True:
        status, page = await api.get("/api/sessions?limit=50" + (f"&cursor={cursor}" if cursor else ""))
        assert status == 200 and page["total"] == 131, page
        seen += page["sessions"]
        cursor = page["next"]
        if cursor is None:
            break
    assert [len(seen)] == [131] and len({s["id"] for s in seen}) == 131
    assert [s["id"] for s in seen] == [s["id"] for s in sorted(full, key=_order)]
    assert seen[-1]["id"] == PI and seen[-1]["online"] is False
    assert {k: seen[0][k] for k in ("status", "preview", "waiting", "agentName")} == {
        "status": "idle", "preview": "", "waiting": [], "agentName": "demo"}

    # searched on the server: name, repo, working directory or id, any case
    status, found = await api.get("/api/sessions?q=ALPHA&limit=100")
    names = {s["name"] for s in found["sessions"]}
    assert found["total"] == 45 and len(names) == 45 and "pi work" in names and found["next"] is None
    status, found = await api.get("/api/sessions?q=alpha&limit=20")
    assert len(found["sessions"]) == 20 and found["total"] == 45 and found["next"]
    status, rest = await api.get(f"/api/sessions?q=alpha&limit=100&cursor={found['next']}")
    assert len(rest["sessions"]) == 25 and not {s["id"] for s in rest["sessions"]} & {s["id"] for s in found["sessions"]}
    status, none = await api.get("/api/sessions?q=%25")
    assert none == {"sessions": [], "total": 0, "next": None}

    # one entry by its id
    status, one = await api.get(f"/api/sessions/{seen[3]['id']}")
    assert status == 200 and one == seen[3]


@pytest.mark.parametrize("query", ["limit=0", "limit=x", "cursor=nonsense", "cursor=0:1:", "q=" + "x" * 201])
async def test_bad_list_queries_are_400(lvmh, api, query):
    status, body = await api.get(f"/api/sessions?{query}")
    assert status == 400 and isinstance(body["error"], str), (query, body)


async def _first_list(b):
    return await b.recv_until(lambda f: f["type"] == "session_list")


async def test_list_changes_reach_the_web_ui_as_one_entry_and_spec_clients_as_the_list(lvmh, api, browsers, plugins):
    for i in range(60):
        lvmh.bridge.create_conversation(f"old {i}")
    spec = await browsers()
    web = await browsers(ext="list-deltas")
    full = await _first_list(spec)
    page = await _first_list(web)
    assert len(full["sessions"]) == 60 and set(full) == {"type", "sessions"}
    assert len(page["sessions"]) == 50 and page["total"] == 60 and page["next"] and page["attention"] == []

    # a create: the whole list for the spec client, one entry for the web UI
    status, made = await api.post("/api/conversations", {"name": "New one"})
    cid = made["id"]
    listed = await spec.recv_until(lambda f: f["type"] == "session_list")
    assert cid in {s["id"] for s in listed["sessions"]} and len(listed["sessions"]) == 61
    added = await web.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == cid)
    assert added["change"] == "added" and added["total"] == 61 and added["session"]["name"] == "New one"
    assert added["session"] == made
    assert len(json.dumps(added)) < 2048

    # a rename, then a delete
    status, _ = await api.call("PATCH", f"/api/conversations/{cid}", json_body={"name": "Renamed"})
    changed = await web.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == cid)
    assert changed["change"] == "changed" and changed["session"]["name"] == "Renamed"
    await spec.recv_until(lambda f: f["type"] == "session_list"
                          and any(s["name"] == "Renamed" for s in f["sessions"]))
    status, _ = await api.call("DELETE", f"/api/conversations/{cid}")
    removed = await web.recv_until(lambda f: f["type"] == "session_entry" and f["change"] == "removed")
    assert removed["session"] == {"id": cid} and removed["total"] == 60
    await spec.recv_until(lambda f: f["type"] == "session_list" and len(f["sessions"]) == 60)

    # a pi session connecting and leaving
    p = plugins(PI, session=session_snapshot(PI, name="pi work"))
    await p.connect()
    came = await web.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == PI)
    assert came["change"] == "added" and came["total"] == 61  # its hello's snapshot, then its socket online
    if not came["session"]["online"]:
        came = await web.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == PI)
    assert came["session"]["online"] is True
    await p.close()
    left = await web.recv_until(lambda f: f["type"] == "session_entry" and f["session"]["id"] == PI
                                and f["session"]["online"] is False)
    assert left["change"] == "changed"

    # the web UI never got the whole list again
    assert [f["type"] for f in web.frames].count("session_list") == 1
    assert all(len(json.dumps(f)) < 2048 for f in web.frames if f["type"] == "session_entry")


async def test_the_first_page_names_waiting_decisions_beyond_it(lvmh, api, browsers):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Deploy"), cmd.LOCAL)
    cid = conv.conversation_id
    status, _ = await api.post(f"/api/sessions/{cid}/prompt", {"message": "/approve make deploy"})
    assert status == 200
    await until(lambda: lvmh.bridge.conversations[cid].approvals, what="the approval waiting")
    for i in range(60):  # sixty newer conversations push it off the first page
        lvmh.bridge.create_conversation(f"newer {i}").created_at += 60  # a minute later (one clock tick suffices)
    web = await browsers(ext="list-deltas")
    page = await _first_list(web)
    assert cid not in {s["id"] for s in page["sessions"]}
    [waiting] = page["attention"]
    assert waiting["id"] == cid and waiting["waiting"][0]["text"] == "make deploy"


async def test_every_entry_changing_at_once_sends_the_first_page_again(lvmh, api, browsers):
    for i in range(3):
        lvmh.bridge.create_conversation(f"chat {i}")
    web = await browsers(ext="list-deltas")
    await _first_list(web)
    await lvmh.bridge.execute(cmd.SetModel(model="demo-large"), cmd.LOCAL)  # the default model: every entry
    again = await _first_list(web)
    assert again["total"] == 3 and len(again["sessions"]) == 3
    assert {s["model"] for s in again["sessions"]} == {"demo-large"}


async def test_an_extension_name_opens_nothing_without_the_token(lvmh):
    import aiohttp

    port = lvmh.ports["lvmh"]
    worker = await lvmh.frontends["lvmh"].workers.issue(PI)
    async with aiohttp.ClientSession() as http:
        for token in (worker, "wrong-token-wrong-token", ""):
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(f"http://127.0.0.1:{port}/ws?token={token}&ext=list-deltas")
            assert info.value.status in (401, 403)
