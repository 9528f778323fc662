"""A pi session seen and driven from every node (docs/scale-out.md "pi sessions on every node"): two
`agent-bridge serve` processes on one private PostgreSQL and one private Redis, the spec-model pi
plugin connected to one of them, a browser and REST on the other, over real sockets."""

from __future__ import annotations

import pytest

from tests.conformance.lvmh_client import Browser, Plugin, Rest
from tests.hardening.proc import LVMH_TOKEN
from tests.scale.test_numbering_nodes import _http, nodes  # noqa: F401  (the fixture)
from tests.waiting import until


def _live(browser: Browser, sid: str) -> list[dict]:
    """The events of ``sid`` the browser's socket delivered (not its REST refetches), in order."""
    return [e for f in browser.frames if f.get("type") == "events" and f["sessionId"] == sid for e in f["events"]]


def _online(browser: Browser, sid: str, online: bool):
    return lambda: (browser.listed(sid) or {}).get("online") is online


@pytest.fixture
async def clients():
    made: list = []

    def make(cls, *args):
        made.append(cls(*args))
        return made[-1]

    yield make
    for c in made:
        await c.close()


async def test_a_pi_session_on_n1_is_live_on_n2_and_driven_from_there(nodes, clients):  # noqa: F811
    n1, n2 = nodes("n1", "n2")
    sid = "pi-on-n1"
    plugin = clients(Plugin, _http(n1), LVMH_TOKEN, sid)
    rest1, rest2 = clients(Rest, _http(n1), LVMH_TOKEN), clients(Rest, _http(n2), LVMH_TOKEN)
    browser = clients(Browser, _http(n2), LVMH_TOKEN)
    await browser.connect()
    assert await plugin.connect() == 0

    # the browser on n2 sees the session online, and its run live, deltas included, with n1's seqs
    await until(_online(browser, sid, True), what="the session online in n2's session_list")
    assert (await rest2.session(sid))["online"] is True
    await browser.subscribe(sid)
    await plugin.run("one two three", prompt="hi")
    await until(lambda: "agent_settled" in [e["type"] for e in _live(browser, sid)], what="the run live on n2")
    stored = await rest1.settled(sid)
    assert await rest2.events(sid) == stored
    assert [e["seq"] for e in _live(browser, sid)] == [e["seq"] for e in plugin.sent]  # every frame, live
    assert _live(browser, sid) == plugin.sent  # as the plugin sent it
    assert browser.view(sid).persisted() == stored and browser.twice == []
    assert browser.view(sid).texts() == ["one two three"]

    # a prompt and an abort posted on n2 reach the plugin on n1
    status, body = await rest2.prompt(sid, "from n2")
    assert status == 200 and body["ok"] is True and isinstance(body["promptId"], str), (status, body)
    (prompt,) = await until(plugin.prompts, what="the prompt frame on the plugin")
    assert prompt["message"] == "from n2" and prompt["promptId"] == body["promptId"]
    await plugin.run("steered", prompt="from n2", settle=False)
    status, body = await rest2.abort(sid)
    assert (status, body) == (200, {"ok": True})
    await until(lambda: [f for f in plugin.received if f.get("type") == "abort"], what="the abort frame")
    mid = [e for e in plugin.sent if e["type"] == "message_start"][-1]["message"]["id"]
    await plugin.emit("message_end", message={"role": "assistant", "id": mid, "text": "steered", "thinking": None,
                                              "toolCalls": [], "toolCallId": None})  # fmt: skip
    await plugin.emit("agent_settled", aborted=True)
    await rest1.settled(sid, runs=2)

    # the plugin goes away: n2 says offline; it comes back on n2 and goes on where it was
    await plugin.drop()
    await until(_online(browser, sid, False), what="the session offline on n2")
    status, body = await rest2.prompt(sid, "nobody there")
    assert status == 409 and body["code"] == "offline", (status, body)
    plugin.url = _http(n2).replace("http", "ws", 1) + "/agent/ws"
    last = await plugin.connect()  # welcome.lastSeq from the store, written by n1
    assert last == max(e["seq"] for e in plugin.sent if e["type"] != "message_update")
    rest1_view = clients(Browser, _http(n1), LVMH_TOKEN)
    await rest1_view.connect()
    await until(_online(rest1_view, sid, True), what="the session online on n1 again (held by n2)")
    await rest1_view.subscribe(sid)
    status, body = await rest1.prompt(sid, "from n1")  # and now n1 drives it on n2
    assert status == 200 and body["ok"] is True, (status, body)
    await until(lambda: len(plugin.prompts()) == 2, what="the second prompt")
    assert plugin.prompts()[-1]["message"] == "from n1"
    await plugin.run("four five", prompt="from n1")
    stored = await rest2.settled(sid, runs=3)
    assert await rest1.events(sid) == stored
    assert [e["seq"] for e in stored] == [e["seq"] for e in plugin.sent if e["type"] != "message_update"]
    await until(lambda: rest1_view.view(sid).persisted() == stored, what="n1's browser up to date")
    assert [e["seq"] for e in _live(rest1_view, sid)] == [e["seq"] for e in plugin.sent[-len(_live(rest1_view, sid)):]]
    await until(lambda: browser.view(sid).persisted() == stored, what="n2's browser up to date")
    assert browser.twice == [] and rest1_view.twice == []


async def test_an_approval_raised_on_n1_is_answered_over_lvmh_rest_on_n2(nodes, clients):  # noqa: F811
    n1, n2 = nodes("n1", "n2")
    rest1, rest2 = clients(Rest, _http(n1), LVMH_TOKEN), clients(Rest, _http(n2), LVMH_TOKEN)
    status, created = await rest1.call("POST", "/api/conversations", {"name": "Decide"})
    assert status in (200, 201), (status, created)
    sid = created["id"]
    status, _ = await rest1.prompt(sid, "/approve make deploy")  # runs on n1
    assert status in (200, 202)

    async def asked():
        return [e for e in await rest2.events(sid) if e["type"] == "approval_request"]

    (request,) = await until(asked, what="the approval request stored")
    status, body = await rest2.call("POST", f"/api/approvals/{request['approvalId']}", {"choice": "once"})
    assert status == 200 and body["ok"] is True and body["accepted"] is True, (status, body)
    status, body = await rest2.call("POST", f"/api/approvals/{request['approvalId']}", {"choice": "deny"})
    assert status in (404, 409), (status, body)  # decided already, by the first answer
    events = await rest2.settled(sid)
    (resolved,) = [e for e in events if e["type"] == "approval_resolved"]
    assert resolved["choice"] == "once"


async def test_a_node_started_later_knows_and_a_dead_node_takes_its_sessions_offline(nodes, clients):  # noqa: F811
    n1, n2 = nodes("n1", "n2")
    sid = "pi-on-a-dying-node"
    plugin = clients(Plugin, _http(n1), LVMH_TOKEN, sid)
    assert await plugin.connect() == 0
    await plugin.run("before", prompt="hi")
    (n3,) = nodes("n3")  # started after the plugin connected: it asks, n1 answers
    rest3 = clients(Rest, _http(n3), LVMH_TOKEN)

    async def online_on_n3():
        s = await rest3.session(sid)
        return s is not None and s["online"] is True

    await until(online_on_n3, what="the session online on n3")
    status, body = await rest3.prompt(sid, "from n3")
    assert status == 200 and body["ok"] is True, (status, body)
    await until(plugin.prompts, what="the prompt from n3")
    browser = clients(Browser, _http(n2), LVMH_TOKEN)
    await browser.connect()
    await until(_online(browser, sid, True), what="the session online on n2")
    n1.kill9()  # no `off` ever comes: n2 notices n1's liveness expired
    await until(_online(browser, sid, False), timeout=30, what="the session offline on n2")
    plugin.url = _http(n2).replace("http", "ws", 1) + "/agent/ws"
    await plugin.drop()
    last = await plugin.connect()
    assert last == max(e["seq"] for e in plugin.sent if e["type"] != "message_update")
    await until(_online(browser, sid, True), what="the session online on n2, its new node")
