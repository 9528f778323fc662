"""Every node stores the lvmh events it renders of a bridge conversation, not only the event's origin
(issue 41, chaos seed 2003 ``decision_not_once``; docs/scale-out.md "Durable before shown").

An approval resolved on n1 (every phone got ``approval.resolved``), n1 killed (-9) 0.13 s after, before
its batch of lvmh events committed; no browser watched the session on another node, so no other node
stored them: the session's stored events lacked the approval's resolution and the run's end on every
node, for good (a restarted n1 folds them again without storing them: not its own events any more).
Here n1's lvmh event log loses everything after the approval's request (as its kill would), and the
survivor, with no browser, must store the resolution and the run's end, once each, in order.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from tests.lvmh.helpers import Api
from tests.scale.test_cluster import _nodes
from tests.waiting import until


async def test_a_survivor_without_a_browser_stores_what_the_killed_origin_had_not(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("lvmh",))
    api_a, api_b = Api(a.ports["lvmh"]), Api(b.ports["lvmh"])
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="origin lost"), cmd.LOCAL)
        sid = conv.conversation_id
        status, _ = await api_a.post(f"/api/sessions/{sid}/prompt", {"message": "/approve make all"})
        assert status == 200
        evs = await api_a.wait_events(sid, lambda e: any(x["type"] == "approval_request" for x in e))
        aid = next(e["approvalId"] for e in evs if e["type"] == "approval_request")
        await until(lambda: sid in b.bridge.conversations and b.bridge.conversations[sid].run is not None,
                    what="the run known on b")
        log_a = a.frontends["lvmh"].book.log
        await log_a.aflush()
        log_a.append = lambda *args, **kw: None  # a's batches from here on never commit (its kill -9)
        status, _ = await api_a.post(f"/api/approvals/{aid}", {"choice": "once"})
        assert status == 200
        await until(lambda: b.bridge.conversations[sid].run is None, timeout=10, what="the run ended on b")
        await b.frontends["lvmh"].book.log.aflush()
        stored = await api_b.events(sid)
        types = [e["type"] for e in stored]
        assert [e["approvalId"] for e in stored if e["type"] == "approval_resolved"] == [aid], types
        assert types.count("agent_end") == 1 and types[-1] == "agent_settled", types
        seqs = [e["seq"] for e in stored]
        assert seqs == sorted(set(seqs)), seqs
        assert await api_a.events(sid) == stored  # one store: the same from any node
    finally:
        await api_a.close()
        await api_b.close()


def _http(proc) -> str:
    return f"http://127.0.0.1:{proc.ports['lvmh']}"


def _resolved(events: list, aid: str) -> list:
    return [e for e in events if e["type"] == "approval_resolved" and e["approvalId"] == aid]


async def _resolve_then_kill(serve_nodes) -> tuple:
    """Three nodes; a run on n1 asks an approval, n1 resolves it and is killed at once, before any browser
    fetched the session (it renders its lvmh events of the resolution as the bus returns them)."""
    from tests.conformance.lvmh_client import Rest
    from tests.hardening.proc import LVMH_TOKEN

    procs = serve_nodes("n1", "n2", "n3", adapters="lvmh")
    rests = [Rest(_http(n), LVMH_TOKEN) for n in procs]
    status, created = await rests[0].call("POST", "/api/conversations", {"name": "Resolved, then killed"})
    assert status in (200, 201), (status, created)
    sid = created["id"]
    status, _ = await rests[0].prompt(sid, "/approve make all")
    assert status in (200, 202), status

    async def asked():
        evs = await rests[0].events(sid)
        return next((e["approvalId"] for e in evs if e["type"] == "approval_request"), None)

    aid = await until(asked, what="the approval asked on n1")
    status, body = await rests[0].call("POST", f"/api/approvals/{aid}", {"choice": "once"})
    assert status == 200, (status, body)
    procs[0].kill9()
    return procs, rests, sid, aid


async def _restarted(n1, rests: list) -> None:
    from tests.conformance.lvmh_client import Rest
    from tests.hardening.proc import LVMH_TOKEN

    n1.start()  # under its own name
    await rests[0].close()
    rests[0] = Rest(_http(n1), LVMH_TOKEN)  # (its ports may have moved)


async def _closed(rests: list, sid: str, timeout: float, what: str) -> list:
    """Once every node's ``/events`` of ``sid`` hold the run's end, the same on all: those events."""
    last: list = []

    async def same():
        last[:] = [await r.events(sid) for r in rests]
        return all(v and "agent_settled" in [e["type"] for e in v] for v in last) and all(v == last[0] for v in last)

    await until(same, timeout=timeout, what=what)
    return last[0]


def _once(stored: list, aid: str) -> None:
    types = [e["type"] for e in stored]
    assert len(_resolved(stored, aid)) == 1, _decisions(stored)
    assert _resolved(stored, aid)[0]["choice"] == "once", _decisions(stored)
    assert types.count("agent_start") == types.count("agent_end") == types.count("agent_settled") == 1, types
    seqs = [e["seq"] for e in stored]
    assert seqs == sorted(set(seqs)), seqs


async def test_kill9_right_after_a_resolve_leaves_the_resolution_stored_once_on_every_node(serve_nodes):
    """Over real processes: the survivors close n1's run once its liveness expired; their ``/events``
    hold the resolution once and the run's end, and so does n1's once it is back (after the close)."""
    (n1, _, _), rests, sid, aid = await _resolve_then_kill(serve_nodes)
    try:
        stored = await _closed(rests[1:], sid, 45, "n1's run closed, the same events on n2 and n3")
        _once(stored, aid)
        await _restarted(n1, rests)
        assert await _closed(rests, sid, 20, "the same events on every node, n1 back") == stored
    finally:
        for r in rests:
            await r.close()


async def test_kill9_right_after_a_resolve_then_an_immediate_restart_resolves_it_once(serve_nodes):
    """n1 back before the survivors closed its run: its store lacks the resolution its previous life published
    (the bus has it: every phone got it). Its restart reads the run's decisions back from the stream and writes
    them before it closes the run (``Cluster.read_ends``): the approval resolved once, as "once", never again
    as denied by restart (before: a second ``approval_resolved``, deny, ``decidedBy`` restart)."""
    (n1, _, _), rests, sid, aid = await _resolve_then_kill(serve_nodes)
    try:
        await _restarted(n1, rests)
        _once(await _closed(rests, sid, 30, "n1's run closed, the same events on every node"), aid)
    finally:
        for r in rests:
            await r.close()


def _decisions(events: list) -> list:
    return [(e["seq"], e["type"], e.get("choice"), e.get("decidedBy")) for e in events
            if e["type"] in ("approval_request", "approval_resolved", "agent_end", "notification")]
