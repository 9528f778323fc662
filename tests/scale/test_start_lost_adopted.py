"""A run whose start the store and the stream both lost is closed by the node that folded it (chaos seed 3304:
``run_not_closed``, ``decision_not_once``, ``nodes_disagree``; bridge_core/scale/adopt.py, docs/scale-out.md "A
run its node's restart lost").

n1 runs a run that waits for an approval; its batch with the run's row and the user's message waits (the test's
transaction locks ``runs``), n2 folds the start from the stream and shows the approval. n1 is killed, Redis loses
its keys (the stream with them), and n1 is back before anyone takes it for dead. Its restart finds its claim with
no run in the store and no start in the stream: before, it let the claim go silently, and n2 showed the run
running and the approval pending for good, its transcript holding a user's message n1 and the store never had.
Now the claim is marked lost; n2, which folded the run, claims it, writes its start as it folded it and closes it
on every node: the run ends and the approval is resolved on n2's client, and both nodes show one transcript.

Over real sockets to two `agent-bridge serve` processes on a private PostgreSQL and Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from tests.scale.killed import alike, pheby_pair, reconnected, run_row, until_stored
from tests.waiting import until


async def test_a_run_whose_start_the_store_and_the_stream_lost_is_closed_by_the_node_that_folded_it(serve_nodes,
                                                                                                   engines):
    async with pheby_pair(serve_nodes, engines, "started, lost but on n2") as pair:
        n1, a2, reads, cid = pair.n1, pair.a2, pair.reads, pair.cid
        await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")  # n1's batch with the run and the user's message waits
        await pair.a1.send({"type": "chat.send", "request_id": "lost", "conversation_id": cid,
                            "text": "/approve lost-everywhere"})  # fmt: skip
        asked = await a2.wait_frame(lambda f: f["type"] == "approval.request" and f.get("conversation_id") == cid, 15)
        run_id, approval_id = asked["run_id"], asked["approval_id"]
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("n1", "running")  # the claim committed
        n1.kill9()
        await pair.release()
        r = aioredis.Redis.from_url(engines[1])
        try:
            await r.flushall()  # the stream lost: n1's restart finds the start nowhere
        finally:
            await r.aclose()
        assert await run_row(reads, run_id) is None  # the store never had the run
        n1.start()

        end = await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 45)
        assert end["status"] == "failed", end
        resolved = await a2.wait_frame(lambda f: f["type"] == "approval.resolved"
                                       and f.get("approval_id") == approval_id, 15)  # fmt: skip
        assert resolved["accepted"] is False, resolved
        await until_stored(reads, run_id, "failed", "the run written by n2 and closed")
        cur = await reads.execute("SELECT text FROM messages WHERE conversation_id=%s AND role='user'", (cid,))
        assert ("/approve lost-everywhere",) in await cur.fetchall()  # the user's message, written as n2 folded it
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("n2", "done")  # adopted by n2

        a1 = await reconnected(pair)

        await until(lambda: alike(pair), 15, "both nodes show one transcript")
        texts = [m["text"] for m in (await a1.open(cid))["messages"]]
        assert "/approve lost-everywhere" in texts, texts  # n1's transcript read it back at the run's end
        after = (await a1.chat(cid, "after the loss"))["run_id"]  # the conversation is free on every node
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        assert [f["run_id"] for f in a2.conn_frames if f["type"] == "run.finished"].count(run_id) == 1
