"""A node coming back folds the stream's last ``JOIN_BACK`` seconds again (bridge_core/scale/cluster.py,
"Joining"): among them the start and end of a run that ended before the node's own run began in the same
conversation. Folding that older start again took the place of the run the node's load had put back as the
conversation's active run (its own, left open by a kill -9), and the older end then cleared it: the restart's
close skipped the run as "closed meanwhile", and the other nodes showed it running for good (chaos seed 2015:
``run_not_closed``, ``event_missing``; docs/performance.md "Chaos"). The stream's end is its last entry, not
the clock: once a cluster goes quiet, the window reaches back as far as the last activity.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis."""

from __future__ import annotations

from tests.scale.killed import pheby_pair


async def test_a_run_after_a_short_one_is_closed_when_its_node_restarts(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "a short run, then one waiting") as pair:
        n1, n2, a1, a2, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.cid
        short = (await a1.chat(cid, "before the approval"))["run_id"]  # n1's run, ended at once
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == short, 15)
        waiting = (await a2.chat(cid, "/approve cmd-2015"))["run_id"]  # n2's run, waiting for a decision
        await a1.wait_frame(lambda f: f["type"] == "approval.request" and f.get("run_id") == waiting, 15)
        n2.kill9()  # well within the seconds the restart folds again: the short run's start and end among them
        n2.start()
        end = await a1.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == waiting, 20)
        assert end["status"] == "failed", end
        assert (await a1.open(cid))["run"] is None  # on the node that did not restart

