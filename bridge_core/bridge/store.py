"""The store interface: what every component uses of a store, and the write machinery its engines share.

``BaseStore`` is the one interface; its engines are SQLite in the data directory, the
default (``sqlite.Store``: one file, WAL), and a shared PostgreSQL
(``bridge_core/scale/pgstore.py``), chosen by ``bridge_core/scale/engines.py``. Components
write their SQL once, in the dialect both share (``bridge_core/scale/sqldialect.py`` adapts
it for PostgreSQL; docs/scale-out.md), and their schema as ordered migrations.

Writes go through one writer thread that batches whatever is queued into a
single transaction and commits once, so the event loop never waits on disk
and bursts (lvmh ingest) cost one fsync per batch. ``await store.write(fn)``
returns once the transaction holding ``fn`` has committed: durable against a
crash of the process. Reads run on the caller's thread through their own
connection (WAL lets them proceed beside the writer).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

from ..model.errors import Unavailable

log = logging.getLogger("agent_bridge.store")

SETTING_SQL = "INSERT OR REPLACE INTO settings(key, value) VALUES(?, ?)"  # a settings row, new or replaced

WriteFn = Callable[[sqlite3.Connection], Any]
_Result = tuple[Optional[concurrent.futures.Future], Any, Optional[BaseException]]  # a write's future, result, error

CORE_MIGRATIONS: list[str] = [
    # 1: conversations, transcripts, runs, attachments, settings
    """
    CREATE TABLE conversations(
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        source TEXT NOT NULL DEFAULT 'demo',
        created_at REAL NOT NULL,
        updated_at REAL NOT NULL,
        last_active REAL,
        session_id TEXT
    );
    CREATE TABLE messages(
        conversation_id TEXT NOT NULL,
        message_id TEXT NOT NULL,
        role TEXT NOT NULL,
        text TEXT NOT NULL,
        ts REAL,
        PRIMARY KEY(conversation_id, message_id)
    );
    CREATE TABLE runs(
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        status TEXT NOT NULL,
        started_at REAL NOT NULL,
        finished_at REAL,
        error TEXT
    );
    CREATE INDEX runs_status ON runs(status);
    CREATE TABLE attachments(
        id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        filename TEXT NOT NULL,
        mime_type TEXT NOT NULL,
        size INTEGER NOT NULL,
        kind TEXT NOT NULL,
        inline_image INTEGER NOT NULL,
        message_id TEXT,
        created_at REAL NOT NULL,
        expires_at REAL
    );
    CREATE INDEX attachments_expiry ON attachments(expires_at);
    CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT NOT NULL);
    """,
]

_STOP = object()
BATCH_MAX = 5000  # writes in one transaction at most
# the least time between the starts of two commits: writes queued meanwhile share the next one, so a
# steady stream of small writes (a Loomi replay row per event) costs one commit per millisecond at most,
# not one per write, for at most this much more latency behind the durability barrier
MIN_COMMIT_GAP = 0.001


class BaseStore:
    """What every component may use of a store, and the writer both engines share.

    Writes are functions of a DB-API connection (``conn.execute(sql, params)``,
    ``conn.executemany``) in the shared dialect; they run in one writer thread, batched
    into a transaction. Reads (``query``) run on the caller's thread on a connection of
    their own. An engine fills in the hooks below.
    """

    probe_sql = (
        "INSERT INTO settings(key, value) VALUES('store.probe', zeroblob(?)) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value"
    )
    shared = False  # several nodes can use this store at once (the bus needs one: docs/scale-out.md)
    local_dir: Optional[str] = None  # a directory of this machine beside the store (SQLite's), for journals
    begin_sql = "BEGIN"
    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)
    # a statement that fails is undone alone and leaves the transaction usable (SQLite: a constraint
    # error aborts the statement, not the transaction), so a lone queued statement needs no savepoint
    # of its own; PostgreSQL aborts the whole transaction, so there every op gets one
    statement_atomic = False

    def __init__(self, path: str):
        self.path = path
        # given by a cluster (scale/cluster.py connect), used by a shared store (scale/pgstore.py): this node's id,
        # and whether no other node can have taken it for dead
        self.node_id = ""
        self.alive: Callable[[], bool] = lambda: True
        self._q: "queue.SimpleQueue[Any]" = queue.SimpleQueue()  # C-level put: a write costs the loop no lock dance
        self._thread: Optional[threading.Thread] = None
        self._wconn: Optional[sqlite3.Connection] = None
        self._rconn: Optional[sqlite3.Connection] = None
        self.failed: Optional[BaseException] = None  # the last storage error (disk full, read-only), until probe() works
        self.commits = 0
        # durability barrier: writes queued so far, and how many of them have committed (or failed);
        # ticket: the number of the last write a frame queued now must wait for. A write made durable
        # before it is queued (Loomi's replay rows, appended to their journal first: docs/loomi.md,
        # "Seq across restarts") does not raise it
        self.submitted = 0
        self.processed = 0
        self.ticket = 0
        self._sync_lock = threading.Lock()
        self._sync_waiters: list[tuple[int, asyncio.AbstractEventLoop, asyncio.Future]] = []

    # --- engine hooks --------------------------------------------------------

    def _open_connections(self) -> None:  # pragma: no cover - abstract
        """Set ``_wconn`` (the writer's) and ``_rconn`` (the reads'), with ``schema_version`` in place."""
        raise NotImplementedError

    def _close_connections(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def lock_schema(self, conn: Any) -> None:
        """Inside a write's transaction: keep other processes' schema and node claims out until it commits."""

    def _migration_sql(self, stmt: str) -> str:
        return stmt

    def lock_bounded(self, conn: Any, seconds: float, fn: Callable[[], Any]) -> Any:
        """Inside a write: ``fn()``, its waits for other processes' row locks bounded by ``seconds``
        (``Unavailable`` past them). One process writes SQLite, through one thread: nothing to bound."""
        return fn()

    def is_storage_error(self, exc: BaseException) -> bool:
        return is_storage_error(exc)

    def describe(self) -> str:
        """Where this store is, for messages (never a password)."""
        return self.path

    # --- lifecycle ---------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._wconn is not None

    def open(self) -> "BaseStore":
        self._open_connections()
        self.migrate("core", CORE_MIGRATIONS)
        self._thread = threading.Thread(target=self._writer, name="agent-bridge-store", daemon=True)
        self._thread.start()
        return self

    def migrate(self, component: str, migrations: Sequence[str]) -> int:
        """Apply ``migrations[v:]`` for ``component`` in order; returns the new version.

        Before the writer thread runs it applies them directly; afterwards it
        goes through the writer (so the connection is only used by one thread).
        """
        if self._thread is not None and self._thread.is_alive():
            return self.submit(lambda c: self._apply_migrations(c, component, migrations, in_tx=True)).result(timeout=60)
        assert self._wconn is not None, "store not open"
        return self._apply_migrations(self._wconn, component, migrations, in_tx=False)

    async def amigrate(self, component: str, migrations: Sequence[str]) -> int:
        """``migrate`` from the event loop: awaits the writer thread instead of blocking the loop on it."""
        if self._thread is not None and self._thread.is_alive():
            return await self.write(lambda c: self._apply_migrations(c, component, migrations, in_tx=True))
        return self.migrate(component, migrations)

    def close(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            self._q.put(_STOP)
            self._thread.join(timeout=30)
        self._thread = None
        self._processed(None)  # nothing more will commit: release every waiter
        self._close_connections()
        self._wconn = self._rconn = None

    def _apply_migrations(self, conn: Any, component: str, migrations: Sequence[str], in_tx: bool) -> int:
        """Apply what ``component`` lacks of ``migrations``, in one transaction under the schema lock
        (a second process starting at the same time waits, then finds them applied)."""
        if not in_tx:
            conn.execute(self.begin_sql)
        try:
            self.lock_schema(conn)
            row = conn.execute("SELECT version FROM schema_version WHERE component=?", (component,)).fetchone()
            version = row[0] if row else 0
            for i in range(version, len(migrations)):
                for stmt in _split_sql(migrations[i]):
                    conn.execute(self._migration_sql(stmt))
                conn.execute(
                    "INSERT INTO schema_version(component, version) VALUES(?, ?) "
                    "ON CONFLICT(component) DO UPDATE SET version=excluded.version",
                    (component, i + 1),
                )
            if not in_tx:
                conn.execute("COMMIT")
        except BaseException:
            if not in_tx:
                conn.execute("ROLLBACK")
            raise
        return max(version, len(migrations))

    # --- writes ------------------------------------------------------------

    def submit(self, fn: WriteFn, *, barrier: bool = True) -> concurrent.futures.Future:
        """Queue ``fn``; ``barrier=False`` for a write whose data is durable already (frames
        queued after it do not wait for it: ``ticket``)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        if self._thread is None:
            fut.set_exception(Unavailable("store is closed"))
            return fut
        self._enqueue(fn, fut, barrier)
        return fut

    def _enqueue(self, fn: WriteFn, fut: Optional[concurrent.futures.Future], barrier: bool) -> None:
        with self._sync_lock:  # queue order and count agree, whatever thread submits
            self.submitted += 1
            if barrier:
                self.ticket = self.submitted
            self._q.put((fn, fut))

    def hold_from(self, number: int) -> None:
        """Frames queued from now on wait for write ``number`` too (one queued earlier with
        ``barrier=False``, found to be needed by them: Loomi's next seq block)."""
        with self._sync_lock:
            if number > self.ticket:
                self.ticket = number

    async def synced(self, upto: Optional[int] = None) -> None:
        """Wait until the writes queued so far (or the first ``upto``) have committed or failed.

        Front ends await this before a frame leaves (``frontend.ws_text_sender``; the
        Outbox waits for ``ticket``, the last write queued with the barrier), so
        whatever a client has received is on disk: a crash never takes back an
        event someone already saw. It costs the commit latency (a batch, no fsync
        in WAL mode), never a write per frame.
        """
        target = self.submitted if upto is None else upto
        if self.processed >= target or self._thread is None:
            return
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self._sync_lock:
            if self.processed >= target:
                return
            self._sync_waiters.append((target, loop, fut))
        await fut

    def _processed(self, count: Optional[int]) -> None:
        """The writer finished ``count`` more writes (None: all of them); wake whoever waited for them."""
        with self._sync_lock:
            self.processed = self.submitted if count is None else self.processed + count
            ready = [w for w in self._sync_waiters if w[0] <= self.processed]
            if ready:
                self._sync_waiters = [w for w in self._sync_waiters if w[0] > self.processed]
        for _, loop, fut in ready:
            try:
                loop.call_soon_threadsafe(_wake, fut)
            except RuntimeError:  # that loop is closed
                pass

    async def write(self, fn: WriteFn) -> Any:
        return await asyncio.wrap_future(self.submit(fn))

    def write_later(self, fn: WriteFn, *, barrier: bool = True) -> None:
        """Fire and forget: queued, committed with the next batch, failures logged (by the writer: no
        future to make, lock and call back for a write nobody awaits; a run's start queues four)."""
        if self._thread is None:
            log.error("store write failed: %s", Unavailable("store is closed"))
            return
        self._enqueue(fn, None, barrier)

    def execute_later(self, sql: str, params: Iterable[Any] = (), *, barrier: bool = True) -> None:
        self.write_later(_Stmt(sql, tuple(params)), barrier=barrier)

    def _writer(self) -> None:
        conn = self._wconn
        assert conn is not None
        last = 0.0
        while True:
            # the gap before blocking on the queue, not after: under a steady stream the writer then wakes
            # once per commit (the GIL taken back once from a busy loop), not twice
            gap = last + MIN_COMMIT_GAP - time.monotonic()
            if gap > 0:
                time.sleep(gap)
            item = self._q.get()
            if item is _STOP:
                return
            last = time.monotonic()
            batch, stop = self._drain([item])
            conn, results = self._commit(conn, batch)
            _deliver(results)
            self._processed(len(batch))
            self._after_commit(conn)
            if stop:
                return

    def _drain(self, batch: list) -> tuple[list, bool]:
        """``batch`` and the writes queued behind it (``BATCH_MAX`` at most); True when a stop came."""
        while len(batch) < BATCH_MAX:
            try:
                nxt = self._q.get_nowait()
            except queue.Empty:
                break
            if nxt is _STOP:
                return batch, True
            batch.append(nxt)
        return batch, False

    def _commit(self, conn: Any, batch: list) -> tuple[Any, list[_Result]]:
        """``batch`` in one transaction: the writer's connection (another after a failure, if the engine
        reconnects) and each write's result."""
        try:
            conn.execute(self.begin_sql)
            if len(batch) == 1 and type(batch[0][0]) is not _Stmt:
                results, storage_error = self._run_one(conn, batch[0])
            else:
                results, storage_error = self._run_all(conn, batch)
            conn.execute("COMMIT")
            self.commits += 1
            if storage_error is not None:
                self.failed = storage_error  # sticky: cleared by a probe() that works
            return conn, results
        except self.errors as exc:
            log.error("store commit failed: %s", exc)
            self.failed = exc
            try:
                conn.execute("ROLLBACK")
            except self.errors:
                pass
            err = Unavailable(f"database write failed: {exc}")
            return self._after_failure(conn), [(fut, None, err) for _, fut in batch]

    def _run_one(self, conn: Any, write: tuple) -> tuple[list[_Result], Optional[BaseException]]:
        """One write (a Loomi tick's replay rows, most of the time): no savepoint, since rolling it back is
        rolling back the transaction; two statements (two hand-offs of the GIL to a busy loop) fewer."""
        fn, fut = write
        try:
            return [(fut, fn(conn), None)], None
        except Exception as exc:
            conn.execute("ROLLBACK")
            conn.execute(self.begin_sql)
            return [(fut, None, exc)], exc if self.is_storage_error(exc) else None

    def _run_all(self, conn: Any, batch: list) -> tuple[list[_Result], Optional[BaseException]]:
        """Every write of ``batch``, one bad write not sinking the others; the last storage error."""
        results: list[_Result] = []
        storage_error: Optional[BaseException] = None
        i, n = 0, len(batch)
        while i < n:
            fn, fut = batch[i]
            if type(fn) is _Stmt:
                j = self._run_group(conn, batch, i, results)
                if j > i:
                    i = j
                    continue
            exc = self._run_op(conn, fn, fut, results)
            if exc is not None and self.is_storage_error(exc):
                storage_error = exc
            i += 1
        return results, storage_error

    @staticmethod
    def _run_group(conn: Any, batch: list, i: int, results: list[_Result]) -> int:
        """A run of the same statement from ``i`` (execute_later's) as one executemany, not a call (and a
        GIL round trip) per row: the index after it; ``i`` when it is a lone statement or failed (its
        rows then go one by one)."""
        sql, n, j = batch[i][0].sql, len(batch), i + 1
        while j < n and type(batch[j][0]) is _Stmt and batch[j][0].sql == sql:
            j += 1
        if j - i == 1:
            return i
        conn.execute("SAVEPOINT grp")
        try:
            conn.executemany(sql, [b[0].params for b in batch[i:j]])
            conn.execute("RELEASE grp")
        except Exception:
            conn.execute("ROLLBACK TO grp")
            conn.execute("RELEASE grp")
            return i
        results.extend((b[1], None, None) for b in batch[i:j])
        return j

    def _run_op(self, conn: Any, fn: WriteFn, fut: Any, results: list[_Result]) -> Optional[BaseException]:
        """One write in a savepoint of its own: its error, or None."""
        # a lone statement on an engine that undoes a failed statement alone needs no savepoint:
        # two statements (and two hand-offs of the GIL from a busy loop) fewer
        savepoint = not (self.statement_atomic and type(fn) is _Stmt)
        if savepoint:
            conn.execute("SAVEPOINT op")
        try:
            res = fn(conn)
            if savepoint:
                conn.execute("RELEASE op")
            results.append((fut, res, None))
            return None
        except Exception as exc:  # one bad op does not sink the batch
            if savepoint:
                conn.execute("ROLLBACK TO op")
                conn.execute("RELEASE op")
            elif not conn.in_transaction:  # the engine rolled the transaction back (a full disk)
                raise
            results.append((fut, None, exc))
            return exc

    def _after_commit(self, conn: Any) -> None:
        """In the writer thread, after a commit's waiters were woken (an engine may tend its log)."""

    def _after_failure(self, conn: Any) -> Any:
        """The writer's connection after a failed commit (an engine may reconnect)."""
        return conn

    def flush(self, timeout: float = 30.0) -> None:
        """Block until everything queued so far has committed (shutdown, tests)."""
        if self._thread is None:
            return
        self.submit(lambda c: None).result(timeout=timeout)

    def end_sessions_of(self, node: str) -> int:
        """A shared store's sessions of a node taken for dead ended (scale/pgstore.py); none here."""
        return 0

    async def aflush(self) -> None:
        await self.write(lambda c: None)

    async def probe(self, size: int = 256 * 1024) -> None:
        """Write (and drop, in one transaction) ``size`` bytes: room for a message and its reply?

        Raises Unavailable while the disk is full or the directory read-only.
        """

        def write(c: Any) -> None:
            c.execute(self.probe_sql, (size,))
            c.execute("DELETE FROM settings WHERE key='store.probe'")

        try:
            await self.write(write)
        except self.errors as exc:
            raise Unavailable(f"database write failed: {exc}")
        self.failed = None

    # --- reads -------------------------------------------------------------

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        conn = self._rconn
        if conn is None:
            raise Unavailable("store is closed")
        return conn.execute(sql, tuple(params)).fetchall()

    def query_one(self, sql: str, params: Iterable[Any] = ()) -> Optional[tuple]:
        rows = self.query(sql, params)
        return rows[0] if rows else None

    # the core's reads of conversations (bridge.Bridge._load, transcripts.Transcripts): the list at
    # start, not every message; a conversation's transcript when something needs it.
    # Each conversation's row and the text of its last message (by insertion order), its first 200
    # characters (the state's preview, model/state.py); SQLite finds each one's last rowid in the
    # (conversation_id, message_id) index, whose entries carry it, and reads that one row
    conversation_list_sql = (
        "SELECT c.id, c.name, c.source, c.created_at, c.updated_at, c.last_active, c.session_id, "
        "(SELECT substr(text, 1, 200) FROM messages WHERE rowid = "
        "(SELECT max(rowid) FROM messages WHERE conversation_id = c.id)) FROM conversations c"
    )

    def conversation_list(self) -> Iterator[tuple]:
        """Every conversation: (id, name, source, created_at, updated_at, last_active, session_id,
        preview), the preview None when it has no message. A batch of rows at a time: the list of
        them all is never held beside the states made of it."""
        conn = self._rconn
        if conn is None:
            raise Unavailable("store is closed")
        cursor = conn.execute(self.conversation_list_sql)
        while True:
            rows = cursor.fetchmany(256)
            if not rows:
                return
            yield from rows

    def transcript(self, conversation_id: str, limit: int) -> list[tuple]:
        """The last ``limit`` messages of a conversation, oldest first: (message_id, role, text, ts)."""
        rows = self.query(
            "SELECT message_id, role, text, ts FROM messages WHERE conversation_id=? ORDER BY rowid DESC LIMIT ?",
            (conversation_id, limit),
        )
        rows.reverse()
        return rows

    def message_text(self, conversation_id: str, message_id: str) -> Optional[str]:
        row = self.query_one(
            "SELECT text FROM messages WHERE conversation_id=? AND message_id=?", (conversation_id, message_id)
        )
        return row[0] if row else None

    # --- settings ----------------------------------------------------------

    def get_setting(self, key: str) -> Optional[str]:
        row = self.query_one("SELECT value FROM settings WHERE key=?", (key,))
        return row[0] if row else None

    async def set_setting(self, key: str, value: Optional[str]) -> None:
        if value is None:
            await self.write(lambda c: c.execute("DELETE FROM settings WHERE key=?", (key,)))
        else:
            await self.write(lambda c: c.execute(SETTING_SQL, (key, value)))


def is_storage_error(exc: BaseException) -> bool:
    """SQLite could not write (disk full, read-only, I/O error), as opposed to a bad statement."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return isinstance(exc, sqlite3.Error) and name.startswith(
        ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR", "SQLITE_CANTOPEN", "SQLITE_CORRUPT")
    )


class _Stmt:
    """One statement queued by execute_later (the writer runs a run of equal ones as one executemany)."""

    __slots__ = ("sql", "params")

    def __init__(self, sql: str, params: tuple):
        self.sql = sql
        self.params = params

    def __call__(self, conn: sqlite3.Connection) -> Any:
        return conn.execute(self.sql, self.params)


def _deliver(results: list[_Result]) -> None:
    """Each write's result to its future (a write_later's failure, which has none, logged). A future its
    awaiter cancelled (``write`` in a handler whose client went away: the write is committed all the same)
    takes no result, and the writer goes on: raising here ended the writer thread, and with it every later
    write of the node (a Loomi new task whose socket closed before the answer, chaos seed 2003)."""
    for fut, res, exc in results:
        if fut is None:
            if exc is not None:
                log.error("store write failed: %s", exc)
            continue
        try:
            if exc is None:
                fut.set_result(res)
            else:
                fut.set_exception(exc)
        except concurrent.futures.InvalidStateError:  # cancelled by its awaiter, now or just before
            pass


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
