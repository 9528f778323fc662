"""lvmh on several nodes of one bridge (in one process, on a private PostgreSQL and Redis), with the
spec-model browser and plugin: a bridge session's events get the same seqs on every node (live
on a browser of another node, and refetched from any node), stored before shown; a pi session moving
to another node goes on numbering where it was."""

from __future__ import annotations

import pytest

from lvmh_adapter.persistence import EventLog
from tests.conftest import LVMH_TOKEN
from tests.conformance.lvmh_client import Browser, Plugin, Rest, until
from tests.scale.nodes import Nodes


def _base(svc) -> str:
    return f"http://127.0.0.1:{svc.ports['lvmh']}"


@pytest.fixture
async def nodes(engines, tmp_path, monkeypatch):
    appended: list[tuple] = []
    append = EventLog.append

    def counting(self, sid, seq, ts, etype, raw, *rest):
        appended.append((sid, seq))
        return append(self, sid, seq, ts, etype, raw, *rest)

    monkeypatch.setattr(EventLog, "append", counting)
    ns = Nodes(engines, tmp_path, ("lvmh",))
    a, b = await ns.start("a"), await ns.start("b")
    ns.appended = appended
    ns.clients = []
    yield ns, (a, b)
    for c in ns.clients:
        await c.close()
    await ns.close()


async def test_a_browser_on_another_node_sees_a_bridge_session_with_the_same_seqs(nodes):
    stream, (a, b) = nodes
    rest_a, rest_b = Rest(_base(a), LVMH_TOKEN), Rest(_base(b), LVMH_TOKEN)
    browser_a, browser_b = Browser(_base(a), LVMH_TOKEN), Browser(_base(b), LVMH_TOKEN)
    stream.clients += [rest_a, rest_b, browser_a, browser_b]
    status, created = await rest_a.call("POST", "/api/conversations", {"name": "Shared"})
    assert status in (200, 201), (status, created)
    sid = created["id"]
    for br in (browser_a, browser_b):
        await br.connect()
        await until(lambda br=br: br.listed(sid), what="the session listed")
        await br.subscribe(sid)
    for rest, runs in ((rest_a, 1), (rest_b, 2)):  # a run on node a, then one on node b
        status, _ = await rest.prompt(sid, f"run {runs}")
        assert status in (200, 202), status
        stored = await rest_a.settled(sid, runs=runs)
        for br in (browser_a, browser_b):
            await until(lambda br=br: sum(t == "agent_settled" for t in br.view(sid).types()) >= runs,
                        what="the run settled in the browser")
    stored_a, stored_b = await rest_a.events(sid), await rest_b.events(sid)
    assert stored_a == stored_b == stored
    seqs = [e["seq"] for e in stored]
    assert seqs == sorted(set(seqs))
    for br in (browser_a, browser_b):  # what each node streamed live is what was stored, seq for seq
        assert br.twice == []
        assert br.view(sid).persisted() == stored
        assert br.view(sid).texts() == ["Echo: run 1", "Echo: run 2"]
        live = [e["seq"] for e in br.view(sid).events]
        assert live == sorted(set(live))
    # each row stored by the origin, and by a node whose browser watched it before showing it (durable
    # before shown: the same rows, INSERT OR IGNORE; docs/scale-out.md "lvmh numbering"): at most once each
    mine = [k for k in stream.appended if k[0] == sid]
    assert set(mine) == {(sid, e["seq"]) for e in stored} and len(mine) <= 2 * len(stored)


async def test_a_pi_session_moving_to_another_node_goes_on_where_it_was(nodes):
    stream, (a, b) = nodes
    sid = "pi-session-1"
    plugin = Plugin(_base(a), LVMH_TOKEN, sid)
    rest_a, rest_b = Rest(_base(a), LVMH_TOKEN), Rest(_base(b), LVMH_TOKEN)
    stream.clients += [plugin, rest_a, rest_b]
    assert await plugin.connect() == 0
    await plugin.run("one two three", prompt="hi")
    await rest_a.settled(sid)
    assert await rest_b.events(sid) == await rest_a.events(sid)  # served by any node from the store
    await plugin.drop()
    plugin.url = _base(b).replace("http", "ws", 1) + "/agent/ws"
    last = await plugin.connect()  # node b reads where node a left the session
    assert last == max(e["seq"] for e in plugin.sent if e["type"] != "message_update")
    await plugin.run("four five", prompt="again")
    events = await rest_b.settled(sid, runs=2)
    assert events == await rest_a.events(sid)
    assert [e["seq"] for e in events] == [e["seq"] for e in plugin.sent if e["type"] != "message_update"]
