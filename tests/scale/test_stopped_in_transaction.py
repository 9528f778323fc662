"""A node stopped inside a transaction holds no other node's writer for long (bridge_core/scale/pgstore.py
``IDLE_IN_TRANSACTION``, ``end_sessions_of``; docs/scale-out.md "A node stopped inside a transaction").

A SIGSTOP (or a frozen VM) can land between two statements of a node's batch: its transaction stays open with
its row locks, and every node that writes one of those rows waited until it resumed. In the two-node test of a
node taken for dead (tests/scale/test_taken_for_dead_stops.py) the survivor's writer waited on the stopped
node's draft save (its conversation's row), so it closed the run only once the stopped node was let go: 1 run in
23 under load. Now the server ends such a session after ``IDLE_IN_TRANSACTION`` (its timer does not run inside or
after psycopg's ``executemany`` pipeline: the draft save's last statement, where the stops had landed), and a
survivor taking the node for dead ends its sessions first. The stopped node's batch, undone, runs again when it
resumes, unless it may have been taken for dead meanwhile (then a survivor closed its runs: refused, as a batch
the server never got back from).

Two stores on one private PostgreSQL, as two nodes: A's writer stops inside its transaction (its write waits on a
threading event after its UPDATE), B writes the same row."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bridge_core.model.errors import Unavailable
from bridge_core.scale import pgstore
from bridge_core.scale.pgstore import PostgresStore
from tests.waiting import until


def _session_of(store: PostgresStore, pid: int) -> str | None:
    row = store.query_one("SELECT state FROM pg_stat_activity WHERE pid=?", (pid,))
    return row[0] if row else None


def _stores(postgres) -> tuple[PostgresStore, PostgresStore]:
    url = postgres.new_database()
    a, b = PostgresStore(url), PostgresStore(url)
    a.node_id, b.node_id = "a", "b"
    return a.open(), b.open()


async def _stopped(a: PostgresStore, b: PostgresStore, resume: threading.Event, pipeline: bool):
    """A's write, stopped after its UPDATE of row 1 (as a draft save's last statement when ``pipeline``) until
    ``resume`` is set (the test's ``finally`` sets it, so A's writer never outlives a failed test)."""
    a.migrate("stopped_test", ["CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)"])
    await a.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(1, 'before')"))
    runs, pids = [], []

    def stopped_inside(c):
        runs.append(1)
        pids.append(c.raw.info.backend_pid)
        if pipeline:
            c.executemany("UPDATE t SET v=? WHERE k=?", [("a", 1)])
        else:
            c.execute("UPDATE t SET v='a' WHERE k=1")
        resume.wait()
        c.execute("INSERT INTO t(k, v) VALUES(2, 'a')")

    written = asyncio.ensure_future(a.write(stopped_inside))
    await until(lambda: pids and _session_of(b, pids[0]) in ("idle in transaction", "active"),
                what="A inside its transaction")
    return written, runs, pids


async def _resumed(a, b, written, resume, runs, alive):
    a.alive = lambda: alive  # resumed: its liveness key lived all along, or may have expired
    resume.set()
    if alive:  # nothing of its batch committed and nobody took it for dead: run again, in full
        await written
        assert len(runs) == 2 and b.query("SELECT k, v FROM t ORDER BY k") == [(1, "a"), (2, "a")]
    else:  # a survivor may have closed its runs since: not run again over what it wrote
        with pytest.raises(Unavailable):
            await written
        assert len(runs) == 1 and b.query("SELECT k, v FROM t ORDER BY k") == [(1, "b")]
    await a.write(lambda c: c.execute("UPDATE t SET v='after' WHERE k=1"))  # A writes on, on a new session
    assert b.query_one("SELECT v FROM t WHERE k=1") == ("after",)


@pytest.mark.parametrize("alive", [True, False], ids=["resumed-in-time", "maybe-taken-for-dead"])
async def test_the_server_ends_a_session_stopped_between_two_statements(postgres, monkeypatch, alive):
    monkeypatch.setattr(pgstore, "IDLE_IN_TRANSACTION", 1.0)  # the session ended after 1 s idle (5 s in serve)
    a, b = _stores(postgres)
    resume = threading.Event()
    try:
        written, runs, pids = await _stopped(a, b, resume, pipeline=False)
        # B writes the row A holds: it waits for A's session to end, not for A to resume
        await asyncio.wait_for(b.write(lambda c: c.execute("UPDATE t SET v='b' WHERE k=1")), 30)
        assert b.query_one("SELECT v FROM t WHERE k=1") == ("b",)
        await until(lambda: _session_of(b, pids[0]) is None, what="A's session gone")  # undone: B got the lock
        assert not written.done()  # A is still stopped
        await _resumed(a, b, written, resume, runs, alive)
        assert a._wconn.raw.execute("SHOW idle_in_transaction_session_timeout").fetchone() == ("1s",)
    finally:
        resume.set()
        a.close()
        b.close()


async def test_a_survivor_ends_the_sessions_of_a_node_it_takes_for_dead(postgres, monkeypatch):
    """After psycopg's pipeline the server's idle timer is off: the survivor ends the stopped node's sessions
    (``Cluster._take_over``), by their name, and only that node's."""
    monkeypatch.setattr(pgstore, "IDLE_IN_TRANSACTION", 1.0)
    a, b = _stores(postgres)
    resume = threading.Event()
    try:
        written, runs, pids = await _stopped(a, b, resume, pipeline=True)
        blocked = asyncio.ensure_future(b.write(lambda c: c.execute("UPDATE t SET v='b' WHERE k=1")))
        await until(lambda: b.query_one("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type='Lock'") == (1,),
                    what="B waiting on A's lock")
        assert await asyncio.to_thread(b.end_sessions_of, "a") == 2  # A's writer and reader
        await asyncio.wait_for(blocked, 30)
        assert b.query_one("SELECT v FROM t WHERE k=1") == ("b",)
        assert b.query_one("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'agent-bridge node b'") == (2,)
        await _resumed(a, b, written, resume, runs, alive=False)
    finally:
        resume.set()
        a.close()
        b.close()
