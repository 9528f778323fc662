"""REST for the bridge's own conversations from the web UI (lvmh_adapter/conversations.py), over real sockets.

Create (with model and reasoning), rename, delete, search, the model list; a pi plugin
session cannot be renamed or deleted by the daemon (409); bad bodies get 400/413 with
a JSON error, and the server keeps serving.
"""

from __future__ import annotations

import re

from tests.lvmh.helpers import session_snapshot

SID = "01a22693-a4c3-719c-9d1e-cccccccccccc"


def _ids(sessions):
    return {s["id"]: s for s in sessions}


async def test_create_then_chat_with_the_demo_agent(lvmh, api, browsers):
    b = await browsers()
    await b.session_list()
    status, made = await api.post("/api/conversations", {"name": "  First steps  "})
    assert status == 201, made
    cid = made["id"]
    assert made["name"] == "First steps"
    assert made["agent"] is False and made["online"] is True
    assert made["model"] == "demo-small" and made["provider"] == "demo"
    # every browser hears of it, and it is a session like any other
    await b.session_list(lambda s: cid in _ids(s))
    status, listed = await api.get("/api/sessions")
    assert cid in _ids(listed)
    status, body = await api.post(f"/api/sessions/{cid}/prompt", {"message": "hi there"})
    assert status == 200, body
    evs = await api.wait_events(cid, lambda e: any(x["type"] == "agent_settled" for x in e))
    assert [e["message"]["text"] for e in evs if e["type"] == "message_end"] == ["hi there", "Echo: hi there"]


async def test_create_without_body_gets_a_default_name(lvmh, api):
    status, made = await api.call("POST", "/api/conversations")
    assert status == 201, made
    assert made["name"] == "New chat"
    assert made["id"] in lvmh.bridge.conversations


async def test_create_with_model_and_reasoning(lvmh, api):
    status, models = await api.get("/api/models")
    assert status == 200
    assert models["providers"] == [{"slug": "demo", "name": "Demo", "models": ["demo-small", "demo-large"], "current": True}]
    assert models["currentModel"] == "demo-small" and models["currentProvider"] == "demo"
    assert "high" in models["reasoningEfforts"] and models["currentReasoning"] == "medium"

    status, made = await api.post("/api/conversations",
                                  {"name": "Big", "model": "demo-large", "provider": "demo", "reasoning": "high"})
    assert status == 201, made
    assert made["model"] == "demo-large"
    cid = made["id"]
    src = lvmh.bridge.default_source
    assert src.current_model(cid).model == "demo-large"
    assert src.reasoning(cid).effort == "high"
    # the global default is unchanged
    assert src.current_model(None).model == "demo-small"


async def test_create_refuses_unknown_model_or_effort_and_creates_nothing(lvmh, api):
    before = set(lvmh.bridge.conversations)
    for body, word in (({"model": "gpt-9"}, "Unknown model"), ({"model": "demo-large", "provider": "nope"}, "Unknown model"),
                       ({"reasoning": "extreme"}, "Unknown reasoning")):
        status, err = await api.post("/api/conversations", body)
        assert status == 400, (body, status, err)
        assert word in err["error"]
    assert set(lvmh.bridge.conversations) == before


async def test_bad_bodies_are_400_or_413(lvmh, api):
    cases = [
        ("POST", "/api/conversations", b"[1, 2]", 400),
        ("POST", "/api/conversations", b"{not json", 400),
        ("POST", "/api/conversations", b'{"name": 5}', 400),
        ("POST", "/api/conversations", b'{"name": "' + b"x" * 300 + b'"}', 413),
    ]
    status, made = await api.post("/api/conversations", {"name": "target"})
    cid = made["id"]
    cases += [
        ("PATCH", f"/api/conversations/{cid}", b"", 400),
        ("PATCH", f"/api/conversations/{cid}", b'{"name": "   "}', 400),
        ("PATCH", f"/api/conversations/{cid}", b'{"name": null}', 400),
    ]
    for method, path, data, want in cases:
        status, err = await api.call(method, path, data=data, headers={**api.headers, "Content-Type": "application/json"})
        assert status == want, (method, path, data[:40], status, err)
        assert isinstance(err["error"], str) and err["error"]
    status, q = await api.get("/api/conversations?q=" + "x" * 300)
    assert status == 400 and q["error"]
    # still serving, nothing renamed
    assert lvmh.bridge.conversations[cid].name == "target"
    status, _ = await api.get("/api/sessions")
    assert status == 200


async def test_rename_delete_and_search(lvmh, api, browsers):
    _, a = await api.post("/api/conversations", {"name": "Refactor the parser"})
    _, b_ = await api.post("/api/conversations", {"name": "Release notes"})
    b = await browsers()
    await b.session_list()
    status, renamed = await api.call("PATCH", f"/api/conversations/{a['id']}", json_body={"name": "Parser rewrite"})
    assert status == 200, renamed
    assert renamed["name"] == "Parser rewrite"
    await b.session_list(lambda s: _ids(s).get(a["id"], {}).get("name") == "Parser rewrite")

    status, found = await api.get("/api/conversations?q=PARSER")
    assert status == 200 and [s["id"] for s in found] == [a["id"]]
    status, found = await api.get("/api/conversations?q=")
    assert {s["id"] for s in found} == {a["id"], b_["id"]}
    status, found = await api.get("/api/conversations?q=nothing-like-it")
    assert found == []

    status, body = await api.call("DELETE", f"/api/conversations/{a['id']}")
    assert status == 200 and body == {"ok": True}
    await b.session_list(lambda s: a["id"] not in _ids(s))
    assert a["id"] not in lvmh.bridge.conversations
    status, err = await api.get(f"/api/sessions/{a['id']}/events")
    assert status == 404
    for method, body in (("PATCH", {"name": "x"}), ("DELETE", None)):
        status, err = await api.call(method, f"/api/conversations/{a['id']}", json_body=body)
        assert status == 404, (method, status, err)
        assert err["error"]


async def test_delete_during_a_run_cancels_it(lvmh, api):
    _, made = await api.post("/api/conversations", {"name": "slow"})
    cid = made["id"]
    status, _ = await api.post(f"/api/sessions/{cid}/prompt", {"message": "/slow 30"})
    assert status == 200
    # a second prompt while the run is active: 409 saying so
    status, err = await api.post(f"/api/sessions/{cid}/prompt", {"message": "again"})
    assert status == 409 and re.search(r"\brun is (already )?active", err["error"], re.I), err
    status, body = await api.call("DELETE", f"/api/conversations/{cid}")
    assert status == 200, body
    assert cid not in lvmh.bridge.conversations


async def test_plugin_sessions_are_not_renamed_or_deleted_by_the_daemon(lvmh, api, plugins):
    p = plugins(SID, session=session_snapshot(SID, name="pi work"))
    await p.connect()
    for method, body in (("PATCH", {"name": "mine now"}), ("DELETE", None)):
        status, err = await api.call(method, f"/api/conversations/{SID}", json_body=body)
        assert status == 409, (method, status, err)
        assert "pi session" in err["error"]
    status, found = await api.get("/api/conversations?q=pi%20WORK")
    assert [s["id"] for s in found] == [SID]
    assert lvmh.bridge.conversations[SID].name == "pi work"


async def test_unauthenticated_is_401(lvmh, api):
    for method, path in (("GET", "/api/conversations"), ("POST", "/api/conversations"), ("GET", "/api/models"),
                         ("DELETE", "/api/conversations/x")):
        status, err = await api.call(method, path, headers={})
        assert status == 401, (method, path)
