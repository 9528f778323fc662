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
