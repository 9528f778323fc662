"""A run's end that only front ends' rows hold is not closed again (chaos seed 2103 at 9143e66, issue 41:
``decision_not_once``, ``event_twice``, docs/performance.md "Chaos").

What the history showed: n3 ended a run (its approval accepted, ``session``) and was stopped then killed -9
before its store had the end; Redis lost its keys meanwhile, so the stream lost the end too, and n2, which had
not delivered it yet, never got it. n2 took n3's run over as a dead node's and closed it as interrupted: a
second end (failed) and the approval denied after it was accepted, on every phone and in the lvmh table. Later
n2's restart closed its own interrupted run, the close reached the stream and n3's phones, its store write never
committed (n2 killed 0.4 s later) and Redis lost its keys again: n2's next start found the run open, nothing in
the stream, and closed it a second time. In both cases another node had rendered the end into its Loomi frames
(``loomi_frames``, committed): the durable record a restart asks (``Bridge.restore_end``) read one node's rows
only (``loomi_events``, empty with several nodes). Now it reads every node's frames (loomi_adapter/journal.py
``stored_run_end``), at a restart and at a survivor's take-over (bridge_core/scale/started.py).

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own
transaction holds the run's row (the owner's batch with its end waits) while the owner is killed, and the
stream deleted (the entries Redis lost; the counter and the nodes' liveness keys stay)."""

from __future__ import annotations

import os
import signal

import psycopg
import pytest
import redis.asyncio as aioredis

from tests.conformance.loomi_client import LoomiApp
from tests.scale.killed import pheby_app, run_row
from tests.scale.phones import loomi_ws, pair_qr
from tests.waiting import until

ADAPTERS = "pheby,loomi"


async def _lose_stream(bus_url: str) -> None:
    """The events stream gone (as when Redis lost its keys), the counter and the liveness keys kept."""
    r = aioredis.Redis.from_url(bus_url)
    try:
        assert await r.delete("agent-bridge:events") == 1
    finally:
        await r.aclose()


async def _framed_end(reads, run_id: str) -> bool:
    """Whether some node's stored Loomi frames hold the run's ``run.completed``."""
    cur = await reads.execute("SELECT body FROM loomi_frames")
    return any(run_id.encode() in bytes(b) and b'"run.completed"' in bytes(b) for (b,) in await cur.fetchall())


def _ends(app, run_id: str) -> list:
    return [f["status"] for f in app.frames if f["type"] == "run.finished" and f.get("run_id") == run_id]


@pytest.fixture
async def watched(engines):
    """A phone (its frames rendered by the node it is paired on) and a reading connection."""
    phone = LoomiApp("Watcher")
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    held: list = []
    try:
        yield phone, reads, held
    finally:
        for h in held:
            await h.close()
        await reads.close()
        await phone.disconnect()


async def _ended_unstored(dsn: str, reads, owner_app, watcher_app, cid: str, held: list) -> str:
    """``/slow 1`` through the owner, its end held from the store (the run's row locked) until the watcher's node
    shows it ended: the run's id. The lock is held until the caller rolls ``held[-1]`` back."""
    run_id = (await owner_app.chat(cid, "/slow 1"))["run_id"]
    await until(lambda: _status(reads, run_id, "running"), 15, "the run's row committed")
    lock = await psycopg.AsyncConnection.connect(dsn)
    held.append(lock)
    await lock.execute("UPDATE runs SET status=status WHERE run_id=%s", (run_id,))  # the owner's end waits
    await watcher_app.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 15)
    await until(lambda: _framed_end(reads, run_id), 15, "another node's Loomi frames hold the run's end")
    return run_id


async def _finished(reads, run_id: str) -> bool:
    row = await run_row(reads, run_id)
    return row is not None and row[1] is not None


async def _status(reads, run_id: str, status: str) -> bool:
    row = await run_row(reads, run_id)
    return row is not None and row[0] == status


async def test_a_restart_ends_its_run_as_another_nodes_frames_hold_it(serve_nodes, engines, watched):
    """The seed's second case: the owner's next start, the stream empty, ends the run as n2 rendered it."""
    phone, reads, held = watched
    n1, n2 = serve_nodes("n1", "n2", adapters=ADAPTERS)
    await phone.pair(dict(await pair_qr(n2), url=loomi_ws(n2)))  # n2 renders (and stores) Loomi frames
    a1, a2 = pheby_app(n1), pheby_app(n2)
    try:
        await a1.connect()
        await a2.connect()
        cid = await a1.create("ended, its end rendered elsewhere")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        run_id = await _ended_unstored(engines[0], reads, a1, a2, cid, held)
        n1.kill9()  # its end in the stream and in n2's frames, not in the store
        await held.pop().rollback()
        assert await _status(reads, run_id, "running")
        await _lose_stream(engines[1])  # the stream lost it too

        n1.start()  # finds the run open, nothing of it in the stream
        await until(lambda: _finished(reads, run_id), 20, "n1's start ended the run in the store")
        row = await run_row(reads, run_id)
        assert row[0] == "completed", row  # as n2's frames hold it, not failed (interrupted)
        after = (await a2.chat(cid, "after the restart"))["run_id"]  # (after whatever n1's start sent)
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        assert _ends(a2, run_id) == ["completed"], _ends(a2, run_id)  # not closed again as interrupted
        cur = await reads.execute("SELECT state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("done",)  # its claim let go: a send through n1 may start a run
        await a1.close()
        a1 = pheby_app(n1)
        await a1.connect()
        shown = [(m["message_id"], m["text"]) for m in (await a1.open(cid))["messages"]]
        assert shown == [(m["message_id"], m["text"]) for m in (await a2.open(cid))["messages"]]
        assert [t for mid, t in shown if mid == f"draft-{run_id}"][0].startswith("w1 "), shown
    finally:
        await a1.close()
        await a2.close()


async def test_a_survivor_ends_a_dead_nodes_run_as_another_nodes_frames_hold_it(serve_nodes, engines, watched):
    """The seed's first case: n2 missed the run's end (stopped while the stream had it, then the stream lost it),
    n1 (its owner, its end not stored) and n3 (which rendered it) die; n2 takes n1's run over and ends it as n3's
    frames hold it, not as interrupted."""
    phone, reads, held = watched
    n1, n2, n3 = serve_nodes("n1", "n2", "n3", adapters=ADAPTERS)
    await phone.pair(dict(await pair_qr(n3), url=loomi_ws(n3)))  # n3 renders (and stores) Loomi frames
    a1, a2, a3 = pheby_app(n1), pheby_app(n2), pheby_app(n3)
    try:
        for app in (a1, a2, a3):
            await app.connect()
        cid = await a1.create("ended, its end rendered by a node that died")
        for app in (a2, a3):
            await app.wait_frame(lambda f: f.get("conversation_id") == cid)
        run_id = (await a1.chat(cid, "/slow 1"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.start" and f.get("run_id") == run_id, 15)
        await until(lambda: _status(reads, run_id, "running"), 15, "the run's row committed")
        lock = await psycopg.AsyncConnection.connect(engines[0])
        held.append(lock)
        await lock.execute("UPDATE runs SET status=status WHERE run_id=%s", (run_id,))  # n1's end waits
        os.kill(n2.proc.pid, signal.SIGSTOP)  # n2 delivers nothing more for now
        try:
            await a3.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 15)
            await until(lambda: _framed_end(reads, run_id), 15, "n3's Loomi frames hold the run's end")
            n1.kill9()
            n3.kill9()
            await held.pop().rollback()
            await _lose_stream(engines[1])  # what n2 had not delivered is gone
        finally:
            os.kill(n2.proc.pid, signal.SIGCONT)
        assert await _status(reads, run_id, "running")

        await until(lambda: _finished(reads, run_id), 40, "n2 took n1's run over and ended it")
        row = await run_row(reads, run_id)
        assert row[0] == "completed", row  # as n3's frames hold it, not failed (interrupted)
        assert "failed" not in _ends(a2, run_id), _ends(a2, run_id)
        snap = await a2.open(cid)
        assert snap["run"] is None, snap["run"]
        texts = [m["text"] for m in snap["messages"] if m["message_id"] == f"draft-{run_id}"]
        assert len(texts) == 1 and texts[0].startswith("w1 "), snap["messages"]
    finally:
        for app in (a1, a2, a3):
            await app.close()
