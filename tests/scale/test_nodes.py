"""Three `agent-bridge serve` processes on one private PostgreSQL and one private Redis, each
with its own data dir and ports (run/ports.json), the same secrets: one bridge, over real
sockets (docs/scale-out.md, docs/scale-out.md "Several live nodes")."""

from __future__ import annotations

import time

import aiohttp
import pytest

from tests.conformance.lvmh_client import Browser
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from tests.waiting import until

GONE = "This run was interrupted: the bridge node running it stopped."
SLOW_WORDS = [" ".join(f"w{i}" for i in range(1, k + 1)) for k in range(1, 11)]  # `/slow 1`: ten words, cumulative


@pytest.fixture
def nodes(serve_nodes):
    """``nodes("n1", "n2", "n3")``: that many nodes of one bridge, started one after the other."""
    return lambda *names: serve_nodes(*names, adapters="pheby,lvmh")


def _url(proc: BridgeProcess) -> str:
    return f"ws://127.0.0.1:{proc.ports['pheby']}/ws"


async def _pheby(proc: BridgeProcess) -> PhebyApp:
    app = PhebyApp(_url(proc), PHEBY_SECRET)
    await app.connect()
    return app


async def _watching(apps: list[PhebyApp], cid: str) -> None:
    """Each app has the conversation (broadcast to it from the node that created it) open."""
    for app in apps:
        await app.wait_frame(lambda f: f.get("conversation_id") == cid)
        reply = await app.open(cid)
        assert reply["type"] == "conversation.history", reply


def _run_frames(app: PhebyApp, cid: str) -> list[dict]:
    """The frames of ``cid``'s runs as this app got them, from the run's acceptance on."""
    frames = [f for f in app.conn_frames if f.get("conversation_id") == cid]
    start = next(i for i, f in enumerate(frames) if f["type"] == "run.accepted")
    return frames[start:]


async def test_three_nodes_show_one_run_with_identical_frames(nodes):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    apps = [await _pheby(p) for p in (n1, n2, n3)]
    browser = await Browser(f"http://127.0.0.1:{n3.ports['lvmh']}", LVMH_TOKEN).connect()
    try:
        cid = await apps[0].create("Three")
        await _watching(apps[1:], cid)
        await until(lambda: browser.listed(cid), what="the conversation in the browser's session list on n3")
        await browser.subscribe(cid)
        accepted = await apps[0].chat(cid, "/slow 1")
        assert accepted["type"] == "run.accepted", accepted
        for app in apps:
            await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == accepted["run_id"])
        runs = [_run_frames(app, cid) for app in apps]
        # every frame but the drafts is the same frame on every node (ts included); the drafts are
        # cumulative and may coalesce (latest wins), so each node shows some of them, in order
        steady = [[f for f in r if f["type"] != "message.delta"] for r in runs]
        assert steady[0] == steady[1] == steady[2]
        assert [f["type"] for f in steady[0]] == ["run.accepted", "message.start", "message.complete", "run.finished"]
        assert steady[0][2]["text"] == SLOW_WORDS[-1] and steady[0][3]["status"] == "completed"
        for r in runs:
            drafts = [f["text"] for f in r if f["type"] == "message.delta"]
            assert drafts and drafts[-1] == SLOW_WORDS[-1] and drafts == [t for t in SLOW_WORDS if t in drafts]
        for app in apps:  # (a Pheby client shows the user's own message from its chat.send, not others')
            assert [m for m in app.view(cid).transcript() if m[0] == "assistant"] == [("assistant", SLOW_WORDS[-1])]
            assert app.violations == []
        # the lvmh browser on n3 shows the same run, ended
        await until(lambda: browser.view(cid).texts() == [SLOW_WORDS[-1]] and not browser.view(cid).running(),
                    what="the run in the browser on n3")  # fmt: skip
        assert browser.view(cid).open_messages() == [] and browser.twice == []
    finally:
        await browser.close()
        for app in apps:
            await app.close()


async def test_an_approval_raised_on_n1_is_answered_on_n3_and_n2_loses(nodes):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    a1, a2, a3 = [await _pheby(p) for p in (n1, n2, n3)]
    try:
        cid = await a1.create("Approve")
        await _watching([a2, a3], cid)
        await a1.chat(cid, "/approve make deploy")
        aid = (await a3.wait_until(lambda: list(a3.view(cid).approvals)))[0]
        await a2.wait_until(lambda: a2.view(cid).approvals)
        # (request ids of their own: the resolution is broadcast with the winner's request_id)
        await a3.send({"type": "approval.respond", "approval_id": aid, "choice": "once", "request_id": "on-n3"})
        won = await a3.wait_frame(lambda f: f.get("request_id") == "on-n3")
        assert won["type"] == "approval.resolved" and won["choice"] == "once" and won["accepted"] is True, won
        await a2.send({"type": "approval.respond", "approval_id": aid, "choice": "deny", "request_id": "on-n2"})
        lost = await a2.wait_frame(lambda f: f.get("request_id") == "on-n2")
        assert lost["type"] == "error" and lost["error"] == {"code": "approval_not_found",
                                                             "message": "Approval already resolved"}, lost  # fmt: skip
        for app in (a1, a2, a3):
            await app.wait_until(lambda: app.view(cid).transcript()[-1:] == [("assistant", "Ran: make deploy")]
                                 and app.view(cid).run is None)  # fmt: skip
            assert app.view(cid).approvals == {} and app.violations == []
        resolved = [[f for f in app.conn_frames if f["type"] == "approval.resolved"] for app in (a1, a2, a3)]
        assert resolved[0] == resolved[1] == resolved[2] == [won]  # one resolution, told to every surface
        assert won["decided_by"] == "remote" and won["surface"] == "pheby"
    finally:
        for app in (a1, a2, a3):
            await app.close()


async def test_a_cancel_from_n2_stops_a_slow_run_on_n1(nodes):
    n1, n2 = nodes("n1", "n2")
    a1, a2 = await _pheby(n1), await _pheby(n2)
    try:
        cid = await a1.create("Cancel")
        await _watching([a2], cid)
        run_id = (await a1.chat(cid, "/slow 30"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("conversation_id") == cid)
        reply = await a2.request("run.cancel", conversation_id=cid, run_id=run_id)
        assert reply["type"] != "error", reply
        for app in (a1, a2):
            fin = await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id)
            assert fin["status"] == "cancelled"
            assert app.view(cid).open_bubbles() == [] and app.violations == []
        said = a1.view(cid).transcript()[-1]
        assert said == a2.view(cid).transcript()[-1] and said[0] == "assistant"
        assert len(said[1].split()) < 300  # stopped long before its 300 words
    finally:
        await a1.close()
        await a2.close()


async def test_an_attachment_made_on_n1_downloads_from_n2_on_pheby_and_lvmh(nodes):
    from bridge_core.bridge.demo import demo_png

    n1, n2 = nodes("n1", "n2")
    a1 = await _pheby(n1)
    try:
        cid = await a1.create("Files")
        made = []
        for text, data in (("/attach", b"demo attachment\n"), ("/image", demo_png())):
            run_id = (await a1.chat(cid, text))["run_id"]
            added = await a1.wait_frame(lambda f: f["type"] == "attachment.added"
                                        and f["attachment"]["message_id"] == f"draft-{run_id}")  # fmt: skip
            await a1.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id)
            made.append((added["attachment"]["attachment_id"], data))
        pheby = {"X-Pheby-Secret": PHEBY_SECRET}
        lvmh = {"Authorization": f"Bearer {LVMH_TOKEN}"}
        urls = [(f"http://127.0.0.1:{p.ports['pheby']}/attachments/{{}}", pheby) for p in (n1, n2)]
        urls += [(f"http://127.0.0.1:{n2.ports['lvmh']}/api/attachments/{{}}", lvmh)]
        async with aiohttp.ClientSession() as http:
            for aid, data in made:
                for url, auth in urls:
                    async with http.get(url.format(aid), headers=auth) as r:
                        assert r.status == 200 and await r.read() == data, url
                    async with http.get(url.format(aid)) as r:  # no credentials: refused as on one node
                        assert r.status == 401, url
            for url, auth in urls:
                for unknown in ("0" * 32, "not-an-id"):
                    async with http.get(url.format(unknown), headers=auth) as r:
                        assert r.status == 404, url
        assert a1.violations == []
    finally:
        await a1.close()


async def test_a_pi_plugin_reconnecting_to_another_node_continues_its_conversation(nodes):
    """The bridge's side of a pi session: a Pheby client on a third node sees the runs the plugin
    made on n1 and then on n2, each once, and its message reaches the plugin where it now is."""
    import uuid

    from tests.conformance.lvmh_client import Plugin, until as lvmh_until

    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(f"http://127.0.0.1:{n1.ports['lvmh']}", LVMH_TOKEN, sid)
    app = await _pheby(n3)
    try:
        await plugin.connect()
        await app.wait_frame(lambda f: f.get("conversation_id") == sid)
        await app.open(sid)
        await plugin.run("first reply here", prompt="first")
        await app.wait_until(lambda: ("assistant", "first reply here") in app.view(sid).transcript()
                             and app.view(sid).run is None)  # fmt: skip
        await plugin.drop()
        plugin.url = f"ws://127.0.0.1:{n2.ports['lvmh']}/agent/ws"
        await plugin.connect()
        await plugin.run("second reply here", prompt="second")
        await app.wait_until(lambda: ("assistant", "second reply here") in app.view(sid).transcript()
                             and app.view(sid).run is None)  # fmt: skip
        await app.reconnect(url=_url(n1))  # and as the first node has it, after conversation.open
        want = [("user", "first"), ("assistant", "first reply here"), ("user", "second"),
                ("assistant", "second reply here")]  # fmt: skip
        assert app.view(sid).transcript() == want and app.view(sid).open_bubbles() == []
        accepted = await app.chat(sid, "third")  # from n1, where the plugin was: routed to n2
        assert accepted["type"] == "run.accepted", accepted
        await lvmh_until(lambda: [p["message"] for p in plugin.prompts()] == ["third"], what="the prompt at the plugin")
        assert app.violations == []
    finally:
        await plugin.close()
        await app.close()


async def test_a_pi_plugin_reconnecting_to_another_node_continues_its_lvmh_session(nodes):
    """The lvmh side: the plugin's next node knows how far the session was stored (welcome.lastSeq
    from the shared store), browsers on every node list it online and see both connections'
    events once each in seq order, and a prompt over lvmh REST from any node reaches the plugin."""
    import uuid

    from tests.conformance.lvmh_client import Plugin, until as lvmh_until
    from tests.conformance.test_lvmh_reconnect import closed

    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = Plugin(f"http://127.0.0.1:{n1.ports['lvmh']}", LVMH_TOKEN, sid)
    browsers = [await Browser(f"http://127.0.0.1:{p.ports['lvmh']}", LVMH_TOKEN).connect() for p in (n1, n3)]
    try:
        assert await plugin.connect() == 0
        for b in browsers:
            await lvmh_until(lambda: b.listed(sid), what="the session listed on every node")
            await b.subscribe(sid)
        await plugin.run("first reply here", prompt="first")
        for b in browsers:
            await lvmh_until(lambda: b.view(sid).texts() == ["first reply here"], what="the first run in the browser")
        stored = max(e["seq"] for e in plugin.sent if e["type"] != "message_update")
        await plugin.drop()
        plugin.url = f"ws://127.0.0.1:{n2.ports['lvmh']}/agent/ws"
        assert await plugin.connect() == stored  # how far it was stored, from the shared store
        for b in browsers:
            await lvmh_until(lambda: (b.listed(sid) or {}).get("online") is True, what="the session online again")
        await plugin.run("second reply here", prompt="second")
        for b in browsers:
            await lvmh_until(lambda: b.view(sid).texts() == ["first reply here", "second reply here"],
                             what="the second run (on n2) in the browser")  # fmt: skip
            closed(b.view(sid))
            assert b.twice == []
            assert b.view(sid).persisted() == await b.rest.events(sid)
        for i, b in enumerate(browsers):  # a prompt over REST from n1 and from n3 reaches the plugin on n2
            status, body = await b.rest.prompt(sid, f"prompt {i}")
            assert status == 200, body
        await lvmh_until(lambda: [p["message"] for p in plugin.prompts()] == ["prompt 0", "prompt 1"],
                         what="the prompts at the plugin")  # fmt: skip
    finally:
        await plugin.close()
        for b in browsers:
            await b.close()


@pytest.mark.hardening  # a crash; waits for the dead node's liveness to expire (about 10 s)
async def test_kill_9_of_the_node_running_a_run_leaves_every_surface_consistent(nodes):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    a1, a2, a3 = [await _pheby(p) for p in (n1, n2, n3)]
    try:
        slow = await a1.create("Slow")
        gate = await a1.create("Gate")
        await _watching([a2, a3], slow)
        await _watching([a2, a3], gate)
        await a1.chat(gate, "/approve make deploy")
        await a1.chat(slow, "/slow 60")
        await a3.wait_until(lambda: a3.view(gate).approvals)
        await a3.wait_frame(lambda f: f["type"] == "message.delta" and f.get("conversation_id") == slow
                            and len(f["text"].split()) >= 3)  # fmt: skip
        n1.kill9()  # mid-stream, a decision pending
        killed = time.monotonic()
        for app in (a2, a3):  # the contract: the others notice within 15 s and close its runs
            for cid in (slow, gate):
                await app.wait_until(lambda: app.view(cid).run is None and app.view(cid).finished
                                     and [n["text"] for n in app.view(cid).notices] == [GONE], timeout=15)  # fmt: skip
        assert time.monotonic() - killed < 15
        for app in (a2, a3):
            for cid in (slow, gate):
                (fin,) = app.view(cid).finished.values()
                assert fin["status"] == "failed"
                assert app.view(cid).open_bubbles() == [] and app.view(cid).approvals == {}
            assert app.violations == []
            (res,) = [f for f in app.conn_frames if f["type"] == "approval.resolved"]
            assert res["choice"] == "deny" and res["accepted"] is False and res["decided_by"] == "restart"
        said = a2.view(slow).transcript()  # what the run said until n1 died
        assert said == a3.view(slow).transcript() and said[-1][0] == "assistant" and said[-1][1].startswith("w1 w2 w3")
        closers = [p.stderr().count("node n1 is gone: closing its run") for p in (n2, n3)]
        assert sorted(closers) == [0, 2]  # one survivor claimed both runs and closed them
        # the client that was on n1 comes back on n2 and recovers through conversation.open
        await a1.reconnect(url=_url(n2))
        for cid in (slow, gate):
            assert a1.view(cid).run is None and a1.view(cid).approvals == {} and a1.view(cid).open_bubbles() == []
        # the history as n2 has it: the user's message, what was said, and why the run ended
        assert a1.view(slow).transcript() == [("user", "/slow 60"), said[-1], ("assistant", GONE)]
        assert a1.violations == []
    finally:
        for app in (a1, a2, a3):
            await app.close()
