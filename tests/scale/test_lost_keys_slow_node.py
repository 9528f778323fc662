"""A node stopped a few seconds just after Redis lost its keys is not taken for dead (chaos seed 2300 at cb56f3f,
``event_twice``, ``turn_out_of_order``, ``nodes_disagree``, docs/scale-out.md "The cluster-wide number").

What the history showed: a Redis restart dropped every node's liveness key; n1, streaming a run, was stopped
(SIGSTOP) right after it, 5 s in all, so it could not set its key again. n2 saw the loss (its own key gone),
took nobody for dead for 3.5 s (a beat and a sweep), then found n1's key still missing and closed n1's run
as interrupted ("node n1 is gone: closing its run"): a failed end and the interrupt notice on every client.
n1, resumed 1 s later, went on streaming the same run: deltas after its end, a second complete, the run
finished twice, the nodes' stores and views apart. A key Redis kept would have lived 10 s (NODE_TTL): now,
after a loss, nobody is taken for dead for that long (bridge_core/scale/cluster.py ``LOST_GRACE``).

Over real sockets to two `agent-bridge serve` processes on a private PostgreSQL and Redis; the loss is a
FLUSHALL, the stop a SIGSTOP of the run's node for 5 s after the survivor set its key again (longer than the
old grace, shorter than a key's life)."""

from __future__ import annotations

import os
import signal

import psycopg
import redis.asyncio as aioredis

from tests.scale.killed import pheby_app, run_row
from tests.waiting import until

BEATS = 2  # the survivor's beats the run's node stays stopped for once it saw the loss: 2 x 2.5 s, past the old 3.5 s grace


async def _beaten(r, key: str, beats: int) -> None:
    """Until ``key``'s node set its liveness key again ``beats`` times (its time to live going back up)."""
    seen, last = 0, None

    async def beat() -> bool:
        nonlocal seen, last
        ttl = await r.pttl(key)
        if last is not None and ttl > last:
            seen += 1
        last = ttl
        return seen >= beats

    await until(beat, 15, f"{beats} beats of {key}")


def _ends(app, run_id: str) -> list:
    return [f["status"] for f in app.frames if f["type"] == "run.finished" and f.get("run_id") == run_id]


async def _claimed(reads, run_id: str) -> bool:
    cur = await reads.execute("SELECT state FROM cluster_runs WHERE run_id=%s", (run_id,))
    return await cur.fetchone() == ("running",)


async def test_a_node_stopped_after_redis_lost_its_keys_keeps_its_run(serve_nodes, engines):
    n1, n2 = serve_nodes("n1", "n2", adapters="pheby")
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    r = aioredis.Redis.from_url(engines[1])
    a1, a2 = pheby_app(n1), pheby_app(n2)
    try:
        await a1.connect()
        await a2.connect()
        cid = await a1.create("streaming through a loss")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        run_id = (await a1.chat(cid, "/slow 12"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("message_id") == f"draft-{run_id}", 15)
        await until(lambda: _claimed(reads, run_id), 15, "the run's claim committed")

        await r.flushall()  # every liveness key gone
        os.kill(n1.proc.pid, signal.SIGSTOP)  # the run's node cannot set its key again
        try:
            await until(lambda: r.exists("agent-bridge:node:n2"), 15, "n2 saw the loss and set its key again")
            await _beaten(r, "agent-bridge:node:n2", BEATS)  # the stop's length: the survivor's sweeps past the old grace
        finally:
            os.kill(n1.proc.pid, signal.SIGCONT)

        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)
        assert _ends(a2, run_id) == ["completed"], _ends(a2, run_id)  # not closed as interrupted by n2
        await a1.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 15)
        assert _ends(a1, run_id) == ["completed"], _ends(a1, run_id)
        row = await run_row(reads, run_id)
        assert row is not None and row[0] == "completed", row
        snap = await a2.open(cid)
        ids = [m["message_id"] for m in snap["messages"]]
        assert f"n-{run_id}" not in ids, ids  # no interrupt notice
        texts = [m["text"] for m in snap["messages"] if m["message_id"] == f"draft-{run_id}"]
        assert len(texts) == 1 and texts == [m["text"] for m in (await a1.open(cid))["messages"]
                                             if m["message_id"] == f"draft-{run_id}"], snap["messages"]
    finally:
        await a1.close()
        await a2.close()
        await r.aclose()
        await reads.close()
