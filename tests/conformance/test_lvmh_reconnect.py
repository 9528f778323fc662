"""lvmh reconnects as a user lives them: a browser that drops mid-run, a daemon restarted or
killed under a run, a plugin that comes back after a restart (or never does).

The assertion is the user's: every event once, in seq order, nothing stuck "running", no
message left open, no decision left pending.
"""

from __future__ import annotations

import uuid

import pytest

from tests.conformance.conftest import LVMH_TOKEN, PHEBY_SECRET
from tests.conformance.lvmh_client import (Browser, Plugin, Rest, SessionView, create_conversation, eventually,
                                           until)


def pheby_url(server) -> str:
    return server.url("pheby", "/ws", scheme="ws")


def closed(view: SessionView) -> None:
    """Nothing stuck: no run running, no message open, no decision pending; each seq once."""
    assert not view.running(), view.types()
    assert view.open_messages() == [], view.types()
    assert view.pending_decisions() == [], view.types()
    seqs = [e["seq"] for e in view.events]
    assert seqs == sorted(set(seqs))


def rest_view(events: list) -> SessionView:
    v = SessionView()
    for e in events:
        v.add(e)
    return v


async def test_browser_drops_mid_run_and_reconnects_missing_nothing(server):
    sid = await create_conversation(pheby_url(server), PHEBY_SECRET, "drop")
    b = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await b.connect()
        await until(lambda: b.listed(sid), what="the conversation in session_list")
        await b.subscribe(sid)
        got, _ = await b.rest.prompt(sid, "/slow 1.5")
        assert got == 200
        await until(lambda: sum(1 for e in b.view(sid).events if e["type"] == "message_update") >= 3,
                    what="live deltas")
        await b.drop()
        await b.rest.settled(sid)  # the run ends while the browser is away
        await b.connect()  # re-subscribes and refetches from the last seq it saw
        view = b.view(sid)
        await until(lambda: "agent_settled" in view.types(), what="the end of the run after reconnecting")
        closed(view)
        assert view.types().count("agent_start") == 1 and view.types().count("agent_settled") == 1
        assert view.texts("user") == ["/slow 1.5"] and len(view.texts()) == 1
        assert view.texts()[0].startswith("w1 w2 w3")
        for e in view.persisted():  # the spec's Message shape in every message_end
            if e["type"] == "message_end":
                assert set(e["message"]) >= {"role", "id", "text", "thinking", "toolCalls", "toolCallId"}
        assert b.twice == []
        # the view is exactly what is persisted (no deltas), and REST agrees
        assert view.persisted() == await b.rest.events(sid)
    finally:
        await b.close()


async def test_plugin_session_events_while_the_browser_is_away(server):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    b = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await plugin.connect()
        await b.connect()
        await until(lambda: (b.listed(sid) or {}).get("online") is True, what="the session online in the list")
        await b.subscribe(sid)
        await plugin.run("first reply here", prompt="first")
        await until(lambda: "agent_settled" in b.view(sid).types(), what="the first run live")
        deltas = [e for e in b.view(sid).events if e["type"] == "message_update"]
        assert [e["delta"] for e in deltas] == ["first ", "reply ", "here "]  # live, never persisted
        await b.drop()
        await plugin.run("second reply", prompt="second")
        await plugin.run("third", prompt="third")
        await b.connect()
        view = b.view(sid)
        await until(lambda: view.types().count("agent_settled") == 3, what="the runs missed while away")
        closed(view)
        assert view.texts() == ["first reply here", "second reply", "third"]
        assert [e["seq"] for e in view.persisted()] == [e["seq"] for e in plugin.buffer if e["seq"] <= plugin.seq]
        assert b.twice == []
    finally:
        await b.close()
        await plugin.close()


@pytest.mark.parametrize("hard", [False, True], ids=["restart", "kill9"])
async def test_a_restart_mid_run_closes_the_interrupted_run_everywhere(server, hard):
    sid = await create_conversation(pheby_url(server), PHEBY_SECRET, "interrupted")
    b = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await b.connect()
        await b.subscribe(sid)
        got, _ = await b.rest.prompt(sid, "/slow 30")
        assert got == 200
        await until(lambda: sum(1 for e in b.view(sid).events if e["type"] == "message_update") >= 3,
                    what="live deltas")
        assert b.view(sid).running()
        await b.drop()
        server.restart(hard=hard)
        old = b
        await old.close()
        b = Browser(server.url("lvmh"), LVMH_TOKEN)  # the daemon's new port; the UI keeps what it saw
        b.views, b.subscription = old.views, sid
        seen = b.view(sid).seq
        await b.connect()
        view = b.view(sid)
        await until(lambda: "agent_settled" in view.types(), what="the interrupted run closed")
        assert all(e["seq"] > seen for e in view.events if e["type"] in ("agent_end", "agent_settled"))
        closed(view)
        closed(rest_view(await b.rest.events(sid)))
        if not hard:  # a clean stop saved the text so far: the closing message_end carries it
            said = [e["message"]["text"] for e in view.events if e["type"] == "message_end" and e["seq"] > seen]
            assert said and said[-1].startswith("w1 w2 w3"), said
        listed = b.listed(sid)
        assert listed is not None and listed["online"] is True
        # the session works again
        got, body = await b.rest.prompt(sid, "after the restart")
        assert got == 200, body
        await until(lambda: view.types().count("agent_settled") == 2, what="a new run after the restart")
        closed(view)
        assert view.texts()[-1] == "Echo: after the restart"
        assert b.twice == []
    finally:
        await b.close()


async def test_a_restart_with_a_pending_approval_resolves_it(server):
    sid = await create_conversation(pheby_url(server), PHEBY_SECRET, "approval")
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        got, _ = await rest.prompt(sid, "/approve rm -rf build")
        assert got == 200

        async def requested():
            return [e for e in await rest.events(sid) if e["type"] == "approval_request"]

        req = (await eventually(requested, what="the approval request"))[0]
        await rest.close()
        server.restart()
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        events = await rest.settled(sid)
        closed(rest_view(events))
        resolved = [e for e in events if e["type"] == "approval_resolved"]
        assert len(resolved) == 1 and resolved[0]["approvalId"] == req["approvalId"]
        assert resolved[0]["choice"] == "deny" and resolved[0]["accepted"] is False
        got, body = await rest.call("POST", f"/api/approvals/{req['approvalId']}", {"choice": "once"})
        assert got in (404, 409), body  # no longer pending
    finally:
        await rest.close()


@pytest.mark.parametrize("hard", [False, True], ids=["restart", "kill9"])
async def test_a_plugin_resends_after_a_daemon_restart_with_no_duplicates(server, hard):
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    try:
        assert await plugin.connect() == 0  # a new session: nothing persisted
        for i in range(20):
            await plugin.run(f"reply {i}", prompt=f"q{i}")
        mid = await plugin.run("the run the restart cuts", prompt="long", settle=False)
        top = max(e["seq"] for e in _all_persisted(plugin))
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        if not hard:
            await eventually(lambda: _last_stored_is(rest, sid, top), what="the events before the restart")
        await rest.close()
        await plugin.drop()
        server.restart(hard=hard)
        # pi keeps working while the daemon is down: these wait in the plugin's buffer
        await plugin.finish(mid, "the run the restart cuts")
        await plugin.run("while the daemon was down", prompt="offline")
        plugin.url = server.url("lvmh", "/agent/ws", scheme="ws")
        last = await plugin.connect()  # resends everything after welcome.lastSeq
        assert 0 <= last <= plugin.seq
        if not hard:  # a clean stop flushed everything the daemon had received before it
            assert last == top
        await plugin.run("after reconnecting", prompt="back")
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        try:
            async def everything():
                evs = await rest.events(sid)
                return evs if evs and evs[-1]["seq"] == plugin.seq else None

            events = await eventually(everything, what="every event of the plugin persisted")
            mine = [e["seq"] for e in _all_persisted(plugin)]
            assert [e["seq"] for e in events] == mine  # nothing missed, nothing twice
            view = rest_view(events)
            closed(view)
            assert view.texts()[-3:] == ["the run the restart cuts", "while the daemon was down", "after reconnecting"]
        finally:
            await rest.close()
    finally:
        await plugin.close()


async def _last_stored_is(rest: Rest, sid: str, seq: int) -> bool:
    evs = await rest.events(sid)
    return bool(evs) and evs[-1]["seq"] == seq


def _all_persisted(plugin: Plugin) -> list:
    return [e for e in plugin.sent if e["type"] != "message_update"]


async def test_a_plugin_that_never_comes_back_has_its_run_closed(server_factory):
    server = server_factory(config="[lvmh]\nplugin_return_seconds = 0.5\n")
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
    rest = None
    try:
        await plugin.connect()
        await plugin.run("done", prompt="one")
        await plugin.run("cut short", prompt="two", settle=False)
        await plugin.emit("tool_execution_start", toolCallId="t1", toolName="bash", args={"command": "ls"})
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        top = max(e["seq"] for e in _all_persisted(plugin))
        await eventually(lambda: _last_stored_is(rest, sid, top), what="the open run stored")
        await rest.close()
        await plugin.close()  # pi is gone for good
        server.restart(hard=True)
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        events = await rest.settled(sid, runs=2)
        view = rest_view(events)
        closed(view)
        assert [e["type"] for e in events if e["type"] == "tool_execution_end"] == ["tool_execution_end"]
        synthetic = [e for e in events if e["seq"] > max(x["seq"] for x in _all_persisted(plugin))]
        assert synthetic and all(e.get("synthetic") is True for e in synthetic)
        assert min(e["seq"] for e in synthetic) > plugin.seq  # above every seq the plugin used, deltas included
        s = await rest.session(sid)
        assert s["online"] is False
        # a plugin that returns after all is told these seqs are taken
        late = Plugin(server.url("lvmh"), LVMH_TOKEN, sid)
        try:
            assert await late.connect() == events[-1]["seq"]
        finally:
            await late.close()
    finally:
        if rest is not None:
            await rest.close()


async def test_the_hello_metadata_survives_a_restart(server):
    sid = f"pi-{uuid.uuid4()}"
    session = {"id": sid, "name": "refactor the parser", "cwd": "/home/dev/parser", "model": "glm-5.3",
               "provider": "zai-renaud", "agent": True, "repo": "team/parser", "startedAt": 1_700_000_123_456}
    plugin = Plugin(server.url("lvmh"), LVMH_TOKEN, sid, session=session)
    try:
        await plugin.connect()  # the welcome: the hello is registered
    finally:
        await plugin.close()
    for hard in (True, False):  # killed right after the hello, then a clean restart
        server.restart(hard=hard)
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        b = Browser(server.url("lvmh"), LVMH_TOKEN)
        try:
            s = await rest.session(sid)
            assert s is not None
            for key, value in session.items():
                assert s[key] == value, key
            assert s["online"] is False
            await b.connect()
            listed = b.listed(sid)
            assert listed is not None and listed["cwd"] == "/home/dev/parser" and listed["name"] == session["name"]
        finally:
            await b.close()
            await rest.close()


async def test_a_plugin_lost_mid_run_has_its_run_closed_live_and_a_returning_one_keeps_it(server_factory):
    server = server_factory(config="[lvmh]\nplugin_return_seconds = 0.5\n")
    gone = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-gone-{uuid.uuid4()}")
    back = Plugin(server.url("lvmh"), LVMH_TOKEN, f"pi-back-{uuid.uuid4()}")
    web = Browser(server.url("lvmh"), LVMH_TOKEN)
    try:
        await web.connect()
        await back.connect()
        await back.run("cut", prompt="q", settle=False)
        mid = [e for e in back.sent if e["type"] == "message_start"][-1]["message"]["id"]
        await back.drop()  # a short network loss: pi keeps its run and comes back in time
        await back.connect()
        await back.finish(mid, "cut")
        await gone.connect()
        await web.subscribe(gone.sid)
        await gone.run("never finished", prompt="q", settle=False)
        await until(lambda: web.view(gone.sid).running(), what="the run live in the browser")
        await gone.close()  # and never comes back
        view = web.view(gone.sid)
        await until(lambda: not view.running(), timeout=10, what="the lost plugin's run closed live")
        closed(view)
        rest = Rest(server.url("lvmh"), LVMH_TOKEN)
        try:
            gone_events = await rest.events(gone.sid)
            closed(rest_view(gone_events))
            synthetic = [e for e in gone_events if e.get("synthetic")]
            assert synthetic and min(e["seq"] for e in synthetic) > gone.seq  # no seq a browser saw is reused
            evs = await rest.events(back.sid)
            assert [e["seq"] for e in evs] == [e["seq"] for e in _all_persisted(back)]  # nothing invented
            assert not any(e.get("synthetic") for e in evs)
        finally:
            await rest.close()
    finally:
        await web.close()
        await gone.close()
        await back.close()
