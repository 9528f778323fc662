"""The claims a node's start reads the stream back for (``bridge_core/scale/started.py``): its claims with no run
in the store, running or let go by another node that saw the run end (chaos seed 2015; over real nodes:
``test_start_lost_claim_taken.py``). One whose start the stream does not hold is not read back for ever: a running
one is let go (the conversation free again), a let-go one dropped (another node's kept), so the claims of sends that
never started (refused, or cancelled while their claim waited) are not read back again at every later start. A
running one is first marked lost, for a node that folded its start to close (``bridge_core/scale/adopt.py``), and
let go after ``ADOPT_WAIT`` when nobody did."""

from __future__ import annotations

from bridge_core.bridge.sqlite import Store
from bridge_core.scale.bus import LocalBus
from bridge_core.scale.cluster import MIGRATIONS
from bridge_core.scale.adopt import let_go_later
from bridge_core.scale.started import restore_starts


async def test_a_claim_whose_start_the_stream_lacks_is_read_back_once(tmp_path):
    store = Store(str(tmp_path / "core.db")).open()
    store.migrate("cluster", MIGRATIONS)
    try:
        await store.write(lambda c: c.executemany(
            "INSERT INTO cluster_runs(run_id, conversation_id, node_id, state) VALUES(?,?,?,?)",
            [("r-running", "c1", "n1", "running"), ("r-let-go", "c2", "n1", "done"),
             ("r-other", "c3", "n2", "done")]))  # fmt: skip
        assert await restore_starts(store, LocalBus("n1"), "n1") == 0
        rows = store.query("SELECT run_id, node_id, state FROM cluster_runs ORDER BY run_id")
        # the running one marked lost, still holding its conversation, for a node that folded it (adopt.py)
        assert [tuple(r) for r in rows] == [("r-other", "n2", "done"), ("r-running", "n1:lost", "running")]
        assert await let_go_later(store, "n1", wait=0) == 1  # nobody adopted it: let go
        rows = store.query("SELECT run_id, node_id, state FROM cluster_runs ORDER BY run_id")
        assert [tuple(r) for r in rows] == [("r-other", "n2", "done"), ("r-running", "n1:lost", "done")]
        assert await restore_starts(store, LocalBus("n1"), "n1") == 0
        assert [tuple(r) for r in store.query("SELECT run_id FROM cluster_runs")] == [("r-other",)]  # at the next
    finally:
        store.close()
