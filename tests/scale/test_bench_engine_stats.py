"""``python -m bench.scale --engine-stats``: what PostgreSQL and Redis did for one configuration, from their own
counters (docs/performance.md, "The three-node residual"), printed per table and per command. On a private
PostgreSQL and Redis."""

from __future__ import annotations

import psycopg
import redis

from bench.scale import _reset_redis_stats, engine_stats
from tests.waiting import until


async def test_each_tables_work_and_each_redis_command_is_counted(engines, capsys):
    store, bus = engines
    with psycopg.connect(store, autocommit=True) as c:
        c.execute("CREATE TABLE marks(k TEXT PRIMARY KEY, v INTEGER)")
        for k in "abc":
            c.execute("INSERT INTO marks(k, v) VALUES(%s, 1)", (k,))
        c.execute("UPDATE marks SET v = 2 WHERE k = 'b'")
        c.execute("DELETE FROM marks WHERE k = 'c'")
    r = redis.Redis.from_url(bus)
    r.xadd("s", {"f": "x"})
    _reset_redis_stats(bus)  # what came before the configuration is not its own
    for _ in range(2):
        r.xadd("s", {"f": "y"})
    r.close()

    async def flushed() -> bool:  # (a backend's counters reach the shared ones at its exit)
        with psycopg.connect(store, autocommit=True) as c:
            row = c.execute("SELECT n_tup_ins, n_tup_upd, n_tup_del FROM pg_stat_user_tables "
                            "WHERE relname = 'marks'").fetchone()  # fmt: skip
        return row == (3, 1, 1)

    await until(flushed, 15, "the table's counters")
    engine_stats("2 nodes", store, bus, 100)
    out = capsys.readouterr().out
    assert "engine counters, 2 nodes (100 frames)" in out
    line = next(x for x in out.splitlines() if x.split()[:1] == ["marks"])
    assert line.split()[3:] == ["3", "1", "1"], line  # inserted, updated, deleted
    assert "Redis: xadd 2" in out, out
