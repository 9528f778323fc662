"""A run whose node was killed before its store had the run's start is closed on every node (chaos seed 2003:
``run_not_closed`` and ``event_missing``, docs/performance.md "Chaos"). The send's claim in ``cluster_runs`` was
committed, the run's row in ``runs`` was not (its batch waited); the other nodes folded the start from the stream
and showed the run running for good: the restarted node closed only the runs its store had open, and the node was
live again before anyone took it for dead. Now its start reads the stream back for the start of each claim it left
running without a run (``bridge_core/scale/started.py``), writes it, and closes the run as interrupted.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
locks the ``runs`` table (the batch with the run's row waits) while the node is killed."""

from __future__ import annotations

from tests.scale.killed import after_restart, ended_unstored, pheby_pair, reconnected, until_stored


async def test_a_run_whose_start_the_store_never_had_is_closed_after_its_node_restarts(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "started, never stored") as pair:
        n1, n2, a1, a2, reads, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.reads, pair.cid
        await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")  # reads go on, n1's row of the run waits
        # (n1's own answer waits for its batch: its frames leave once their writes are durable)
        await a1.send({"type": "chat.send", "request_id": "started", "conversation_id": cid, "text": "/slow 10"})
        started = await a2.wait_frame(lambda f: f["type"] == "message.start" and f.get("conversation_id") == cid
                                      and f.get("run_id") is not None, 15)  # fmt: skip
        run_id = started["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("message_id") == started["message_id"], 15)
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("n1", "running")  # the claim committed
        n1.kill9()
        await pair.release()
        cur = await reads.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() is None  # the store never had the run

        # its claim running, no run in the store: the start found in the stream; under load n2 may take the claim
        # over before n1 is back, and closes the run onto the row it reads back (test_start_lost_taken_over.py)
        n1.start()
        end = await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 20)
        assert end["status"] == "failed", end

        await until_stored(reads, run_id, "failed", "the run's close stored")
        cur = await reads.execute("SELECT state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("done",)
        after = (await a2.chat(cid, "after the restart"))["run_id"]  # the conversation is free on every node
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        a1 = await reconnected(pair)
        on_n1, on_n2 = (await a1.open(cid))["messages"], (await a2.open(cid))["messages"]
        assert [m["message_id"] for m in on_n1] == [m["message_id"] for m in on_n2], (on_n1, on_n2)
        assert started["message_id"] in [m["message_id"] for m in on_n2]  # the interrupted run's message, kept


async def test_a_run_that_ended_before_its_store_had_it_keeps_its_message_after_its_node_restarts(serve_nodes, engines):
    """The same loss for a short run that ended before the kill (chaos seed 2003: ``transcript_contradicts_client``,
    a ``run.completed`` every phone got, its message in no node's transcript): the end its previous life published
    is read back from the stream and written once the start is (``Cluster.read_ends``), not closed again."""
    async with pheby_pair(serve_nodes, engines, "ended, never stored") as pair:
        n1, reads = pair.n1, pair.reads
        run_id, done = await ended_unstored(pair, "ended")  # the run, its message and its end not in the store
        cur = await reads.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() is None

        n1.start()  # or n2 takes n1's claim over first (a loaded machine) and writes the same (started.py)
        await until_stored(reads, run_id, "completed",
                           "the run and its end written by n1's next start or n2's take-over")  # fmt: skip
        await after_restart(pair, run_id, done[0]["text"])
