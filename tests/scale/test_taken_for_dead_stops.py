"""A node taken for dead whose run a survivor closed stops that run once it resumes (issue 41, fenced run
ownership; bridge_core/scale/fence.py, docs/scale-out.md "Several live nodes").

n1 streams a run and is stopped (SIGSTOP) longer than a node's liveness (NODE_TTL + SWEEP_EVERY): n2 takes it
for dead and closes its run as interrupted, one failed end and the notice on every client. Resumed, n1 folds that
end: before, its agent went on streaming the run (deltas after the end, a second completion, a second
run.finished: event_twice, turn_out_of_order, nodes_disagree, as in chaos seed 2300). Now n1 cancels its agent's
run and sends nothing more of it.

Over real sockets to two `agent-bridge serve` processes on a private PostgreSQL and Redis."""

from __future__ import annotations

import os
import signal

import psycopg

from tests.scale.killed import pheby_app
from tests.waiting import until


def _frames(app, run_id: str) -> list:
    return [f for f in app.frames if f.get("run_id") == run_id or f.get("message_id") == f"draft-{run_id}"]


def _ended(app, run_id: str) -> bool:
    return any(f["type"] == "run.finished" for f in _frames(app, run_id))


async def _claimed(reads, run_id: str) -> bool:
    cur = await reads.execute("SELECT state FROM cluster_runs WHERE run_id=%s", (run_id,))
    return await cur.fetchone() == ("running",)


def _after_end(app, run_id: str) -> list:
    """The run's frames on ``app``: its ends, and every delta or completion after the first end."""
    frames = _frames(app, run_id)
    first = next(i for i, f in enumerate(frames) if f["type"] == "run.finished")
    return [f["status"] for f in frames if f["type"] == "run.finished"], [
        f["type"] for f in frames[first + 1:] if f["type"] in ("message.delta", "message.completed", "run.started")]


async def test_a_node_taken_for_dead_stops_the_run_its_survivor_closed(serve_nodes, engines):
    n1, n2 = serve_nodes("n1", "n2", adapters="pheby")
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    a1, a2 = pheby_app(n1), pheby_app(n2)
    try:
        await a1.connect()
        await a2.connect()
        cid = await a1.create("taken for dead")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        run_id = (await a1.chat(cid, "/slow 90"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("message_id") == f"draft-{run_id}", 15)
        await until(lambda: _claimed(reads, run_id), 15, "the run's claim committed")

        os.kill(n1.proc.pid, signal.SIGSTOP)  # longer than its liveness: n2 takes it for dead
        try:
            await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 40)
        finally:
            os.kill(n1.proc.pid, signal.SIGCONT)
        await a1.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)

        # a later run in the conversation, ended on both: whatever n1 sent of the old one came before it
        second = (await a1.chat(cid, "hello again"))["run_id"]
        for app in (a1, a2):
            await app.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == second, 30)

        for app in (a1, a2):
            ends, late = _after_end(app, run_id)
            assert ends == ["failed"], ends  # the survivor's close, once
            assert late == [], late  # nothing of the run after its end
        snap1, snap2 = await a1.open(cid), await a2.open(cid)
        assert snap1["messages"] == snap2["messages"], (snap1["messages"], snap2["messages"])
        assert [m for m in snap1["messages"] if m["message_id"] == f"n-{run_id}"], snap1["messages"]  # the notice
        # n1's agent run cancelled (not left streaming into nothing until it ends by itself)
        await until(lambda: f"run {run_id}: its agent's run stopped here" in n1.stderr(), 15, "n1 stopped its run")
    finally:
        await a1.close()
        await a2.close()
        await reads.close()
