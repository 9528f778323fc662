"""A pi run in progress across nodes (docs/scale-out.md "A pi run follows its plugin" and "A pi
run left open when its node dies"): three `agent-bridge serve` processes on one private
PostgreSQL and one private Redis, the spec-model pi plugin, a Pheby client and lvmh browsers on
other nodes, over real sockets."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.conformance.lvmh_client import Browser, Plugin, Rest, eventually, until
from tests.conformance.pheby_client import PhebyApp
from tests.conformance.test_lvmh_reconnect import closed, rest_view
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from tests.scale.pi import lvmh_http, plugin_url

RETURN = 1.0  # [lvmh] plugin_return_seconds on these nodes: how long a lost plugin's run stays open
CONTRACT = 15.0  # docs/scale-out.md "Several live nodes": a dead node's runs are closed within this


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="pheby,lvmh", config={"lvmh": {"plugin_return_seconds": RETURN}})


async def _pheby(proc: BridgeProcess) -> PhebyApp:
    app = PhebyApp(f"ws://127.0.0.1:{proc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    return app


async def _watch(app: PhebyApp, sid: str) -> None:
    """The pi session's conversation (broadcast when its plugin first said hello) open in ``app``."""
    await app.wait_frame(lambda f: f.get("conversation_id") == sid)
    reply = await app.open(sid)
    assert reply["type"] == "conversation.history", reply


def _frames(app: PhebyApp, sid: str, ftype: str) -> list[dict]:
    return [f for f in app.conn_frames if f.get("conversation_id") == sid and f["type"] == ftype]


def _live(browser: Browser, sid: str) -> list[dict]:
    """The events of ``sid`` the browser's socket delivered (not its REST refetches), in order."""
    return [e for f in browser.frames if f.get("type") == "events" and f["sessionId"] == sid for e in f["events"]]


async def _has_seq(rest: Rest, sid: str, seq: int) -> bool:
    return any(e["seq"] == seq for e in await rest.events(sid))


async def _durable(clients, proc: BridgeProcess, plugin: Plugin) -> None:
    """What the plugin sent is in the shared store (read through ``proc``): the node holding it
    writes in batches, and a kill -9 before its write is a loss the plugin's resend repairs, not
    what these tests are about (docs/scale-out.md)."""
    last, rest = _stored(plugin)[-1]["seq"], clients(Rest(lvmh_http(proc), LVMH_TOKEN))
    await eventually(lambda: _has_seq(rest, plugin.sid, last), what=f"seq {last} stored")


def _stored(plugin: Plugin) -> list[dict]:
    return [e for e in plugin.sent if e["type"] != "message_update"]


async def test_a_pi_run_in_progress_follows_its_plugin_to_another_node(nodes, clients):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = clients(Plugin(lvmh_http(n1), LVMH_TOKEN, sid))
    app = clients(await _pheby(n3))
    assert await plugin.connect() == 0
    await _watch(app, sid)
    browser = clients(Browser(lvmh_http(n1), LVMH_TOKEN))
    await browser.connect()
    await until(lambda: browser.listed(sid), what="the session in n1's session_list")
    await browser.subscribe(sid)

    # a run begins on n1 and streams some text
    mid = await plugin.run("one two three", prompt="go", settle=False)
    await app.wait_frame(lambda f: f["type"] == "message.delta" and f["text"] == "one two three ")
    (accepted,) = _frames(app, sid, "run.accepted")
    run_id = accepted["run_id"]

    # the plugin loses n1 and says hello to n2 within the grace: the run moves with it
    await plugin.drop()
    plugin.url = plugin_url(n2)
    assert await plugin.connect() == _stored(plugin)[-1]["seq"]  # (and it resends what follows lastSeq)
    assert await n1.wait_log(f"took its run {run_id} to another node")  # n1 let it go: its grace ends nothing
    for word in ("four", "five"):
        await plugin.emit("message_update", delta=word + " ")
    await plugin.finish(mid, "one two three four five")

    # Pheby on n3: one run, started once and finished once, completed, with the whole text
    await app.wait_until(lambda: app.view(sid).finished)
    (finished,) = _frames(app, sid, "run.finished")
    assert finished["run_id"] == run_id and finished["status"] == "completed", finished
    assert [f["run_id"] for f in _frames(app, sid, "run.accepted")] == [run_id]
    assert len(_frames(app, sid, "message.start")) == 1
    texts = [f["text"] for f in _frames(app, sid, "message.delta")]  # (Pheby may coalesce deltas)
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), texts  # one message, its text only growing
    assert "one two three four five ".startswith(texts[-1]), texts
    assert app.view(sid).transcript()[-1] == ("assistant", "one two three four five")
    assert app.view(sid).run is None and app.view(sid).open_bubbles() == [] and app.violations == []
    await app.open(sid)  # and as n3 keeps it
    assert app.view(sid).transcript() == [("user", "go"), ("assistant", "one two three four five")]
    assert app.view(sid).run is None

    # the browser on n1: every event of the session once, live, in seq order, as the plugin sent it
    rest = clients(Rest(lvmh_http(n3), LVMH_TOKEN))
    stored = await rest.settled(sid)
    await until(lambda: browser.view(sid).persisted() == stored, what="n1's browser up to date")
    assert _live(browser, sid) == plugin.sent
    assert browser.twice == []
    closed(browser.view(sid))
    assert [e["seq"] for e in stored] == [e["seq"] for e in _stored(plugin)]  # nothing invented, nothing lost
    assert not any(e.get("synthetic") for e in stored)

    # the run was n2's: a second run there is a run of its own, and a message from n3 reaches the plugin
    second = await app.chat(sid, "again")
    assert second["type"] == "run.accepted" and second["run_id"] != run_id, second
    await until(lambda: [p["message"] for p in plugin.prompts()] == ["again"], what="the prompt on n2's plugin")


@pytest.mark.hardening  # a crash; waits for the dead node's liveness to expire (about 10 s)
async def test_a_pi_run_left_open_by_a_dead_node_is_closed_once_on_every_surface(nodes, clients):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = clients(Plugin(lvmh_http(n1), LVMH_TOKEN, sid))
    app = clients(await _pheby(n2))
    assert await plugin.connect() == 0
    await _watch(app, sid)
    browsers = [clients(Browser(lvmh_http(p), LVMH_TOKEN)) for p in (n2, n3)]
    for b in browsers:
        await b.connect()
        await until(lambda: b.listed(sid), what="the session listed")
        await b.subscribe(sid)
    await plugin.run("one two three", prompt="go", settle=False)
    await plugin.emit("tool_execution_start", toolCallId="t1", toolName="bash", args={"command": "ls"})
    await app.wait_frame(lambda f: f["type"] == "message.delta" and f["text"] == "one two three ")
    for b in browsers:
        await until(lambda: b.view(sid).types()[-1:] == ["tool_execution_start"], what="the run live on every node")
    await _durable(clients, n3, plugin)

    n1.kill9()  # the node holding the plugin, mid-run; the plugin never comes back
    killed = time.monotonic()
    await plugin.close()

    # Pheby: the run closed as after a restart, its message completed with what was said
    await app.wait_until(lambda: app.view(sid).finished, timeout=CONTRACT)
    (finished,) = app.view(sid).finished.values()
    assert finished["status"] == "failed"
    assert app.view(sid).transcript()[-1] == ("assistant", "one two three ")
    assert app.view(sid).open_bubbles() == [] and app.violations == []

    # lvmh, on both other nodes: the run closed once, by one survivor, with events marked synthetic
    for b in browsers:
        await until(lambda: not b.view(sid).running(), timeout=CONTRACT + RETURN + 5 - (time.monotonic() - killed),
                    what="the lvmh run closed")  # fmt: skip
    assert time.monotonic() - killed < CONTRACT + RETURN
    rest = clients(Rest(lvmh_http(n3), LVMH_TOKEN))
    events = await rest.events(sid)
    synthetic = [e for e in events if e["seq"] > _stored(plugin)[-1]["seq"]]
    assert [e["type"] for e in synthetic] == ["message_end", "tool_execution_end", "agent_settled"], synthetic
    assert all(e.get("synthetic") is True for e in synthetic)
    assert min(e["seq"] for e in synthetic) > plugin.seq  # above every seq the plugin used, deltas included
    closed(rest_view(events))
    for b in browsers:
        await until(lambda: b.view(sid).persisted() == events, what="every browser up to date")
        assert b.twice == []
        closed(b.view(sid))
    closers = [p.stderr().count("did not come back; closing its open run") for p in (n2, n3)]
    assert sorted(closers) == [0, 1], closers


@pytest.mark.hardening  # a crash; waits for the dead node's liveness to expire (about 10 s)
async def test_a_pi_run_goes_on_where_its_plugin_returns_after_its_node_died(nodes, clients):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = clients(Plugin(lvmh_http(n1), LVMH_TOKEN, sid))
    app1, app3 = clients(await _pheby(n1)), clients(await _pheby(n3))
    slow = await app1.create("Slow")  # a run of the demo agent on n1 too: its close shows the sweep came
    await _watch(app3, slow)
    assert await plugin.connect() == 0
    await _watch(app3, sid)
    accepted = await app1.chat(slow, "/slow 60")
    assert accepted["type"] == "run.accepted", accepted
    mid = await plugin.run("one two three", prompt="go", settle=False)
    await app3.wait_frame(lambda f: f["type"] == "message.delta" and f["text"] == "one two three ")
    (started,) = _frames(app3, sid, "run.accepted")
    await _durable(clients, n3, plugin)

    n1.kill9()  # mid-run; the plugin comes back on n2 at once (n1 never says it let go)
    await plugin.drop()
    plugin.url = plugin_url(n2)
    assert await plugin.connect() == _stored(plugin)[-1]["seq"]
    await plugin.emit("message_update", delta="four ")
    await app3.wait_frame(lambda f: f["type"] == "message.delta" and f["text"] == "one two three four ")

    # the survivors close n1's own run; the pi run is n2's now and goes on
    await app3.wait_until(lambda: app3.view(slow).finished, timeout=CONTRACT)
    assert not app3.view(sid).finished and app3.view(sid).run is not None
    await plugin.emit("message_update", delta="five ")
    await plugin.finish(mid, "one two three four five")
    await app3.wait_until(lambda: app3.view(sid).finished)
    (finished,) = _frames(app3, sid, "run.finished")
    assert finished["run_id"] == started["run_id"] and finished["status"] == "completed", finished
    assert [f["run_id"] for f in _frames(app3, sid, "run.accepted")] == [started["run_id"]]
    texts = [f["text"] for f in _frames(app3, sid, "message.delta")]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:])), texts
    assert app3.view(sid).transcript()[-1] == ("assistant", "one two three four five")
    assert app3.view(sid).open_bubbles() == [] and app3.violations == []
    rest = clients(Rest(lvmh_http(n3), LVMH_TOKEN))
    stored = await rest.settled(sid)
    assert [e["seq"] for e in stored] == [e["seq"] for e in _stored(plugin)]  # nothing invented, nothing lost
    assert not any(e.get("synthetic") for e in stored)
