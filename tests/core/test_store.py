"""Store: migrations in order, batched durable writes, reopen."""

from __future__ import annotations

import sqlite3

import pytest

from bridge_core.model.errors import Unavailable
from bridge_core.bridge.sqlite import Store
from tests.waiting import until


def test_migrations_are_ordered_and_recorded(tmp_path):
    s = Store(str(tmp_path / "b.db")).open()
    assert s.migrate("x", ["CREATE TABLE a(i INTEGER)", "ALTER TABLE a ADD COLUMN j TEXT"]) == 2
    # re-running applies nothing new; a new migration applies only itself
    assert s.migrate("x", ["CREATE TABLE a(i INTEGER)", "ALTER TABLE a ADD COLUMN j TEXT", "CREATE TABLE b(k)"]) == 3
    assert s.query("SELECT version FROM schema_version WHERE component='x'") == [(3,)]
    assert s.query("PRAGMA journal_mode") == [("wal",)]
    s.close()


async def test_batched_writes_are_durable_on_return(tmp_path):
    path = str(tmp_path / "b.db")
    s = Store(path).open()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])
    futs = [s.submit(lambda c, i=i: c.execute("INSERT INTO t VALUES(?)", (i,))) for i in range(5000)]
    await s.write(lambda c: None)
    assert all(f.done() for f in futs)
    assert s.commits < 5000  # batched: far fewer commits than writes
    # visible to an independent connection (committed, not just queued)
    other = sqlite3.connect(path)
    assert other.execute("SELECT COUNT(*) FROM t").fetchone() == (5000,)
    other.close()
    s.close()


async def test_one_failing_write_does_not_sink_its_batch(tmp_path):
    s = Store(str(tmp_path / "b.db")).open()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])
    ok1 = s.submit(lambda c: c.execute("INSERT INTO t VALUES(1)"))
    bad = s.submit(lambda c: c.execute("INSERT INTO t VALUES(1)"))  # duplicate key
    ok2 = s.submit(lambda c: c.execute("INSERT INTO t VALUES(2)"))
    await s.aflush()
    assert ok1.exception() is None and ok2.exception() is None
    assert isinstance(bad.exception(), sqlite3.IntegrityError)
    assert s.query("SELECT i FROM t ORDER BY i") == [(1,), (2,)]
    s.close()


async def test_closed_store_refuses_writes(tmp_path):
    s = Store(str(tmp_path / "b.db")).open()
    s.close()
    with pytest.raises(Unavailable):
        await s.write(lambda c: None)


def test_write_later_counts_for_the_barrier_and_its_failures_are_logged_by_the_writer(tmp_path, caplog):
    """A fire-and-forget write has no future (nobody awaits it): it still takes the next ticket when it is
    a barrier write, ``synced`` waits for it, and a failing one is logged with its error, its batch
    committing the rest."""
    s = Store(str(tmp_path / "b.db")).open()
    try:
        s.migrate("t", ["CREATE TABLE t(k INTEGER PRIMARY KEY)"])
        gate = __import__("threading").Event()
        s.submit(lambda c: gate.wait(5))  # hold the writer: the writes below share one batch
        before = s.ticket
        s.execute_later("INSERT INTO t(k) VALUES(?)", (1,))
        assert s.ticket == before + 1 == s.submitted
        s.execute_later("INSERT INTO t(k) VALUES(?)", (1,))  # a duplicate key
        s.write_later(lambda c: c.execute("INSERT INTO t(k) VALUES(2)"), barrier=False)
        assert s.ticket == before + 2 and s.submitted == before + 3  # barrier=False: frames do not wait for it
        gate.set()
        s.flush()
        assert s.processed >= before + 3
        assert s.query("SELECT k FROM t ORDER BY k") == [(1,), (2,)]
        failures = [r for r in caplog.records if r.getMessage().startswith("store write failed")]
        assert len(failures) == 1 and "UNIQUE" in failures[0].getMessage(), [r.getMessage() for r in failures]
    finally:
        s.close()


def test_write_later_on_a_closed_store_is_logged_not_queued(tmp_path, caplog):
    s = Store(str(tmp_path / "b.db")).open()
    s.close()
    submitted = s.submitted
    s.execute_later("SELECT 1")
    assert s.submitted == submitted
    assert any("store write failed" in r.getMessage() and "closed" in r.getMessage() for r in caplog.records)


async def test_settings(tmp_path):
    s = Store(str(tmp_path / "b.db")).open()
    await s.set_setting("k", "v")
    assert s.get_setting("k") == "v"
    await s.set_setting("k", None)
    assert s.get_setting("k") is None
    s.close()


async def test_disk_full_refuses_sends_clearly_and_recovers(tmp_path):
    """A write SQLite cannot make (here: max_page_count, as a full disk) makes the next send fail with
    ``unavailable`` instead of running a turn nothing keeps; once writes work again, sends work."""
    from bridge_core.model import commands as cmd
    from bridge_core.bridge.demo import DemoAgent
    from bridge_core.bridge.bridge import Bridge
    from bridge_core.model.errors import Unavailable

    b = Bridge(str(tmp_path / "d"), DemoAgent())
    await b.start()
    origin = cmd.Origin(surface="pheby")
    try:
        res = await b.execute(cmd.SendMessage(text="before"), origin)
        await until(lambda: b.conversation(res.conversation_id).run is None, what="the first turn's end")
        await b.store.aflush()
        pages = b.store.query("PRAGMA page_count")[0][0]
        await b.store.write(lambda c: c.execute(f"PRAGMA max_page_count={pages}"))
        big = "x" * 60_000
        with pytest.raises(Unavailable):
            for _ in range(20):  # the first turns may be accepted before a commit has failed
                sent = await b.execute(cmd.SendMessage(text=big, conversation_id=res.conversation_id), origin)
                await until(lambda: b.conversation(sent.conversation_id).run is None, what="the turn's end")
                await b.store.aflush()
        assert b.store.failed is not None
        await b.store.write(lambda c: c.execute("PRAGMA max_page_count=1073741823"))
        again = await b.execute(cmd.SendMessage(text="after", conversation_id=res.conversation_id), origin)
        assert again.run_id and b.store.failed is None
        assert b.store.query("PRAGMA integrity_check") == [("ok",)]
    finally:
        await b.stop()


def test_database_files_are_owner_only(tmp_path):
    """Credential hashes and the GitLab token live in the database: 0600 even in a 0755 directory, umask 022."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        os.chmod(tmp_path, 0o755)
        s = Store(str(tmp_path / "bridge.db")).open()
        s.submit(lambda c: c.execute("INSERT INTO settings(key, value) VALUES('k', 'v')")).result(10)
        for name in ("bridge.db", "bridge.db-wal", "bridge.db-shm"):
            mode = stat.S_IMODE(os.stat(tmp_path / name).st_mode)
            assert mode & 0o077 == 0, (name, oct(mode))
        s.close()
        os.chmod(tmp_path / "bridge.db", 0o644)  # an older, looser file is tightened on open
        s = Store(str(tmp_path / "bridge.db")).open()
        assert stat.S_IMODE(os.stat(tmp_path / "bridge.db").st_mode) == 0o600
        s.close()
    finally:
        os.umask(old)


def test_runs_of_one_statement_are_batched_and_a_bad_row_is_isolated(tmp_path):
    s = Store(str(tmp_path / "b.db")).open()
    try:
        s.migrate("t", ["CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)"])
        gate = __import__("threading").Event()
        s.submit(lambda c: gate.wait(5))  # hold the writer so the rows below form one batch
        for i in range(100):
            s.execute_later("INSERT INTO t(k, v) VALUES(?, ?)", (i, None if i == 50 else f"v{i}"))
        last = s.submit(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0])
        gate.set()
        assert last.result(10) == 99  # row 50 broke NOT NULL: only it is missing
        assert s.query("SELECT count(*) FROM t WHERE k=50") == [(0,)]
    finally:
        s.close()


def test_a_lone_failing_statement_is_undone_alone_without_a_savepoint(tmp_path):
    """Queued statements of different SQL in one batch run without a savepoint each (SQLite undoes a
    failed statement alone): the bad one fails, its neighbours commit."""
    s = Store(str(tmp_path / "b.db")).open()
    try:
        s.migrate("t", ["CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT NOT NULL)", "CREATE TABLE u(k INTEGER)"])
        gate = __import__("threading").Event()
        s.submit(lambda c: gate.wait(5))  # hold the writer so the statements below form one batch
        s.execute_later("INSERT INTO t(k, v) VALUES(?, ?)", (1, "a"))
        s.execute_later("INSERT INTO u(k) VALUES(?)", (1,))
        s.execute_later("INSERT INTO t(k, v) VALUES(?, ?)", (1, "dup"))  # a constraint error
        s.execute_later("UPDATE t SET v=? WHERE k=?", ("b", 1))
        last = s.submit(lambda c: c.execute("SELECT v FROM t").fetchall())
        gate.set()
        assert last.result(10) == [("b",)]
        assert s.query("SELECT k FROM u") == [(1,)]
        assert s.commits >= 1
    finally:
        s.close()


async def test_a_single_failing_write_is_rolled_back_and_the_next_commits(tmp_path):
    """A commit of one write runs it without a savepoint; if it fails, nothing of it stays."""
    s = Store(str(tmp_path / "b.db")).open()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])

    def half_then_fail(c):
        c.execute("INSERT INTO t VALUES(1)")
        c.execute("INSERT INTO t VALUES(1)")  # a constraint error after a row went in

    with pytest.raises(sqlite3.IntegrityError):
        await s.write(half_then_fail)
    await s.write(lambda c: c.execute("INSERT INTO t VALUES(2)"))
    assert s.query("SELECT i FROM t") == [(2,)]
    s.close()


async def test_checkpoints_run_beside_the_writer_not_inside_a_commit(tmp_path, monkeypatch):
    """SQLite's own checkpoint (inside the COMMIT that crosses its threshold) is off; the checkpointer
    thread copies the WAL into the database after commits, so the WAL starts over."""
    import bridge_core.bridge.sqlite as store_mod

    monkeypatch.setattr(store_mod, "CHECKPOINT_EVERY", 0.01)  # not the test's subject: how soon
    path = str(tmp_path / "b.db")
    s = Store(path).open()
    try:
        assert s.query("PRAGMA wal_autocheckpoint") == [(1000,)]  # a reader's setting: SQLite's default
        assert s._wconn.execute("PRAGMA wal_autocheckpoint").fetchone() == (0,)  # the writer never does it
        s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY, b BLOB)"])
        for i in range(50):
            await s.write(lambda c, i=i: c.execute("INSERT INTO t VALUES(?, zeroblob(4000))", (i,)))
        await s.write(lambda c: c.execute("INSERT INTO t VALUES(50, zeroblob(4000))"))
        # copied out of the WAL by the checkpointer (the database file alone holds every row)
        await until(lambda: _in_database_file(path, "SELECT COUNT(*) FROM t") == (51,),
                    what="the checkpoint after the last commit")
        assert s.checkpoints >= 1
    finally:
        s.close()


async def test_the_writer_checkpoints_itself_when_the_wal_outgrows_its_bound(tmp_path, monkeypatch):
    """Writes that never pause for a background checkpoint to catch up: past WAL_MAX_FRAMES the writer
    checkpoints right after a commit, so the WAL cannot grow without bound."""
    import bridge_core.bridge.sqlite as store_mod

    monkeypatch.setattr(store_mod, "CHECKPOINT_EVERY", 3600.0)  # the background one never comes
    monkeypatch.setattr(store_mod, "WAL_MAX_FRAMES", 10)
    path = str(tmp_path / "b.db")
    s = Store(path).open()
    try:
        s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY, b BLOB)"])
        s._wal_frames = 10  # as the checkpointer would report it
        await s.write(lambda c: c.execute("INSERT INTO t VALUES(1, zeroblob(4000))"))
        await s.write(lambda c: None)  # after the commit that saw the bound
        assert s._wal_frames == 0
        assert _in_database_file(path, "SELECT COUNT(*) FROM t") == (1,)  # backfilled by the writer itself
    finally:
        s.close()


def _in_database_file(path: str, sql: str):
    """``sql`` against the database file alone, as if there were no WAL (what a checkpoint copied);
    None while a checkpoint is still writing it (read as if it could not change)."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        return conn.execute(sql).fetchone()
    except sqlite3.DatabaseError:
        return None
    finally:
        conn.close()


async def test_agent_settings_are_read_from_sqlite_once_and_kept_across_a_restart(tmp_path):
    """The demo agent's settings are read from SQLite once, then from memory (a run start reads three, and a
    read on the loop waited behind a busy writer); what was set is what a restarted bridge reads."""
    from bridge_core.model import commands as cmd
    from bridge_core.bridge.demo import DemoAgent
    from bridge_core.bridge.bridge import Bridge

    origin = cmd.Origin(surface="pheby")
    agent = DemoAgent()
    b = Bridge(str(tmp_path / "d"), agent)
    await b.start()
    try:
        first = await b.execute(cmd.SendMessage(text="hello"), origin)
        await until(lambda: b.conversation(first.conversation_id).run is None, what="the first turn's end")
        await b.execute(cmd.SetYolo(enabled=True, conversation_id=first.conversation_id), origin)
        await b.execute(cmd.SetReasoning(effort="high"), origin)
        reads: list = []
        real = b.store.query
        b.store.query = lambda sql, params=(): reads.append(sql) or real(sql, params)
        second = await b.execute(cmd.SendMessage(text="again"), origin)  # a new conversation: no read
        await until(lambda: b.conversation(second.conversation_id).run is None, what="the second turn's end")
        assert not [sql for sql in reads if "settings" in sql]
        assert agent.settings.yolo(first.conversation_id).enabled
        assert not agent.settings.yolo(second.conversation_id).enabled
    finally:
        await b.stop()
    agent = DemoAgent()
    b = Bridge(str(tmp_path / "d"), agent)
    await b.start()
    try:
        assert agent.settings.yolo(first.conversation_id).enabled
        assert agent.settings.reasoning(None).effort == "high"
        assert agent.settings.reasoning(first.conversation_id).effort == "high"
    finally:
        await b.stop()
