"""The store contract: what every component relies on, the same on SQLite and PostgreSQL.

Components write SQL once in the shared dialect (bridge_core/scale/sqldialect.py); these tests
hold both engines to the same answers for it: migrations, batched durable writes, one bad
write not sinking its batch, INSERT OR IGNORE / OR REPLACE, rowid order, value types.
"""

from __future__ import annotations

import threading

import pytest

from bridge_core.model.errors import Unavailable
from bridge_core.bridge.store import CORE_MIGRATIONS, BaseStore


def test_migrations_are_ordered_recorded_and_applied_once(open_store):
    s = open_store()
    assert isinstance(s, BaseStore)
    assert s.migrate("x", ["CREATE TABLE a(i INTEGER)", "ALTER TABLE a ADD COLUMN j TEXT"]) == 2
    assert s.migrate("x", ["CREATE TABLE a(i INTEGER)", "ALTER TABLE a ADD COLUMN j TEXT", "CREATE TABLE b(k TEXT)"]) == 3
    assert s.query("SELECT version FROM schema_version WHERE component=?", ("x",)) == [(3,)]
    assert s.query("SELECT version FROM schema_version WHERE component=?", ("core",)) == [(len(CORE_MIGRATIONS),)]


def test_every_component_migrates_on_both_engines(open_store):
    from loomi_adapter.devices import MIGRATIONS as LOOMI
    from lvmh_adapter.persistence import MIGRATIONS as LVMH

    s = open_store()
    assert s.migrate("loomi", LOOMI) == len(LOOMI)
    assert s.migrate("lvmh", LVMH) == len(LVMH)
    s.close()
    again = open_store()  # a restart (or another node): nothing left to apply
    assert again.migrate("loomi", LOOMI) == len(LOOMI)
    assert again.query("SELECT component, version FROM schema_version ORDER BY component") == [
        ("core", len(CORE_MIGRATIONS)), ("loomi", len(LOOMI)), ("lvmh", len(LVMH))]  # fmt: skip


def test_concurrent_starts_migrate_once(open_store, engine, tmp_path):
    """Nodes starting together: every one opens, the schema is created once.

    On SQLite the race is in creating the file: switching a new file to WAL answers "database
    is locked" at once (no busy wait) when another process opens it too, about one start in
    thirty here; so a fresh file is raced many times."""
    from loomi_adapter.devices import MIGRATIONS as LOOMI

    rounds = 150 if engine == "sqlite" else 1
    for n in range(rounds):
        data = tmp_path / f"data{n}"  # SQLite: processes on one data dir; PostgreSQL: nodes on one database
        errors, stores = [], []

        def start():
            try:
                s = open_store(data)
                s.migrate("loomi", LOOMI)
                stores.append(s)
            except Exception as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=start) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert errors == [], f"round {n}"
        assert len(stores) == 4
        assert stores[0].query("SELECT version FROM schema_version WHERE component='loomi'") == [(len(LOOMI),)]
        for s in stores:
            s.close()


async def test_batched_writes_are_durable_on_return(open_store):
    s = open_store()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])
    futs = [s.submit(lambda c, i=i: c.execute("INSERT INTO t VALUES(?)", (i,))) for i in range(2000)]
    await s.write(lambda c: None)
    assert all(f.done() and f.exception() is None for f in futs)
    assert s.commits < 2000  # batched
    other = open_store()  # an independent connection sees them: committed, not just queued
    assert other.query("SELECT COUNT(*) FROM t") == [(2000,)]


async def test_one_failing_write_does_not_sink_its_batch(open_store):
    s = open_store()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])
    ok1 = s.submit(lambda c: c.execute("INSERT INTO t VALUES(1)"))
    bad = s.submit(lambda c: c.execute("INSERT INTO t VALUES(1)"))  # duplicate key
    ok2 = s.submit(lambda c: c.execute("INSERT INTO t VALUES(2)"))
    await s.aflush()
    assert ok1.exception() is None and ok2.exception() is None
    assert isinstance(bad.exception(), s.errors)
    assert s.query("SELECT i FROM t ORDER BY i") == [(1,), (2,)]


async def test_a_run_of_queued_statements_with_a_bad_row(open_store):
    """execute_later's equal statements go as one executemany; a bad row falls back to one by one."""
    s = open_store()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY, v TEXT NOT NULL)"])
    for i in range(5):
        s.execute_later("INSERT INTO t(i, v) VALUES(?, ?)", (i, None if i == 3 else f"v{i}"))
    await s.aflush()
    assert s.query("SELECT i, v FROM t ORDER BY i") == [(0, "v0"), (1, "v1"), (2, "v2"), (4, "v4")]


async def test_insert_or_ignore_and_or_replace(open_store):
    s = open_store()
    s.migrate("t", ["CREATE TABLE kv(k TEXT NOT NULL, n INTEGER NOT NULL, v TEXT, PRIMARY KEY(k, n)) WITHOUT ROWID"])
    await s.write(lambda c: c.execute("INSERT OR IGNORE INTO kv(k, n, v) VALUES(?,?,?)", ("a", 1, "first")))
    await s.write(lambda c: c.execute("INSERT OR IGNORE INTO kv(k, n, v) VALUES(?,?,?)", ("a", 1, "second")))
    assert s.query("SELECT v FROM kv WHERE k=? AND n=?", ("a", 1)) == [("first",)]
    await s.write(lambda c: c.executemany("INSERT OR REPLACE INTO kv(k, n, v) VALUES(?,?,?)",
                                          [("a", 1, "third"), ("a", 2, "x")]))  # fmt: skip
    assert s.query("SELECT n, v FROM kv WHERE k=? ORDER BY n", ("a",)) == [(1, "third"), (2, "x")]


async def test_rowid_order_is_insertion_order_and_a_replace_moves_to_the_end(open_store):
    """The transcript loads ``ORDER BY rowid``: a replaced message (a draft saved, then completed)
    goes last on both engines, as SQLite's REPLACE does."""
    s = open_store()
    sql = "INSERT OR REPLACE INTO messages(conversation_id, message_id, role, text, ts) VALUES(?,?,?,?,?)"
    for mid in ("m1", "m2", "m3"):
        await s.write(lambda c, mid=mid: c.execute(sql, ("c", mid, "user", mid, 1.0)))
    await s.write(lambda c: c.execute(sql, ("c", "m1", "assistant", "m1 final", 2.0)))
    assert s.query("SELECT message_id, text FROM messages WHERE conversation_id=? ORDER BY rowid", ("c",)) == [
        ("m2", "m2"), ("m3", "m3"), ("m1", "m1 final")]  # fmt: skip


async def test_value_types_round_trip(open_store):
    s = open_store()
    s.migrate("t", ["CREATE TABLE v(id TEXT PRIMARY KEY, f REAL, i INTEGER, b BLOB, flag INTEGER, t TEXT)"])
    ts = 1767225600.123456
    row = ("r", ts, 2**40, b"\x00\xffbytes", True, "100% ünïcode ?")
    await s.write(lambda c: c.execute("INSERT INTO v(id, f, i, b, flag, t) VALUES(?,?,?,?,?,?)", row))
    (got,) = s.query("SELECT id, f, i, b, flag, t FROM v")
    assert got[:3] == ("r", ts, 2**40)
    assert bytes(got[3]) == b"\x00\xffbytes"
    assert got[4] == 1 and got[5] == "100% ünïcode ?"
    assert s.query("SELECT id FROM v WHERE t LIKE ?", ("100%",)) == [("r",)]
    assert s.query("SELECT id FROM v WHERE flag!=0 AND f > ?", (ts - 1,)) == [("r",)]


async def test_settings_and_probe(open_store):
    s = open_store()
    assert s.get_setting("k") is None
    await s.set_setting("k", "v1")
    await s.set_setting("k", "v2")
    assert s.get_setting("k") == "v2"
    other = open_store()
    assert other.get_setting("k") == "v2"  # what one store handle writes, another one reads
    await s.set_setting("k", None)
    assert s.get_setting("k") is None
    await s.probe()
    assert s.failed is None and s.get_setting("store.probe") is None


async def test_durability_barrier(open_store):
    s = open_store()
    for i in range(50):
        s.execute_later("INSERT OR REPLACE INTO settings(key, value) VALUES(?, ?)", (f"b{i}", "x"))
    target = s.submitted
    await s.synced()
    assert s.processed >= target
    assert s.query("SELECT COUNT(*) FROM settings WHERE key LIKE ?", ("b%",)) == [(50,)]


async def test_closed_store_refuses_writes_and_reads(open_store):
    s = open_store()
    s.close()
    with pytest.raises(Unavailable):
        await s.write(lambda c: None)
    with pytest.raises(Unavailable):
        s.query("SELECT 1")


async def test_scalar_max_and_min(open_store):
    """SQLite's two-argument MAX/MIN (the seq books use them) mean the same on PostgreSQL."""
    s = open_store()
    s.migrate("t", ["CREATE TABLE m(id TEXT PRIMARY KEY, hi INTEGER NOT NULL DEFAULT 0, lo INTEGER)"])
    await s.write(lambda c: c.execute("INSERT INTO m(id, hi, lo) VALUES(?, ?, ?)", ("a", 5, 5)))
    for v in (3, 9, 7):
        await s.write(lambda c, v=v: c.execute(
            "UPDATE m SET hi=MAX(hi, ?), lo=MIN(COALESCE(lo, 0), ?) WHERE id=?", (v, v, "a")))
    assert s.query("SELECT hi, lo, MAX(hi) FROM m WHERE id=? GROUP BY hi, lo", ("a",)) == [(9, 3, 9)]


async def test_numbered_parameters(open_store):
    """SQLite's ``?1`` (a parameter used twice, or out of order) binds the same on both engines."""
    s = open_store()
    s.migrate("t", ["CREATE TABLE p(a INTEGER, b INTEGER)"])
    await s.write(lambda c: c.execute("INSERT INTO p(a, b) VALUES(?2, ?1)", (1, 2)))
    await s.write(lambda c: c.execute("INSERT INTO p(a, b) VALUES(?1, ?1)", (7,)))
    assert s.query("SELECT a, b FROM p WHERE a < ?1 + 10 ORDER BY a", (0,)) == [(2, 1), (7, 7)]
