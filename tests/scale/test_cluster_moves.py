"""A run moving to another node and a dead node's holds (bridge_core/scale/cluster.py ``move_run``,
``end_run``; bridge_core/scale/holds.py): nodes of one bridge in one process on a private PostgreSQL and
Redis, the store deciding every race exactly once."""

from __future__ import annotations

import asyncio

from bridge_core.model import events as ev
from bridge_core.model.ids import draft_message_id, new_id
from tests.waiting import until


async def _nodes(service_factory, engines, tmp_path, *names):
    store, bus = engines
    return [await service_factory(adapters=("pheby",), store=store, bus=bus, node_id=name, data_dir=tmp_path / name)
            for name in names]  # fmt: skip


def _row(svc, run_id: str):
    return svc.bridge.store.query_one("SELECT node_id, state FROM cluster_runs WHERE run_id=?", (run_id,))


async def _running_on(a, b) -> tuple[str, str]:
    """A run of node ``a`` (as a source that drives its own runs publishes one), known to ``b`` too."""
    cid = a.bridge.create_conversation("moving").conversation_id
    rid = new_id()
    a.bridge.publish(ev.RunStarted(conversation_id=cid, run_id=rid, message_id=draft_message_id(rid)))
    await until(lambda: cid in b.bridge.conversations and b.bridge.conversations[cid].run is not None,
                what="the run known on b")  # fmt: skip
    await until(lambda: _row(a, rid) == ("a", "running"), what="its row in the store")
    return cid, rid


async def test_a_run_moves_to_another_node_and_every_node_learns_it(service_factory, engines, tmp_path):
    a, b, c = await _nodes(service_factory, engines, tmp_path, "a", "b", "c")
    cid, rid = await _running_on(a, b)
    await until(lambda: rid in c.bridge.cluster.runs, what="the run known on c")
    moved = []
    a.bridge.source_for(a.bridge.conversations[cid]).run_moved = lambda conv, run_id: moved.append(run_id)
    assert await b.bridge.cluster.move_run(b.bridge.conversations[cid]) is True
    assert _row(b, rid) == ("b", "running")
    assert rid not in b.bridge.cluster.runs  # b's own now
    await until(lambda: moved == [rid], what="a letting it go")
    await until(lambda: c.bridge.cluster.runs.get(rid) == ("b", cid), what="c routing to b")
    assert a.bridge.cluster.runs.get(rid) == ("b", cid)
    assert await a.bridge.cluster.end_run(rid) is False  # a no longer ends it
    b.bridge.interrupt(cid, rid, "done here")  # b ends it, once
    await until(lambda: all(s.bridge.conversations[cid].run is None for s in (a, b, c)), what="the end everywhere")
    # the end reaches the nodes' state through the bus before b's store has committed its row: wait for the row
    await until(lambda: _row(b, rid) == ("b", "done"), what="the run's row marked done by b")


async def test_a_move_and_its_node_ending_the_run_race_and_one_wins(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    for _ in range(5):
        cid, rid = await _running_on(a, b)
        move = asyncio.ensure_future(b.bridge.cluster.move_run(b.bridge.conversations[cid]))
        ended = await a.bridge.cluster.end_run(rid)
        if ended:
            a.bridge.interrupt(cid, rid, "ended on a")  # what a does once the store says the run is still its own
        moved = await move
        assert ended != moved, (ended, moved)
        assert _row(a, rid) == (("b", "running") if moved else ("a", "done"))
        if moved:
            b.bridge.interrupt(cid, rid, "ended on b")
        await until(lambda: all(s.bridge.conversations[cid].run is None for s in (a, b)), what="the run ended")


async def test_a_dead_nodes_holds_go_to_one_survivor(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    got: list = []
    for svc in (a, b):
        svc.bridge.cluster.holds.on_inherit("test", lambda key, dead, svc=svc: got.append((svc.bridge.cluster.node_id,
                                                                                          key, dead)))  # fmt: skip
    # "ghost" held two things and is not live (it never beat, as a node whose liveness key expired)
    rows = [("test", "k1", "ghost"), ("test", "k2", "ghost")]
    await a.bridge.store.write(lambda c: c.executemany("INSERT INTO cluster_holds(kind, key, node_id) VALUES(?,?,?)", rows))
    await asyncio.gather(a.bridge.cluster.sweep(), b.bridge.cluster.sweep())
    # each node also sweeps every second on its own: the one that claimed the rows may be that sweep,
    # still on its way to handing them to the heir when the two above return (it failed so under load)
    await until(lambda: len(got) == 2, what="both holds inherited")
    assert sorted(key for _, key, _ in got) == ["k1", "k2"] and {dead for *_, dead in got} == {"ghost"}
    (heir,) = {node for node, _, _ in got}  # both went to one survivor
    assert a.bridge.cluster.holds.mine("test") == ({"k1", "k2"} if heir == "a" else set())
    # a hold taken by a live node (a plugin's hello there) is not the heir's to let go any more
    other = b if heir == "a" else a
    await other.bridge.cluster.holds.hold("test", "k1")
    heir_svc = a if heir == "a" else b
    assert await heir_svc.bridge.store.write(heir_svc.bridge.cluster.holds.letting_go("test", "k1")) is False
    assert await heir_svc.bridge.store.write(heir_svc.bridge.cluster.holds.letting_go("test", "k2")) is True
    assert other.bridge.cluster.holds.mine("test") == {"k1"} and heir_svc.bridge.cluster.holds.mine("test") == set()
