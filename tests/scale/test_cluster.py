"""Nodes of one bridge in one process (tests/scale/test_nodes.py runs them as processes): the bus
wired into the core, over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

from tests.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp
from tests.waiting import until


async def _nodes(service_factory, engines, tmp_path, *names, adapters=("pheby",), **kw):
    store, bus = engines
    out = []
    for name in names:
        out.append(await service_factory(adapters=adapters, store=store, bus=bus, node_id=name,
                                         data_dir=tmp_path / name, **kw))  # fmt: skip
    return out


async def _app(svc):
    app = PhebyApp(f"ws://127.0.0.1:{svc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    return app


async def test_a_run_on_one_node_is_seen_on_the_other_with_one_numbering(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    assert a.bridge.cluster.node_id == "a" and b.bridge.cluster.node_id == "b"
    seen = {"a": [], "b": []}
    own = {"a": set(), "b": set()}  # what the hub publishing says: this node's own event or not
    for name, svc in (("a", a), ("b", b)):
        svc.bridge.hub.subscribe(lambda n, e, name=name, svc=svc: (
            seen[name].append((n, e)), own[name].add(svc.bridge.cluster.delivering_own)))
    pa, pb = await _app(a), await _app(b)
    try:
        cid = await pa.create("Shared")
        await pb.wait_until(lambda: cid in b.bridge.conversations)
        await pb.open(cid)
        await pa.chat(cid, "hello nodes")
        def done(app):
            return ("assistant", "Echo: hello nodes") in app.view(cid).transcript()

        await pa.wait_until(lambda: done(pa) and pa.view(cid).run is None)
        await pb.wait_until(lambda: done(pb) and pb.view(cid).run is None)
        assert pa.view(cid).transcript()[-1] == pb.view(cid).transcript()[-1]
        assert pa.violations == [] and pb.violations == []
        await until(lambda: len(seen["a"]) == len(seen["b"]) and seen["a"], what="both hubs")
        ns = [n for n, _ in seen["a"]]
        assert ns == [n for n, _ in seen["b"]] and ns == list(range(ns[0], ns[0] + len(ns)))
        from bridge_core.model.serialize import to_dict

        assert [to_dict(e) for _, e in seen["a"]] == [to_dict(e) for _, e in seen["b"]]
        assert own == {"a": {True}, "b": {False}}  # every event here was a's (push notifies from a only)
        # b knows the conversation and its transcript as a folded it, without writing it again
        texts = [[m.text for m in svc.bridge.conversations[cid].messages] for svc in (a, b)]
        assert texts[0] == texts[1] == ["hello nodes", "Echo: hello nodes"]
    finally:
        await pa.close()
        await pb.close()


async def test_an_approval_raised_on_one_node_is_answered_on_another_first_answer_wins(
        service_factory, engines, tmp_path):
    a, b, c = await _nodes(service_factory, engines, tmp_path, "a", "b", "c", approval_timeout=0)
    pa, pb, pc = await _app(a), await _app(b), await _app(c)
    try:
        cid = await pa.create("Decide")
        await pa.chat(cid, "/approve make deploy")
        for app in (pb, pc):
            await app.wait_until(lambda: cid in b.bridge.conversations and cid in c.bridge.conversations)
            await app.open(cid)
        aid = (await pc.wait_until(lambda: list(pc.view(cid).approvals)))[0]
        await pb.wait_until(lambda: pb.view(cid).approvals)
        # both answer at once, from two nodes that do not run it: the node running it decides
        await pc.send({"type": "approval.respond", "approval_id": aid, "choice": "once", "request_id": "rc"})
        await pb.send({"type": "approval.respond", "approval_id": aid, "choice": "deny", "request_id": "rb"})
        rc = await pc.wait_frame(lambda f: f.get("request_id") == "rc")
        rb = await pb.wait_frame(lambda f: f.get("request_id") == "rb")
        replies = sorted([rc["type"], rb["type"]])
        assert replies == ["approval.resolved", "error"], (rc, rb)
        loser = rb if rb["type"] == "error" else rc
        assert loser["error"]["code"] == "approval_not_found"
        assert loser["error"]["message"] == "Approval already resolved"
        winner = "once" if rc["type"] == "approval.resolved" else "deny"
        text = "Ran: make deploy" if winner == "once" else "Denied: make deploy"
        for app in (pa, pb, pc):
            await app.wait_until(lambda: (app.view(cid).transcript()[-1:] == [("assistant", text)]
                                          and app.view(cid).run is None))  # fmt: skip
            assert app.violations == []
        # one resolution, the same frame on every node, telling who decided
        frames = [[f for f in app.conn_frames if f["type"] == "approval.resolved"] for app in (pa, pb, pc)]
        assert frames[0] == frames[1] == frames[2] and len(frames[0]) == 1
        assert frames[0][0]["choice"] == winner and frames[0][0]["decided_by"] == "remote"
        assert frames[0][0]["surface"] == "pheby" and frames[0][0]["request_id"] == ("rc" if winner == "once" else "rb")
        decided = a.bridge.decisions.resolved[aid]
        assert decided.choice == winner and decided.surface == "pheby" and decided.decided_by == "remote"
    finally:
        for app in (pa, pb, pc):
            await app.close()


async def test_a_cancel_from_another_node_stops_the_run_where_it_runs(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    pa, pb = await _app(a), await _app(b)
    try:
        cid = await pa.create("Stop")
        accepted = await pa.chat(cid, "/slow 20")
        run_id = accepted["run_id"]
        await pb.wait_until(lambda: cid in b.bridge.conversations and b.bridge.conversations[cid].run is not None)
        await pb.open(cid)
        reply = await pb.request("run.cancel", conversation_id=cid, run_id=run_id)
        assert reply["type"] != "error", reply
        for app in (pa, pb):
            fin = await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id)
            assert fin["status"] == "cancelled"
            assert app.view(cid).open_bubbles() == [] and app.violations == []
        assert a.bridge.conversations[cid].run is None and b.bridge.conversations[cid].run is None
        # a second cancel of the finished run: not found, answered wherever it is asked
        again = await pb.request("run.cancel", conversation_id=cid, run_id=run_id)
        assert again["type"] == "error" and again["error"]["code"] == "not_found"
    finally:
        await pa.close()
        await pb.close()


async def test_a_node_joining_mid_run_shows_the_run_and_its_end(service_factory, engines, tmp_path):
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    try:
        cid = await pa.create("Join")
        run_id = (await pa.chat(cid, "/slow 2"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "message.delta" and len(f["text"].split()) >= 3)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b")  # loads the store, joins the stream
        assert b.bridge.conversations[cid].run.run_id == run_id
        assert b.bridge.cluster.runs[run_id] == ("a", cid)  # another node's run: not interrupted here
        pb = await _app(b)
        try:
            history = await pb.open(cid)
            assert history["run"]["run_id"] == run_id
            await pb.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id)
            final = pa.view(cid).transcript()[-1]
            assert final == ("assistant", " ".join(f"w{i}" for i in range(1, 21)))
            assert pb.view(cid).transcript() == [("user", "/slow 2"), final] and pb.violations == []
            assert [m.text for m in b.bridge.conversations[cid].messages] == ["/slow 2", final[1]]
        finally:
            await pb.close()
    finally:
        await pa.close()


async def test_a_message_into_a_pi_session_reaches_the_node_its_plugin_is_connected_to(
        service_factory, engines, tmp_path):
    from tests.conftest import LVMH_TOKEN
    from tests.conformance.lvmh_client import Plugin

    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("pheby", "lvmh"))
    plugin = Plugin(f"http://127.0.0.1:{a.ports['lvmh']}", LVMH_TOKEN, "pi-routed-1")
    await plugin.connect()
    pb = await _app(b)
    try:
        sid = plugin.sid
        await until(lambda: sid in b.bridge.conversations, what="the session's conversation on b")
        accepted = await pb.chat(sid, "hello pi")
        assert accepted["type"] == "run.accepted", accepted
        await until(lambda: plugin.prompts(), what="the prompt at the plugin (on a)")
        assert plugin.prompts()[0]["message"] == "hello pi"
        assert b.bridge.cluster.runs[accepted["run_id"]][0] == "a"  # the run is a's
        await plugin.run("hi from pi")
        await pb.wait_until(lambda: pb.view(sid).run is None and pb.view(sid).finished)
        assert pb.view(sid).transcript()[-1] == ("assistant", "hi from pi") and pb.violations == []
        await plugin.drop()  # the plugin goes away: no node hosts the session, b answers itself
        await until(lambda: not a.frontends["lvmh"].plugin_online(sid), what="the plugin gone from a")
        offline = await pb.chat(sid, "again")
        assert offline["type"] == "error" and offline["error"]["message"] == "The pi session is offline", offline
        assert len(plugin.prompts()) == 1
    finally:
        await pb.close()
        await plugin.close()


async def test_sends_racing_on_one_idle_conversation_on_two_nodes_start_one_run(service_factory, engines, tmp_path):
    """Each node's own run-active check passes before the other's run comes back on the bus; the
    claim in the store lets one run in, the others get run_active as on one node."""
    from bridge_core.model import events as ev

    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    started = []
    a.bridge.hub.subscribe(lambda n, e: started.append(e.run_id) if type(e) is ev.RunStarted else None)
    apps = [await _app(svc) for svc in (a, b, a, b, a, b)]
    try:
        cid = await apps[0].create("Race")
        await until(lambda: cid in b.bridge.conversations, what="the conversation on b")
        for round_ in range(3):
            sends = [(app, f"r{round_}-{i}-{k}") for i, app in enumerate(apps) for k in range(4)]
            await asyncio.gather(*(app.send({"type": "chat.send", "conversation_id": cid, "text": "/slow 1",
                                             "request_id": rid}) for app, rid in sends))  # fmt: skip
            replies = [await app.wait_frame(lambda f, rid=rid: f.get("request_id") == rid) for app, rid in sends]
            accepted = [r for r in replies if r["type"] == "run.accepted"]
            assert len(accepted) == 1, [r["type"] for r in replies]
            assert all(r["error"]["code"] == "run_active" for r in replies if r["type"] == "error")
            run_id = accepted[0]["run_id"]
            for app in apps:
                await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, timeout=30)
            assert a.bridge.conversations[cid].run is None and b.bridge.conversations[cid].run is None
        await until(lambda: len(started) == 3, what="three runs started, one per round")
        assert started == [r for r in started if r] and len(set(started)) == 3
        # the conversation is free again at once, on either node (the end just seen frees its claim)
        again = await apps[1].chat(cid, "hello")
        assert again["type"] == "run.accepted", again
        assert all(app.violations == [] for app in apps)
    finally:
        for app in apps:
            await app.close()
