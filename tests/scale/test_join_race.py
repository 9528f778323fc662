"""A run another node starts while this node joins is that node's, never closed here as interrupted
(chaos seed 2003: event_twice, a run closed as failed mid-stream by a node coming back, then completed
by its own). The joining node read the running runs' nodes (``cluster_runs``), then the bridge read the
runs the store has open: a run started in between had no node in the first read, and "no node" was
taken for this node's own left over from before a restart (bridge_core/scale/cluster.py
``interrupted_here``). Now the runs a start closes are those the store had open when the join read the
nodes: a run started after that is another node's, going on there.

The join is made to wait, at the point between its reads, for a run started on the other node (the
race made certain), over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

from bridge_core.scale.cluster import Cluster
from tests.scale.test_cluster import _app, _nodes
from tests.waiting import until


async def test_a_run_started_elsewhere_while_a_node_joins_is_not_closed_there(
        service_factory, engines, tmp_path, monkeypatch):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    pb = None
    try:
        cid = await pa.create("busy while b joins")
        started: dict = {}
        read_texts = Cluster.read_texts

        async def run_meanwhile(self, run_ids):
            if self.node_id == "b" and not started:
                started["run"] = run = (await pa.chat(cid, "/slow 1"))["run_id"]
                await until(lambda: a.bridge.store.query_one("SELECT 1 FROM runs WHERE run_id=?", (run,)),
                            what="the run's row stored")  # fmt: skip
            return await read_texts(self, run_ids)

        monkeypatch.setattr(Cluster, "read_texts", run_meanwhile)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b")
        monkeypatch.undo()
        run_id = started["run"]
        pb = await _app(b)
        done = await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 15)
        assert done["status"] == "completed", done
        conv = b.bridge.conversations[cid]
        await until(lambda: conv.run is None, what="the run's end on b")
        ends = [f for f in pa.frames if f["type"] == "run.finished" and f["run_id"] == run_id]
        assert ends == [done], ends
        assert [m.text for m in conv.messages] == [m.text for m in a.bridge.conversations[cid].messages]
        assert b.bridge.cluster.runs.get(run_id) is None and b.bridge.runs_ended["failed"] == 0
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()
