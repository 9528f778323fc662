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
import threading

import pytest

from bridge_core.model.errors import Unavailable
from bridge_core.scale.pgstore import PostgresStore

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
