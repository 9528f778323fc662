"""The browser socket /ws: session_list on every change, batched events with live deltas."""

from __future__ import annotations

from bridge_core.model import commands as cmd
from tests.lvmh.helpers import session_snapshot, subscribed

SID = "01a22693-a4c3-719c-9d1e-bbbbbbbbbbbb"


def _ids(sessions):
    return {s["id"]: s for s in sessions}


async def test_session_list_on_connect_and_on_plugin_connect_disconnect(lvmh, plugins, browsers):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Bridge chat"), cmd.LOCAL)
    b = await browsers()
    first = await b.session_list()
    assert _ids(first)[conv.conversation_id]["agent"] is False
    assert SID not in _ids(first)

    p = plugins(SID, session=session_snapshot(SID, name="pi work", agent=True))
    await p.connect()
    sessions = await b.session_list(lambda s: SID in _ids(s) and _ids(s)[SID]["online"])
    mine = _ids(sessions)[SID]
    spec = ("id", "name", "cwd", "model", "provider", "agent", "repo", "startedAt", "online", "lastEventAt")
    assert {k: mine[k] for k in spec} == {
        "id": SID, "name": "pi work", "cwd": "/work/project", "model": "glm-5.3", "provider": "zai-renaud",
        "agent": True, "repo": "group/project", "startedAt": 1_700_000_000_000, "online": True, "lastEventAt": None,
    }
    # and the web UI's extension fields (lvmh_adapter/activity.py)
    assert set(mine) - set(spec) == {"status", "preview", "waiting", "agentName", "agentLabel"}
    await p.close()
    sessions = await b.session_list(lambda s: SID in _ids(s) and not _ids(s)[SID]["online"])
    assert _ids(sessions)[SID]["name"] == "pi work"


async def test_session_list_on_session_info_and_new_conversation(lvmh, plugins, browsers):
    p = plugins(SID)
    await p.connect()
    b = await browsers()
    await b.session_list(lambda s: SID in _ids(s))
    await p.event("session_info", session=session_snapshot(SID, name="renamed"))
    await b.session_list(lambda s: _ids(s).get(SID, {}).get("name") == "renamed")
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Another"), cmd.LOCAL)
    await b.session_list(lambda s: conv.conversation_id in _ids(s))
    await lvmh.bridge.execute(cmd.RenameConversation(conversation_id=conv.conversation_id, name="Other"), cmd.LOCAL)
    await b.session_list(lambda s: _ids(s).get(conv.conversation_id, {}).get("name") == "Other")
    await lvmh.bridge.execute(cmd.DeleteConversation(conversation_id=conv.conversation_id), cmd.LOCAL)
    await b.session_list(lambda s: conv.conversation_id not in _ids(s))


async def test_live_deltas_reach_the_browser_but_are_not_persisted(lvmh, plugins, browsers, api):
    p = plugins(SID)
    await p.connect()
    b = await browsers()
    await b.send({"type": "subscribe", "sessionId": SID})
    await subscribed(lvmh, SID)  # the subscribe is read before the plugin's events
    await p.run("question", "one two three")
    got = await b.events_until(SID, lambda e: e["type"] == "agent_settled")
    types = [e["type"] for e in got]
    assert types == [
        "agent_start", "message_start", "message_end", "message_start",
        "message_update", "message_update", "message_update", "message_end", "agent_end", "agent_settled",
    ]
    assert [e["delta"] for e in got if e["type"] == "message_update"] == ["one", " two", " three"]
    assert [e["seq"] for e in got] == list(range(1, 11))
    # the frames chain: each frame's "after" is the seq before its first event
    frames = [f for f in b.frames if f["type"] == "events"]
    prev = 0
    for f in frames:
        assert f["after"] == prev
        prev = f["events"][-1]["seq"]
    stored = await api.events(SID)
    assert [e["type"] for e in stored] == [t for t in types if t != "message_update"]


async def test_unsubscribe_and_one_subscription_at_a_time(lvmh, plugins, browsers):
    other = "other-session-1"
    p = plugins(SID)
    q = plugins(other)
    await p.connect()
    await q.connect()
    b = await browsers()
    await b.send({"type": "subscribe", "sessionId": SID})
    await b.send({"type": "subscribe", "sessionId": other})  # replaces the first
    await subscribed(lvmh, other)
    await subscribed(lvmh, SID, False)
    await p.event("agent_start")
    await q.event("agent_start")
    frame = await b.recv_until(lambda f: f["type"] == "events")
    assert frame["sessionId"] == other
    await b.send({"type": "unsubscribe", "sessionId": other})
    await subscribed(lvmh, other, False)
    await q.event("agent_settled", aborted=False)
    await b.send({"type": "subscribe", "sessionId": SID})
    await subscribed(lvmh, SID)
    await p.event("agent_settled", aborted=False)
    frame = await b.recv_until(lambda f: f["type"] == "events")
    assert frame["sessionId"] == SID and frame["events"][0]["seq"] == 2


async def test_bad_browser_frames_are_answered_and_the_socket_stays(lvmh, browsers, plugins):
    b = await browsers()
    await b.session_list()
    for frame in ["nope", "[]", '{"type": 3}', '{"type": "dance"}', '{"type": "subscribe"}',
                  '{"type": "subscribe", "sessionId": "../x"}', '{"type": "unsubscribe", "sessionId": 5}']:
        await b.send(frame)
        err = await b.recv_until(lambda f: f["type"] == "error")
        assert isinstance(err["error"], str) and err["code"]
    p = plugins(SID)
    await p.connect()
    await b.send({"type": "subscribe", "sessionId": SID})
    await subscribed(lvmh, SID)
    await p.event("agent_start")
    frame = await b.recv_until(lambda f: f["type"] == "events")
    assert frame["events"][0]["type"] == "agent_start"


async def test_subscribing_before_the_session_exists(lvmh, plugins, browsers):
    b = await browsers()
    await b.send({"type": "subscribe", "sessionId": SID})  # e.g. right after POST /api/spawn
    await subscribed(lvmh, SID)
    p = plugins(SID)
    await p.connect()
    await p.event("agent_start")
    frame = await b.recv_until(lambda f: f["type"] == "events")
    assert frame["sessionId"] == SID


async def test_demo_run_streams_to_the_browser(lvmh, browsers, api):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="Demo"), cmd.LOCAL)
    sid = conv.conversation_id
    b = await browsers()
    await b.send({"type": "subscribe", "sessionId": sid})
    await subscribed(lvmh, sid)
    status, body = await api.post(f"/api/sessions/{sid}/prompt", {"message": "hello big world"})
    assert status == 200
    got = await b.events_until(sid, lambda e: e["type"] == "agent_settled")
    deltas = [e["delta"] for e in got if e["type"] == "message_update"]
    assert "".join(deltas) == "Echo: hello big world" and len(deltas) == 4
    assert [e["seq"] for e in got] == sorted(e["seq"] for e in got)
    stored = await api.events(sid)
    assert [e["seq"] for e in stored] == [e["seq"] for e in got if e["type"] != "message_update"]
    assert stored == [e for e in got if e["type"] != "message_update"]


async def test_demo_run_started_elsewhere_is_a_session_event_stream(lvmh, browsers, api):
    """A run started through the bridge (any front end) shows up in lvmh too."""
    b = await browsers()
    result = await lvmh.bridge.execute(cmd.SendMessage(text="/tool lookup"), cmd.Origin(surface="pheby"))
    sid = result.conversation_id
    await b.session_list(lambda s: sid in _ids(s))
    evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
    assert [e["type"] for e in evs if e["type"].startswith("tool_")] == ["tool_execution_start", "tool_execution_end"]


async def test_notification_becomes_an_extension_event(lvmh, api):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="N"), cmd.LOCAL)
    sid = conv.conversation_id
    await api.post(f"/api/sessions/{sid}/prompt", {"message": "/notify build done"})
    evs = await api.wait_events(sid, lambda e: any(x["type"] == "notification" for x in e))
    note = [e for e in evs if e["type"] == "notification"][0]
    assert note["text"] == "build done" and note["title"] == "Demo notification"
