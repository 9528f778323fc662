"""The store: SQLite in the data directory (the default) or a shared PostgreSQL (``pgstore.py``).

``BaseStore`` is the one interface every component uses, and the write machinery both
engines share; ``Store`` is the SQLite one: one file, WAL, ordered migrations. Components
write their SQL once, in the dialect both share (``sqldialect.py`` adapts it for PostgreSQL;
docs/scale-out.md).

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
import os
import queue
import sqlite3
import threading
import time
from typing import Any, Callable, Iterable, Optional, Sequence

from ..model.errors import Unavailable
from .private import open_private, private_dir

log = logging.getLogger("agent_bridge.store")

WriteFn = Callable[[sqlite3.Connection], Any]

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
# the least time between the starts of two commits: writes queued meanwhile share the next one, so a
# steady stream of small writes (a Loomi replay row per event) costs one commit per millisecond at most,
# not one per write, for at most this much more latency behind the durability barrier
MIN_COMMIT_GAP = 0.001
# SQLite (Store): how often the checkpointer thread copies the WAL into the database while writes go on (each
# complete checkpoint makes the next commit start the WAL over, which syncs the new WAL header: one fsync in
# the writer's path per checkpoint, so not more often than this), and the WAL length (pages; SQLite's default
# autocheckpoint is 1,000) past which the writer checkpoints itself
CHECKPOINT_EVERY = 5.0
WAL_MAX_FRAMES = 16384


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
            batch = [item]
            stop = False
            while len(batch) < 5000:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                batch.append(nxt)
            results: list[tuple[Optional[concurrent.futures.Future], Any, Optional[BaseException]]] = []
            storage_error: Optional[BaseException] = None
            try:
                conn.execute(self.begin_sql)
                i, n = 0, len(batch)
                if n == 1 and type(batch[0][0]) is not _Stmt:
                    # one write (a Loomi tick's replay rows, most of the time): no savepoint, since rolling
                    # it back is rolling back the transaction; two statements (two hand-offs of the GIL
                    # to a busy loop) fewer per commit
                    fn, fut = batch[0]
                    try:
                        results.append((fut, fn(conn), None))
                    except Exception as exc:
                        conn.execute("ROLLBACK")
                        conn.execute(self.begin_sql)
                        results.append((fut, None, exc))
                        if self.is_storage_error(exc):
                            storage_error = exc
                    i = n
                while i < n:
                    fn, fut = batch[i]
                    if type(fn) is _Stmt:
                        # a run of the same statement (execute_later): one executemany, not a call (and a
                        # GIL round trip) per row; if it fails, the rows go one by one below
                        j = i + 1
                        while j < n and type(batch[j][0]) is _Stmt and batch[j][0].sql == fn.sql:
                            j += 1
                        if j - i > 1:
                            conn.execute("SAVEPOINT grp")
                            try:
                                conn.executemany(fn.sql, [b[0].params for b in batch[i:j]])
                                conn.execute("RELEASE grp")
                                results.extend((b[1], None, None) for b in batch[i:j])
                                i = j
                                continue
                            except Exception:
                                conn.execute("ROLLBACK TO grp")
                                conn.execute("RELEASE grp")
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
                    except Exception as exc:  # one bad op does not sink the batch
                        if savepoint:
                            conn.execute("ROLLBACK TO op")
                            conn.execute("RELEASE op")
                        elif not conn.in_transaction:  # the engine rolled the transaction back (a full disk)
                            raise
                        results.append((fut, None, exc))
                        if self.is_storage_error(exc):
                            storage_error = exc
                    i += 1
                conn.execute("COMMIT")
                self.commits += 1
                if storage_error is not None:
                    self.failed = storage_error  # sticky: cleared by a probe() that works
            except self.errors as exc:
                log.error("store commit failed: %s", exc)
                self.failed = exc
                try:
                    conn.execute("ROLLBACK")
                except self.errors:
                    pass
                conn = self._after_failure(conn)
                err = Unavailable(f"database write failed: {exc}")
                results = [(fut, None, err) for _, fut in batch]
            for fut, res, exc in results:
                if fut is None:  # write_later's
                    if exc is not None:
                        log.error("store write failed: %s", exc)
                elif exc is None:
                    fut.set_result(res)
                else:
                    fut.set_exception(exc)
            self._processed(len(batch))
            self._after_commit(conn)
            if stop:
                return

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

    # --- settings ----------------------------------------------------------

    def get_setting(self, key: str) -> Optional[str]:
        row = self.query_one("SELECT value FROM settings WHERE key=?", (key,))
        return row[0] if row else None

    async def set_setting(self, key: str, value: Optional[str]) -> None:
        if value is None:
            await self.write(lambda c: c.execute("DELETE FROM settings WHERE key=?", (key,)))
        else:
            await self.write(
                lambda c: c.execute(
                    "INSERT INTO settings(key, value) VALUES(?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
                    (key, value),
                )
            )


class Store(BaseStore):
    """SQLite in one file of the data directory (WAL): the embedded default.

    Checkpoints (copying the WAL back into the database file, with its two
    fsyncs: milliseconds on a busy disk) run in a thread of their own, beside
    the writer (``_checkpoints``), never inside a commit: SQLite's automatic
    checkpoint would run in the COMMIT of whichever write crossed its
    threshold, and every frame behind the durability barrier would wait for
    the disk. The writer checkpoints itself only when the WAL has grown past
    ``WAL_MAX_FRAMES`` without the background checkpoints ever catching up
    with it (writes never paused for one to finish), right after waking that
    commit's waiters: that lets the next write start the WAL over.
    """

    begin_sql = "BEGIN IMMEDIATE"
    statement_atomic = True

    def __init__(self, path: str):
        super().__init__(path)
        self.local_dir = os.path.dirname(os.path.abspath(path))
        self._ckpt_thread: Optional[threading.Thread] = None
        self._ckpt_wake = threading.Event()  # set by the writer after a commit: there is WAL to copy
        self._ckpt_stop = threading.Event()
        self._ckpt_armed = False  # the writer has woken the checkpointer since its last checkpoint
        self._wal_frames = 0  # the WAL's length at the last checkpoint, in frames (pages)
        self.checkpoints = 0

    def open(self) -> "Store":
        super().open()
        self._ckpt_stop.clear()
        self._ckpt_thread = threading.Thread(target=self._checkpoints, name="agent-bridge-checkpoint", daemon=True)
        self._ckpt_thread.start()
        return self

    def close(self) -> None:
        if self._ckpt_thread is not None:  # closing checkpoints the whole WAL itself
            self._ckpt_stop.set()
            self._ckpt_wake.set()
            self._ckpt_thread.join(timeout=30)
            self._ckpt_thread = None
        super().close()

    def _after_commit(self, conn: Any) -> None:
        if not self._ckpt_armed:
            self._ckpt_armed = True
            self._ckpt_wake.set()
        if self._wal_frames >= WAL_MAX_FRAMES:
            self._wal_frames = 0
            try:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
            except sqlite3.Error as exc:
                log.warning("WAL checkpoint failed: %s", exc)

    def _checkpoints(self) -> None:
        """The checkpointer thread: at most every CHECKPOINT_EVERY seconds, if anything was committed."""
        try:
            conn = self._connect()
        except sqlite3.Error as exc:
            log.error("no checkpoint connection (%s): SQLite checkpoints inside commits", exc)
            if self._wconn is not None:
                self.submit(lambda c: c.execute("PRAGMA wal_autocheckpoint=%d" % WAL_MAX_FRAMES))
            return
        try:
            while True:
                self._ckpt_wake.wait()
                if self._ckpt_stop.wait(CHECKPOINT_EVERY):
                    return
                self._ckpt_wake.clear()
                self._ckpt_armed = False  # the next commit wakes this thread again
                try:
                    busy, frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                    self._wal_frames = frames if frames > done else 0
                except sqlite3.Error as exc:
                    log.warning("WAL checkpoint failed: %s", exc)
        finally:
            conn.close()

    def _open_connections(self) -> None:
        private_dir(os.path.dirname(os.path.abspath(self.path)))
        _owner_only(self.path)
        self._wconn = self._connect()
        self._wal_mode(self._wconn)
        self._wconn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer thread does it (class docstring)
        self._wconn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version(component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        self._wconn.commit()
        self._rconn = self._connect()

    @staticmethod
    def _wal_mode(conn: sqlite3.Connection, timeout: float = 30.0) -> None:
        """Switch the file to WAL. SQLite answers "database is locked" at once, without waiting
        out the busy timeout, when another process opens a new file at the same moment (the
        switch needs the file to itself): try again, a little later each time, for ``timeout``."""
        deadline, pause = time.monotonic() + timeout, 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)  # only while the store opens, before anything is served
            pause = min(pause * 2, 0.05)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA busy_timeout=30000")
        return conn

    def _close_connections(self) -> None:
        for conn in (self._wconn, self._rconn):
            if conn is not None:
                try:
                    if conn is self._wconn:
                        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                    conn.close()
                except sqlite3.Error:
                    pass


def _owner_only(path: str) -> None:
    """The database holds credential hashes and the GitLab token: mode 0600 whatever the umask or the
    data directory's mode (SQLite gives its -wal and -shm files the database file's mode)."""
    try:
        os.close(open_private(path, os.O_RDWR))
    except OSError:
        pass  # read-only or missing directory: sqlite3 reports it next


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


def _wake(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _split_sql(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
