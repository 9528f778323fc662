"""The PostgreSQL store several nodes share (``--store postgresql://...``; docs/scale-out.md).

The driver is psycopg 3: well kept, with both a synchronous and an asyncio API. This
store keeps the SQLite store's model (``store.BaseStore``): writes are batched by one
writer thread into one transaction per batch, reads run on a connection of their own,
so every component's store code is the same on both engines. Statements and migrations
are written once in the shared dialect; ``sqldialect.py`` adapts them here.

Concurrent starts are safe: every migration runs under a transaction-scoped advisory
lock, so the first node applies it and the others then find it applied.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, Callable, Iterable, Optional, Sequence

import psycopg
from psycopg.adapt import Dumper

from . import sqldialect
from ..model.errors import Unavailable
from ..model.redact import mask_url
from ..bridge.store import BaseStore

log = logging.getLogger("agent_bridge.store")

SCHEMA_LOCK = 0x61625F73  # the advisory lock key migrations hold ("ab_s")
CONNECT_TIMEOUT = 10
# a batch whose connection was lost before its COMMIT was sent (a PostgreSQL restart) is retried on a
# fresh connection for this long before its writes are refused; meanwhile nothing behind it counts as
# processed, so no frame waiting for it (the durability barrier) leaves
RIDE_OUT = 20.0
# a node stopped inside a transaction (SIGSTOP, a frozen VM) holds its row locks, and with them the writer of every
# node that writes one of those rows, until it resumes: the server ends such a session after this long, undoing
# its transaction (run again when the node resumes, unless another node may have taken it for dead meanwhile).
# The server's timer does not run inside a pipeline (psycopg's executemany) nor after one (it ends with a Flush):
# there a survivor taking the node for dead ends its sessions (``end_sessions_of``)
IDLE_IN_TRANSACTION = 5.0
SESSION_NAME = "agent-bridge node "  # + the node's id: each session's application_name (end_sessions_of)
RETRY_EVERY = 0.25  # s between two attempts to reconnect while the server is down
CONFLICT_RETRIES = 5  # times a write that lost a deadlock (or a serialization conflict) is run again
# each writer's row: the id of its last transaction, written by that transaction (``PgConnection._begin``), so
# a COMMIT in doubt is known committed by its row, not by its id alone (a crash may hand the id out again)
WRITERS_TABLE = (
    "CREATE TABLE IF NOT EXISTS store_writers(writer TEXT PRIMARY KEY, xid BIGINT NOT NULL, "
    "at DOUBLE PRECISION NOT NULL)"
)
WRITERS_KEPT = 30 * 86400.0  # s a writer's row stays after its last transaction (a stopped node's: pruned at a start)


def _session_name(node: str) -> str:
    return (SESSION_NAME + node)[:63]  # the server keeps 63 bytes of an application_name


def _reason(exc: BaseException) -> str:
    """``exc`` on one line, no password (libpq may quote the conninfo)."""
    return mask_url(" ".join(str(exc).split())) or type(exc).__name__


class _BoolAsInt(Dumper):
    """SQLite stores a bool as 0/1 in an INTEGER column; so does this store (BIGINT)."""

    oid = psycopg.postgres.types["int8"].oid

    def dump(self, obj: bool) -> bytes:
        return b"1" if obj else b"0"


class PgConnection:
    """A psycopg connection that takes the shared dialect (``?`` placeholders, ``INSERT OR ...``)."""

    def __init__(self, raw: psycopg.Connection, keys: dict, committed: Optional[Callable[[int], Optional[bool]]] = None,
                 writer: Optional[str] = None):
        self.raw = raw
        self.writer = writer  # this store's row in store_writers (a uuid's hex), once that table exists
        self._keys = keys  # table -> (primary key columns, has rowid), shared by the store's connections
        self._sql: dict[tuple[str, bool], tuple[str, Any]] = {}
        self.sent_commit = False  # a COMMIT was sent since the last BEGIN: a failure now is in doubt
        self.xid: Optional[int] = None  # the open transaction's id, to learn its fate when its COMMIT's answer is lost
        self._committed = committed  # xid -> True/False, None while that cannot be known (PostgresStore._committed)

    def _translate(self, sql: str, with_params: bool) -> tuple[str, Any]:
        key = (sql, with_params)
        done = self._sql.get(key)
        if done is not None:
            return done
        text, order, table, cols = sqldialect.statement(sql)
        if not with_params:  # no parameters: psycopg sends the text as is, so no %-escaping
            text = text.replace("%%", "%")
        if table is not None:
            pk, has_rowid = self._table_keys(table)
            text += sqldialect.replace_clause(cols, pk, has_rowid)
        done = self._sql[key] = (text, order)
        return done

    def _table_keys(self, table: str) -> tuple[tuple[str, ...], bool]:
        got = self._keys.get(table)
        if got is None:
            rows = self.raw.execute(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
                "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = %s::regclass AND i.indisprimary",
                (table,),
            ).fetchall()
            has_rowid = self.raw.execute(
                "SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'rowid' AND NOT attisdropped",
                (table,),
            ).fetchone() is not None
            got = self._keys[table] = (tuple(r[0] for r in rows), has_rowid)
        return got

    def execute(self, sql: str, params: Iterable[Any] = ()) -> psycopg.Cursor:
        if sql == "BEGIN":
            return self._begin()
        if sql == "COMMIT":
            return self._commit()
        params = tuple(params)
        if params:
            text, order = self._translate(sql, True)
            return self.raw.execute(text, params if order is None else tuple(params[i] for i in order))
        return self.raw.execute(self._translate(sql, False)[0])

    def _begin(self) -> psycopg.Cursor:
        """BEGIN, and the transaction's id in the same round trip, written in the writer's row by the
        transaction itself (``PostgresStore._committed`` reads it back when the COMMIT is in doubt)."""
        self.sent_commit, self.xid = False, None
        sql = "BEGIN; SELECT txid_current()"
        if self.writer is not None:  # a uuid's hex: nothing to quote
            sql += (f"; INSERT INTO store_writers(writer, xid, at) VALUES('{self.writer}', txid_current(), "
                    "extract(epoch FROM now())) ON CONFLICT(writer) DO UPDATE SET xid=excluded.xid, at=excluded.at")
        cur = self.raw.execute(sql)
        if cur.nextset():
            self.xid = cur.fetchone()[0]
        return cur

    def _commit(self) -> Optional[psycopg.Cursor]:
        """COMMIT. When the connection dies before its answer (a PostgreSQL restart), the transaction's
        fate is asked on a fresh connection: committed, it counts as done (its writes are not run twice);
        undone, it is no longer in doubt (``sent_commit`` cleared, so ``_ride_out`` runs it again)."""
        self.sent_commit = True
        try:
            return self.raw.execute("COMMIT")
        except (psycopg.OperationalError, psycopg.errors.IdleInTransactionSessionTimeout):
            if self.xid is None or self._committed is None or not (self.raw.closed or self.raw.broken):
                raise
            fate = self._committed(self.xid)
            if fate is None:
                raise  # still in doubt: refused as before
            log.warning("store: a COMMIT's answer was lost with the connection: the transaction %s",
                        "committed" if fate else "was undone (run again)")
            if fate:
                return None
            self.sent_commit = False
            raise

    def executemany(self, sql: str, seq: Iterable[Sequence[Any]]) -> psycopg.Cursor:
        text, order = self._translate(sql, True)
        rows = [tuple(p) for p in seq] if order is None else [tuple(p[i] for i in order) for p in seq]
        cur = self.raw.cursor()
        cur.executemany(text, rows)
        return cur

    def commit(self) -> None:
        self.raw.commit()

    def close(self) -> None:
        self.raw.close()


def _conflict(exc: Any) -> bool:
    """A write PostgreSQL undid because of another transaction (deadlock, serialization): safe to run again."""
    return getattr(exc, "sqlstate", None) in ("40P01", "40001")


class PostgresStore(BaseStore):
    """One PostgreSQL database shared by every node of a bridge."""

    shared = True
    errors = (psycopg.Error,)
    probe_sql = (
        "INSERT INTO settings(key, value) VALUES('store.probe', repeat('x', ?)) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value"
    )

    def __init__(self, url: str):
        super().__init__(url)
        self.url = url
        self._keys: dict = {}
        self._writer_row: Optional[str] = None  # the writer's row in store_writers, once that table exists

    def describe(self) -> str:
        return mask_url(self.url)

    def _connect(self) -> PgConnection:
        try:
            raw = psycopg.connect(self.url, autocommit=True, connect_timeout=CONNECT_TIMEOUT,
                                  application_name=_session_name(self.node_id))
            raw.execute(f"SET idle_in_transaction_session_timeout = {int(IDLE_IN_TRANSACTION * 1000)}")
        except psycopg.Error as exc:
            raise Unavailable(f"cannot reach the store {self.describe()}: {_reason(exc)}")
        raw.adapters.register_dumper(bool, _BoolAsInt)
        return PgConnection(raw, self._keys, self._committed, self._writer_row)

    def _committed(self, xid: int) -> Optional[bool]:
        """Whether the writer's transaction ``xid`` committed, asked on a fresh connection (while the server
        restarts, again every ``RETRY_EVERY`` for up to ``RIDE_OUT`` s); None when that could not be learnt.

        Once no transaction ``xid`` is in progress, the writer's row says: it holds ``xid`` only if that
        transaction committed. ``txid_status`` alone said "committed" for a batch a crash had undone: none of
        its WAL had reached the log, so recovery handed its id out again, to another node's transaction that
        committed (chaos seed 2001, tests/scale/test_store_commit_fate.py). An id recovery has not reached
        yet ("in the future") is no transaction in progress."""
        deadline = time.monotonic() + RIDE_OUT
        while True:
            try:
                conn = self._connect()
                try:
                    if self._running(conn, xid):
                        raise Unavailable("still in progress")
                    if self._writer_row is None:  # before store_writers exists (the store's opening): by the id
                        return conn.raw.execute("SELECT txid_status(%s)", (xid,)).fetchone()[0] == "committed"
                    row = conn.raw.execute("SELECT xid FROM store_writers WHERE writer = %s",
                                           (self._writer_row,)).fetchone()
                    return row is not None and row[0] == xid
                finally:
                    conn.close()
            except (Unavailable, psycopg.Error):
                pass
            if time.monotonic() >= deadline:
                return None
            time.sleep(RETRY_EVERY)

    @staticmethod
    def _running(conn: PgConnection, xid: int) -> bool:
        """Whether a transaction ``xid`` is in progress (the writer's old backend not gone yet, or another
        that took its id after a crash: its end is waited for)."""
        try:
            return conn.raw.execute("SELECT txid_status(%s)", (xid,)).fetchone()[0] == "in progress"
        except psycopg.errors.InvalidParameterValue:  # "in the future": recovery never saw it
            return False

    def _open_connections(self) -> None:
        self._writer_row = None
        self._wconn = self._connect()
        conn = self._wconn
        conn.execute("BEGIN")
        try:
            conn.execute("SELECT pg_advisory_xact_lock(%d)" % SCHEMA_LOCK)
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version(component TEXT PRIMARY KEY, version BIGINT NOT NULL)"
            )
            conn.raw.execute(WRITERS_TABLE)
            conn.raw.execute("DELETE FROM store_writers WHERE at < extract(epoch FROM now()) - %s", (WRITERS_KEPT,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.writer = self._writer_row = uuid.uuid4().hex
        self._rconn = self._connect()

    def end_sessions_of(self, node: str) -> int:
        """Node ``node`` taken for dead: its sessions ended, on a connection of their own (this node's writer may
        be waiting on one of its locks), so a transaction it was stopped in is undone before its runs are taken
        over (IDLE_IN_TRANSACTION). How many were ended."""
        conn = self._connect()
        try:
            rows = conn.raw.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() "
                "AND application_name = %s AND pid <> pg_backend_pid()", (_session_name(node),)).fetchall()
        except psycopg.Error as exc:  # not allowed (another role): the take-over goes on, waiting as before
            log.warning("store: could not end the sessions of node %s: %s", node, _reason(exc))
            return 0
        finally:
            conn.close()
        return sum(1 for (ended,) in rows if ended)

    def lock_schema(self, conn: Any) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%d)" % SCHEMA_LOCK)

    def _migration_sql(self, stmt: str) -> str:
        return sqldialect.migration(stmt)

    def lock_bounded(self, conn: Any, seconds: float, fn: Any) -> Any:
        """Inside a write: ``fn()`` with PostgreSQL's ``lock_timeout`` at ``seconds`` (then back to the
        default). A row lock held longer (another node stopped inside its transaction: a Loomi device's
        claim, docs/scale-out.md "Fenced ownership") is ``Unavailable``: the caller is told to retry, and
        the writer thread, which every write of this node waits on, is not held with it. The failed
        statement's savepoint is rolled back (store.BaseStore._run_op), with the setting."""
        conn.execute(f"SET LOCAL lock_timeout = '{max(1, int(seconds * 1000))}ms'")
        try:
            result = fn()
        except psycopg.errors.LockNotAvailable:
            raise Unavailable(f"a row this write needs stayed locked for {seconds:g} s") from None
        conn.execute("SET LOCAL lock_timeout TO DEFAULT")
        return result

    def is_storage_error(self, exc: BaseException) -> bool:
        """The server could not write (disk full, read-only, connection lost), not a bad statement."""
        sqlstate = getattr(exc, "sqlstate", None) or ""
        return isinstance(exc, psycopg.OperationalError) or sqlstate.startswith(("53", "58", "25006", "25P03"))

    def _commit(self, conn: Any, batch: list) -> tuple[Any, list]:
        """The batch in one transaction (``_ride_out``); a write of it that lost a deadlock or a
        serialization conflict (PostgreSQL undid it alone, in its savepoint) is run again, in the next
        transaction, before any of the batch counts as processed: two nodes guarding the epochs of the
        same devices (bridge_core/scale/fencing.py) may lock their rows in different orders."""
        conn, results = self._ride_out(conn, batch)
        for _ in range(CONFLICT_RETRIES):
            again = [i for i, r in enumerate(results) if _conflict(r[2])]
            if not again:
                break
            log.warning("store: %d write(s) lost a deadlock or a conflict: run again", len(again))
            conn, redo = self._ride_out(conn, [batch[i] for i in again])
            for i, r in zip(again, redo):
                if self.failed is results[i][2]:
                    self.failed = None  # not a storage failure: nothing to probe for
                results[i] = r
        return conn, results

    def _ride_out(self, conn: Any, batch: list) -> tuple[Any, list]:
        """The batch in one transaction; if the connection was lost before its COMMIT was sent (nothing
        of it committed: a PostgreSQL restart), the same batch again on a fresh connection, for up to
        ``RIDE_OUT`` s. A write refused while the server restarts would otherwise be lost while the
        frames behind it leave (a Loomi device's seqs, its replay rows: docs/scale-out.md). A failure
        after COMMIT was sent is in doubt: its fate is asked (``PgConnection._commit``, ``_committed``);
        one that cannot be learnt is refused (retrying could apply it twice)."""
        deadline = time.monotonic() + RIDE_OUT
        while True:
            conn.sent_commit = False
            lost = conn.raw.closed or conn.raw.broken
            if not lost:
                new, results = super()._commit(conn, batch)
                lost = conn.raw.closed or conn.raw.broken
                if not lost or conn.sent_commit or time.monotonic() >= deadline:
                    return new, results
                if not self.alive():  # stopped inside it (IDLE_IN_TRANSACTION) longer than its liveness
                    log.warning("store: a batch of %d writes was undone while this node may have been taken for dead:"
                                " refused, not run again (another node closed its runs)", len(batch))
                    return new, results
                conn = new
                if not (conn.raw.closed or conn.raw.broken):
                    log.warning("store: a batch of %d writes lost its connection before COMMIT: retried", len(batch))
                    continue
            if time.monotonic() >= deadline:  # still down: refused, as on a full disk
                return super()._commit(conn, batch)
            time.sleep(RETRY_EVERY)
            try:
                conn = self._wconn = self._connect()
                log.warning("store: reconnected to %s", self.describe())
            except Unavailable:
                pass  # still down (said once, by the failure that found it out)

    def _after_failure(self, conn: Any) -> Any:
        if conn.raw.closed or conn.raw.broken:
            try:
                self._wconn = self._connect()
                log.warning("store: reconnected to %s", self.describe())
                return self._wconn
            except Unavailable as exc:
                log.error("%s", exc.message)
        return conn

    # every conversation and its last message's first 200 characters (store.BaseStore.conversation_list):
    # one pass over the messages (their rowid column has no index here)
    conversation_list_sql = (
        "SELECT c.id, c.name, c.source, c.created_at, c.updated_at, c.last_active, c.session_id, l.preview "
        "FROM conversations c LEFT JOIN (SELECT DISTINCT ON (conversation_id) conversation_id, "
        "left(text, 200) AS preview FROM messages ORDER BY conversation_id, rowid DESC) l ON l.conversation_id = c.id"
    )

    def query(self, sql: str, params: Iterable[Any] = ()) -> list[tuple]:
        conn = self._rconn
        if conn is None:
            raise Unavailable("store is closed")
        try:
            return conn.execute(sql, params).fetchall()
        except psycopg.OperationalError:
            if not (conn.raw.closed or conn.raw.broken):
                raise
            self._rconn = conn = self._connect()  # one retry on a fresh connection (server restarted)
            return conn.execute(sql, params).fetchall()

    def _close_connections(self) -> None:
        for conn in (self._wconn, self._rconn):
            if conn is not None:
                try:
                    conn.close()
                except psycopg.Error:
                    pass

