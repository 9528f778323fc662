"""A PostgreSQL restart under a running store: the writes queued meanwhile are retried, not refused.

The writer's connection breaks when the server restarts; the next transaction finds out at its
``BEGIN``, before anything of it was sent, so it can run again on a fresh connection
(bridge_core/scale/pgstore.py ``RIDE_OUT``). Refused, it was lost while the frames waiting for it
(the durability barrier) left: a Loomi phone was then given events twice under new seqs after
reconnecting (the nemesis seed 4105, tests/nemesis/test_nemesis.py). Both tests fail on the code
before the retry (the first write after the restart raises ``unavailable``).
"""

from __future__ import annotations

import asyncio
import struct
import threading
import urllib.parse

import pytest

from bridge_core.model.errors import Unavailable
from bridge_core.scale.pgstore import PostgresStore
from tests.scale.test_store_commit_fate import _commit

TABLE = "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)"


@pytest.fixture
def store(postgres):
    s = PostgresStore(postgres.new_database()).open()
    s.migrate("ride_out_test", [TABLE])
    yield s
    s.close()


async def test_the_first_write_after_a_restart_commits(store, postgres):
    await store.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(?, ?)", (1, "before")))
    await asyncio.to_thread(postgres.restart)  # the writer's connection is now broken, unknown to it
    await store.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(?, ?)", (2, "after")))
    assert store.query("SELECT k, v FROM t ORDER BY k") == [(1, "before"), (2, "after")]
    assert store.failed is None or not isinstance(store.failed, Unavailable)


async def test_writes_racing_a_restart_all_commit_before_the_barrier_lets_go(store, postgres):
    """Fire-and-forget writes (as a front end's rows behind the durability barrier) queued before,
    during and after the restart: once ``synced`` returns, every one of them is in the database."""
    restart = asyncio.ensure_future(asyncio.to_thread(postgres.restart))
    k = 0
    while not restart.done():
        k += 1
        store.execute_later("INSERT INTO t(k, v) VALUES(?, ?)", (k, f"row {k}"))
        await asyncio.sleep(0.01)  # the pace of the writes, not a wait for something
    await restart
    for _ in range(3):
        k += 1
        store.execute_later("INSERT INTO t(k, v) VALUES(?, ?)", (k, f"row {k}"))
    await store.synced()
    assert [r[0] for r in store.query("SELECT k FROM t ORDER BY k")] == list(range(1, k + 1))


async def test_a_write_that_lost_a_deadlock_is_run_again(postgres):
    """Two nodes' writes locking the same two rows in opposite orders (as two nodes' fencing guards may):
    PostgreSQL undoes one of them; it is run again, so both commit, each once."""
    url = postgres.new_database()
    one, two = PostgresStore(url).open(), PostgresStore(url).open()
    try:
        one.migrate("ride_out_test", [TABLE])
        await one.write(lambda c: c.executemany("INSERT INTO t(k, v) VALUES(?, ?)", [(1, ""), (2, "")]))
        first = {one: threading.Event(), two: threading.Event()}

        def write(store, a: int, b: int, other):
            def fn(c):
                c.execute("UPDATE t SET v=v || ? WHERE k=?", (f"{a}", a))
                first[store].set()
                first[other].wait(5)  # both hold their first row: the second update deadlocks one of them
                c.execute("UPDATE t SET v=v || ? WHERE k=?", (f"{a}", b))
            return fn

        await asyncio.gather(one.write(write(one, 1, 2, two)), two.write(write(two, 2, 1, one)))
        (v1,), (v2,) = one.query("SELECT v FROM t ORDER BY k")
        assert sorted(v1) == sorted(v2) == ["1", "2"], (v1, v2)  # each write applied once
    finally:
        one.close()
        two.close()


# --- a COMMIT whose answer is lost ---------------------------------------------------------------------
# The server restarting while a COMMIT is under way: the writer cannot tell whether it committed. It asks
# PostgreSQL (``txid_status`` of the transaction's id, taken at its BEGIN) on a fresh connection: undone, the
# batch runs again (it was lost before: the racing test above failed now and then under load); committed,
# it counts as done and runs no second time.

ONCE = """
CREATE SEQUENCE boom;
CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('boom') = 1 THEN PERFORM pg_terminate_backend(pg_backend_pid()); END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER boom AFTER INSERT ON t DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION boom();
"""


async def test_a_transaction_undone_at_its_commit_runs_again(store):
    """Its backend dies inside COMMIT (a deferred trigger ends it, once): nothing of it committed, so the
    write runs again on a fresh connection and commits once; before, it was refused (``unavailable``)."""
    await store.write(lambda c: c.raw.execute(ONCE))
    await store.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(?, ?)", (1, "once")))
    assert store.query("SELECT k, v FROM t") == [(1, "once")]
    assert store.query("SELECT last_value FROM boom") == [(2,)]  # the trigger ran twice: two attempts


class _LoseCommitAnswer:
    """A TCP proxy in front of PostgreSQL that, once armed, passes one COMMIT on and drops the connection as
    the server answers it: the transaction committed, and the client never heard so."""

    def __init__(self, port: int):
        self.port, self.armed, self.dropped = port, False, 0

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, cr, cw):
        sr, sw = await asyncio.open_connection("127.0.0.1", self.port)
        commit = asyncio.Event()
        up = asyncio.ensure_future(self._up(cr, sw, commit))
        try:
            while not (commit.is_set() and self.armed):
                data = await sr.read(65536)
                if not data:
                    break
                if commit.is_set():  # the COMMIT's answer: committed; the client is cut off without it
                    self.armed, self.dropped = False, self.dropped + 1
                    break
                cw.write(data)
                await cw.drain()
        finally:
            up.cancel()
            cw.transport.abort()
            sw.close()

    async def _up(self, cr, sw, commit):
        """Client to server, message by message (after the startup packet), noting an armed COMMIT."""
        (n,) = struct.unpack("!i", await cr.readexactly(4))
        sw.write(struct.pack("!i", n) + await cr.readexactly(n - 4))
        prepared: set = set()
        while True:
            head = await cr.readexactly(5)
            body = await cr.readexactly(struct.unpack("!i", head[1:])[0] - 4)
            if _commit(head[:1], body, prepared) and self.armed:
                commit.set()
            sw.write(head + body)
            await sw.drain()


async def test_a_commit_whose_answer_was_lost_counts_once(postgres):
    """The server committed; the connection died before its answer: the write succeeds, applied once (run
    again it would have hit the primary key, or applied twice), and the store goes on writing."""
    url = postgres.new_database()
    parts = urllib.parse.urlsplit(url)
    proxy = _LoseCommitAnswer(parts.port)
    port = await proxy.start()
    store = PostgresStore(parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}", query="sslmode=disable").geturl())
    await asyncio.to_thread(store.open)  # the store's calls that block go to threads: the proxy runs on this loop
    try:
        await asyncio.to_thread(store.migrate, "ride_out_test", [TABLE])
        proxy.armed = True
        await store.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(?, ?)", (1, "committed")))
        assert proxy.dropped == 1
        await store.write(lambda c: c.execute("INSERT INTO t(k, v) VALUES(?, ?)", (2, "after")))
        rows = await asyncio.to_thread(store.query, "SELECT k, v FROM t ORDER BY k")
        assert rows == [(1, "committed"), (2, "after")]
    finally:
        await asyncio.to_thread(store.close)
        proxy.server.close()
