"""A run that ended before its node's store had any of it, whose claim another node then let go by its next send,
is written by the node's restart all the same (chaos seed 2015, issue 41: ``transcript_contradicts_client``, a
``run.completed`` every phone got, 'Echo: phone-1 says m20', its user's message and its run in no node's transcript).

What the history showed: phone-1's send went to n1 at 19.68 s; n1 ran the run (its start, deltas and end on the
stream, every phone got them through n2), then was stopped at 19.70 s and killed at 22.19 s: its writer's batches
(the user's message, the run, its completion, its end) never committed; only the send's claim in ``cluster_runs``
had (``Cluster.start_run`` awaits it). At 22.30 s phone-2 sent into the conversation through n2, which had folded
the run's end: its claim marked the ended run's claim done (``Cluster._claim``). n1's next starts looked for
its claims left *running* with no run in the store (``bridge_core/scale/started.py``): none, so the stream (still
holding the run until Redis was flushed at 28.8 s) was never read back and nobody ever wrote the run.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
locks the ``runs`` table (n1's batches wait) while n1 is killed, as ``test_start_lost.py`` does."""

from __future__ import annotations

from tests.scale.killed import agreed, ended_unstored, pheby_pair, reconnected, until_stored


async def test_a_run_whose_claim_another_node_let_go_is_written_by_its_node_restart(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "ended, claim let go") as pair:
        n1, a2, reads, cid = pair.n1, pair.a2, pair.reads, pair.cid
        run_id, done = await ended_unstored(pair, "ended")  # the exchange in the stream, not in the store
        cur = await reads.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() is None

        # n2 saw the run end: its next send in the conversation lets the run's claim go
        after = (await a2.chat(cid, "sent through n2"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("n1", "done")

        n1.start()
        await until_stored(reads, run_id, "completed", "the run and its end written by n1's next start")
        await reconnected(pair)
        assert [f["status"] for f in a2.conn_frames if f["type"] == "run.finished" and f["run_id"] == run_id] == \
            ["completed"]  # fmt: skip
        texts = await agreed(pair, run_id, done[0]["text"])
        later = texts.index((f"draft-{after}", "Echo: sent through n2"))
        assert texts.index((f"draft-{run_id}", done[0]["text"])) < later, texts  # in its place, by its time
