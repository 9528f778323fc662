"""lvmh persistence: the spec's ``events`` and ``sessions`` tables, written in batches.

Every persisted event of a tick (plugin frames and the bridge's own rendered
events) is gathered and written as one store operation (one ``executemany``
of ``INSERT OR IGNORE``: a resent ``(sessionId, seq)`` never becomes a second
row). The store's writer thread commits queued operations together, so an
ingest burst costs one fsync per batch, never one per event.

Durability of ``welcome.lastSeq``: the highest seq counted as persisted for a
session (``committed``) only moves when the transaction holding those rows
has committed, from the write's completion callback. A failed batch caps the
session's reported seq below its first lost row until the next ``welcome``
asks the plugin to resend from there. Before a ``welcome`` the server awaits
the session's writes still in flight, so a plugin never renumbers over rows
that are about to land.

Durable before shown: what a browser, another node or the core gets of an event (``after_durable``:
the stream's push, the relay's frame, a pi event's shared events) runs once every write queued
before it has committed, in order (group commit: one transaction per tick, then the tick's frames;
``later`` its hot form, kept flat in the batch: no object made per event waits for the commit).
A node killed with -9 never showed an event it had not stored.

Several nodes: a pi session is fenced (docs/scale-out.md "Fenced ownership"; the rule is
bridge_core/scale/fencing.py): a hello takes the session under a new epoch (``claim``, committed
before the node reads the session's state), and every batch first guards the epochs of the
sessions it writes for; a session another node claimed since gets nothing written, nothing of
it queued here runs, and ``on_lost`` closes its plugin's socket.

``payload`` holds the whole event object (envelope and payload, the JSON
text REST and the browser stream serve), so reads never re-encode.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Any, Callable, Optional

import orjson

from bridge_core.bridge.store import BaseStore
from bridge_core.scale import fencing

log = logging.getLogger("agent_bridge.lvmh.store")

MIGRATIONS = [
    # 1: the lvmh protocol "Daemon persistence" (+ which side owns a session)
    """
    CREATE TABLE events(
        sessionId TEXT NOT NULL,
        seq INTEGER NOT NULL,
        ts INTEGER NOT NULL,
        type TEXT NOT NULL,
        payload TEXT NOT NULL,
        PRIMARY KEY(sessionId, seq)
    ) WITHOUT ROWID;
    CREATE TABLE sessions(
        id TEXT PRIMARY KEY,
        info TEXT NOT NULL,
        lastSeq INTEGER NOT NULL DEFAULT 0,
        lastEventAt INTEGER,
        online INTEGER DEFAULT 0,
        source TEXT NOT NULL DEFAULT 'plugin'
    );
    """,
    # 2: seqs handed out ahead of storage (the bridge's own sessions number their unstored
    # message_update events too; after a restart numbering resumes above this, never reusing one)
    "ALTER TABLE sessions ADD COLUMN seqReserved INTEGER NOT NULL DEFAULT 0",
    # 3: spawned workers' own credentials, SHA-256 only (lvmh_adapter/auth.py WorkerCredentials)
    """
    CREATE TABLE lvmh_worker_tokens(
        hash TEXT PRIMARY KEY,
        sessionId TEXT NOT NULL,
        createdAt INTEGER NOT NULL
    );
    CREATE INDEX lvmh_worker_tokens_session ON lvmh_worker_tokens(sessionId);
    """,
    # 4: what a plugin session has stored, counted against [lvmh] worker_quota_mb (registry.py charge);
    # sessions stored before it start from their events' length
    """
    ALTER TABLE sessions ADD COLUMN storedBytes INTEGER NOT NULL DEFAULT 0;
    UPDATE sessions SET storedBytes = (SELECT COALESCE(SUM(LENGTH(payload)), 0) FROM events
                                       WHERE events.sessionId = sessions.id) WHERE source = 'plugin';
    """,
    # 5: several nodes: the epoch under which one node at a time writes for a pi session (fencing.py)
    "ALTER TABLE sessions ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0",
]

_INSERT_EVENTS = "INSERT OR IGNORE INTO events(sessionId, seq, ts, type, payload) VALUES(?,?,?,?,?)"
_MAXIMA = ("UPDATE sessions SET lastSeq=MAX(lastSeq, ?), lastEventAt=MAX(COALESCE(lastEventAt, 0), ?), "
           "storedBytes=storedBytes+? WHERE id=?")
_SESSION_COLUMNS = "id, info, lastSeq, lastEventAt, source, seqReserved, storedBytes"
SEQ_BASE_KEY = "lvmh.cluster_seq_base"  # several nodes: where bridge sessions' derived seqs start (registry.py)
SESSIONS = fencing.Owners("sessions", "id")  # where a pi session's epoch lives (several nodes)
ROW = 5  # items of one event row in ``_Batch.rows``: sid, seq, ts, type, payload
EFFECT = 5  # items of one deferred effect in ``_Batch.effects``: sid, fn, a, b, c
FLUSH_ROWS = 2000  # flush before the end of the tick once this many rows wait
BACKLOG_HIGH = 50_000  # rows in flight before ingest waits for the writer
BACKLOG_LOW = 10_000


class StoredSession:
    __slots__ = ("id", "info", "last_seq", "last_event_at", "source", "reserved", "stored")

    def __init__(self, sid: str, info: dict, last_seq: int, last_event_at: Optional[int], source: str,
                 reserved: int = 0, stored: int = 0):
        self.id = sid
        self.info = info
        self.last_seq = last_seq
        self.last_event_at = last_event_at
        self.source = source
        self.reserved = reserved
        self.stored = stored  # bytes of events its plugin stored (the quota's count)


class _Batch:
    __slots__ = ("rows", "sessions", "maxima", "done", "effects", "held", "lost", "over")

    def __init__(self) -> None:
        self.rows: list = []  # flat, ``ROW`` items a row (sid, seq, ts, type, payload): no tuple per event waits
        self.sessions: list[tuple] = []  # session row upserts, applied before the rows
        self.maxima: dict[str, list[int]] = {}  # sid -> [max seq, min seq, max ts, bytes charged]
        self.done: Optional[asyncio.Future] = None
        # run once the batch committed (``after_durable``): flat, ``EFFECT`` items an effect (sid, fn, a, b, c
        # for ``fn(a, b, c)``), so an event deferred allocates nothing the garbage collector tracks
        self.effects: list = []
        self.held: dict[str, int] = {}  # sid -> the epoch this node writes it under (guarded first)
        self.lost: set = set()  # of ``held``, the sessions another node claimed: nothing written for them
        self.over = False  # its completion ran (a later effect runs at once, or behind a later batch)

    def count(self) -> int:
        return len(self.rows) // ROW

    def sids(self) -> set:
        return {*self.maxima, *(s[0] for s in self.sessions), *self.effects[::EFFECT]}


class EventLog:
    def __init__(self, store: BaseStore):
        self.store = store
        self.committed: dict[str, int] = {}
        self._fail_cap: dict[str, int] = {}
        self._batch = _Batch()
        self._scheduled = False
        self._inflight: dict[str, asyncio.Future] = {}  # sid -> completion of its latest batch
        self.inflight_rows = 0
        self._drained: Optional[asyncio.Event] = None
        self.failures = 0
        self._tail: Optional[_Batch] = None  # the batch submitted last (effects behind it wait for it)
        self.epochs: dict[str, int] = {}  # several nodes: sid -> the epoch of a pi session this node took
        self.on_lost: Optional[Callable[[str], None]] = None  # a session another node claimed (loop thread)

    # --- startup -----------------------------------------------------------------------------

    def migrate(self) -> None:
        self.store.migrate("lvmh", MIGRATIONS)

    async def amigrate(self) -> None:
        """``migrate`` from the event loop (awaits the store's writer, never blocks the loop)."""
        await self.store.amigrate("lvmh", MIGRATIONS)

    async def cluster_base(self) -> int:
        """Several nodes: the base of the bridge sessions' derived seqs (``registry.cluster_seq``),
        fixed once for the store, above every seq a single node numbered before. The first node
        to ask sets it; every node reads the same value back."""
        row = self.store.query_one("SELECT value FROM settings WHERE key=?", (SEQ_BASE_KEY,))
        if row is not None:
            return int(row[0])
        top = self.store.query_one(
            "SELECT MAX(MAX(lastSeq, seqReserved)) FROM sessions WHERE source='bridge'")
        candidate = str(int(top[0] or 0) + 1 if top is not None else 1)

        def write(c: sqlite3.Connection) -> str:
            c.execute("INSERT OR IGNORE INTO settings(key, value) VALUES(?, ?)", (SEQ_BASE_KEY, candidate))
            return c.execute("SELECT value FROM settings WHERE key=?", (SEQ_BASE_KEY,)).fetchone()[0]

        return int(await self.store.write(write))

    def refresh(self, sid: str) -> Optional[tuple[int, int, int]]:
        """Several nodes: what the store says of ``sid`` now (its plugin may have been connected to
        another node): ``(lastSeq, seqReserved, storedBytes)``, the persisted seq counted as committed here."""
        row = self.store.query_one("SELECT lastSeq, seqReserved, storedBytes FROM sessions WHERE id=?", (sid,))
        if row is None:
            return None
        last, reserved = int(row[0] or 0), int(row[1] or 0)
        if last > self.committed.get(sid, 0):
            self.committed[sid] = last
        return last, reserved, int(row[2] or 0)

    def load_one(self, sid: str) -> Optional[StoredSession]:
        """Several nodes: one session as stored now (created on another node since this one started)."""
        found = self._stored(f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id=?", (sid,))
        return found[0] if found else None

    def load(self, shared: bool = False) -> list[StoredSession]:
        out = self._stored(f"SELECT {_SESSION_COLUMNS} FROM sessions")
        if not shared:  # nobody is connected to a daemon that just started (with several nodes: to this one)
            self.store.write_later(lambda c: c.execute("UPDATE sessions SET online=0 WHERE online!=0"))
        return out

    def _stored(self, sql: str, params: tuple = ()) -> list[StoredSession]:
        out = []
        for sid, info, last_seq, last_at, source, reserved, stored in self.store.query(sql, params):
            if source == "bridge":  # its conversation says what it is (server.bridge_info): not kept twice
                data: Any = {}
            else:
                try:
                    data = orjson.loads(info)
                except orjson.JSONDecodeError:
                    data = {}
            if not isinstance(data, dict):
                data = {}
            if int(last_seq or 0) > self.committed.get(sid, 0):
                self.committed[sid] = int(last_seq or 0)
            out.append(StoredSession(sid, data, int(last_seq or 0), last_at, source, int(reserved or 0),
                                     int(stored or 0)))
        return out

    # --- writes --------------------------------------------------------------------------------

    def append(self, sid: str, seq: int, ts: int, etype: str, raw: str, charged: int = 0) -> None:
        """One event row; ``charged``: the bytes its session's quota counted for it (kept with the session)."""
        b = self._batch
        b.rows += (sid, seq, ts, etype, raw)
        m = b.maxima.get(sid)
        if m is None:
            b.maxima[sid] = [seq, seq, ts, charged]
        else:
            if seq > m[0]:
                m[0] = seq
            if seq < m[1]:
                m[1] = seq
            if ts > m[2]:
                m[2] = ts
            m[3] += charged
        if len(b.rows) >= FLUSH_ROWS * ROW:
            self.flush()
        elif not self._scheduled:  # (tested here: the hot path makes no call when a flush is scheduled)
            self._schedule()

    def upsert_session(self, sid: str, info: dict, source: str, online: Optional[bool] = None) -> None:
        self._batch.sessions.append((sid, "upsert", orjson.dumps(info).decode(), source, online))
        self._schedule()

    async def append_if(self, sid: str, rows: list, guard: Any) -> bool:
        """Several nodes: ``rows`` (``(seq, ts, type, payload)``) of ``sid`` written in one transaction
        with ``guard(conn)``, only if it says True (this node still answers for the session: a
        plugin's hello on another node may have taken it meanwhile). True when written."""
        self.flush()

        def op(conn: Any) -> bool:
            if not guard(conn):
                return False
            conn.executemany(_INSERT_EVENTS, [(sid, *row) for row in rows])
            conn.execute(_MAXIMA, (max(r[0] for r in rows), max(r[1] for r in rows), 0, sid))
            return True

        written = bool(await self.store.write(op))
        top = max(r[0] for r in rows)
        if written and top > self.committed.get(sid, 0):
            self.committed[sid] = top
        return written

    def set_online(self, sid: str, online: bool) -> None:
        self._batch.sessions.append((sid, "online", None, None, online))
        self._schedule()

    def reserve(self, sid: str, upto: int) -> None:
        """Record that seqs up to ``upto`` of ``sid`` may be handed out (the row must exist)."""
        self._batch.sessions.append((sid, "reserve", upto, None, None))
        self._schedule()

    def delete_session(self, sid: str) -> None:
        self.flush()
        self.committed.pop(sid, None)
        self._fail_cap.pop(sid, None)
        self.epochs.pop(sid, None)
        self.store.write_later(
            lambda c: (
                c.execute("DELETE FROM events WHERE sessionId=?", (sid,)),
                c.execute("DELETE FROM sessions WHERE id=?", (sid,)),
            )
        )

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Hand the gathered rows to the store's writer as one operation."""
        self._scheduled = False
        batch = self._batch
        if not batch.rows and not batch.sessions and not batch.effects:
            return
        self._batch = _Batch()
        if self.epochs:  # several nodes: the pi sessions this node writes for, guarded first
            batch.held = {sid: self.epochs[sid] for sid in batch.sids() if sid in self.epochs}
        if not batch.rows and not batch.sessions and not batch.held:
            self._behind(batch.effects)  # nothing to write: behind the batch in flight, or now
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        ordered = self.store.shared  # one order of the rows' locks on every node (two nodes may write the same)
        fut = self.store.submit(lambda conn: _write(conn, batch, ordered))
        if loop is None:  # shutdown path outside the loop: nothing waits on it
            fut.add_done_callback(lambda f: f.exception())
            return
        done = loop.create_future()
        batch.done = done
        self._tail = batch
        self.inflight_rows += batch.count()
        for sid in batch.maxima:
            self._inflight[sid] = done
        for sid, *_ in batch.sessions:
            self._inflight[sid] = done

        def finished(f: Any) -> None:
            try:
                loop.call_soon_threadsafe(self._finished, batch, f)
            except RuntimeError:  # loop closed during shutdown
                pass

        fut.add_done_callback(finished)

    # --- durable before shown ------------------------------------------------------------------------

    def after_durable(self, sid: str, fn: Callable, *args: Any) -> None:
        """``fn(*args)`` (showing or relaying an event of ``sid``) once every write queued so far has
        committed, in the order asked; never if another node claimed ``sid`` meanwhile (fenced)."""
        self.later(sid, _apply, fn, args, None)

    def later(self, sid: str, fn: Callable, a: Any, b: Any, c: Any) -> None:
        """``after_durable`` of ``fn(a, b, c)``, the hot path's form (an event shown, relayed, translated):
        kept flat in the batch (no tuple, closure or bound method per event: the ingest's garbage
        collector stays idle), the deferred effects of a tick one list run once its batch committed."""
        batch = self._batch
        if batch.rows or batch.sessions or batch.effects or sid in self.epochs:
            batch.effects += (sid, fn, a, b, c)
            if not self._scheduled:
                self._schedule()
            return
        tail = self._tail
        if tail is not None and not tail.over:
            tail.effects += (sid, fn, a, b, c)
            return
        fn(a, b, c)

    def _behind(self, effects: list) -> None:
        tail = self._tail
        if tail is not None and not tail.over:
            tail.effects.extend(effects)
        else:
            _run(effects, ())

    # --- several nodes: a pi session fenced -----------------------------------------------------------

    async def claim(self, sid: str, info: dict) -> int:
        """Take pi session ``sid`` under a new epoch (``fencing.claim``, committed; its row made if it
        is new): from now on only this node's writes for it pass their guard. What was queued for it
        before goes out first, under the epoch it was queued under."""
        self.flush()
        raw = orjson.dumps(info).decode()

        def op(c: Any) -> int:
            c.execute("INSERT INTO sessions(id, info, source) VALUES(?,?,'plugin') ON CONFLICT(id) DO NOTHING",
                      (sid, raw))
            while True:  # a claim that came between the read and the write: read again (the last one wins)
                seen = c.execute("SELECT epoch FROM sessions WHERE id=?", (sid,)).fetchone()[0]
                epoch = fencing.claim(c, SESSIONS, sid, int(seen))
                if epoch is not None:
                    return epoch

        epoch = await self.store.write(op)
        self.epochs[sid] = epoch
        return epoch

    def check(self, sid: str) -> None:
        """Several nodes: another node says it holds ``sid``: a guard now tells whether it claimed it
        from this node (``on_lost``), without waiting for this node's next write for it."""
        if sid in self.epochs:
            self.after_durable(sid, _nothing)

    def _finished(self, batch: _Batch, fut: Any) -> None:
        exc = fut.exception()
        self.inflight_rows -= batch.count()
        batch.over = True
        lost = batch.lost if exc is None else set()
        if exc is None:
            for sid, m in batch.maxima.items():
                if sid not in lost and m[0] > self.committed.get(sid, 0):
                    self.committed[sid] = m[0]
        else:
            self.failures += 1
            log.error("lvmh: writing %d event(s) failed: %s", batch.count(), exc)
            for sid, m in batch.maxima.items():
                cap = m[1] - 1
                self._fail_cap[sid] = min(self._fail_cap.get(sid, cap), cap)
        for sid in list(batch.maxima) + [s[0] for s in batch.sessions]:
            if self._inflight.get(sid) is batch.done:
                del self._inflight[sid]
        if batch.done is not None and not batch.done.done():
            batch.done.set_result(exc is None)
        if lost:
            log.info("lvmh: %d pi session(s) claimed by another node; nothing more is written or shown here",
                     len(lost))
            for sid in lost:
                if self.on_lost is not None:
                    self.on_lost(sid)
        # a failed batch (the store down) shows what it held all the same, as before (its plugin resends)
        _run(batch.effects, lost)
        if self._drained is not None and self.inflight_rows <= BACKLOG_LOW:
            self._drained.set()

    # --- durability queries ----------------------------------------------------------------------

    async def settle(self, sid: str, timeout: float = 10.0) -> None:
        """Wait until the writes queued so far for ``sid`` have committed (or failed)."""
        self.flush()
        fut = self._inflight.get(sid)
        if fut is not None:
            try:
                await asyncio.wait_for(asyncio.shield(fut), timeout)
            except asyncio.TimeoutError:
                log.warning("lvmh: writes of a session still pending after %.0f s", timeout)

    def welcome_seq(self, sid: str) -> int:
        """The highest seq of ``sid`` durably stored with nothing lost below it (clears a failure cap)."""
        last = self.committed.get(sid, 0)
        cap = self._fail_cap.pop(sid, None)
        if cap is not None:
            last = min(last, cap)
        return max(0, last)

    @property
    def backlogged(self) -> bool:
        return self.inflight_rows > BACKLOG_HIGH

    async def drain(self) -> None:
        """Ingest back-pressure: wait while too many rows are queued for the writer."""
        while self.inflight_rows > BACKLOG_LOW:
            if self._drained is None:
                self._drained = asyncio.Event()
            self._drained.clear()
            await self._drained.wait()

    async def aflush(self) -> None:
        self.flush()
        await self.store.aflush()

    # --- reads ---------------------------------------------------------------------------------

    def read(self, sid: str, after: int, limit: int) -> list[str]:
        rows = self.store.query(
            "SELECT payload FROM events WHERE sessionId=? AND seq>? ORDER BY seq LIMIT ?", (sid, after, limit)
        )
        return [r[0] for r in rows]

    def open_tail(self, sid: str, limit: int = 10_000) -> list[str]:
        """The stored events of ``sid`` since its last run boundary (``agent_start`` or
        ``agent_settled``), oldest first: what a restart may have left open."""
        row = self.store.query_one(
            "SELECT seq, type FROM events WHERE sessionId=? AND type IN ('agent_start', 'agent_settled') "
            "ORDER BY seq DESC LIMIT 1", (sid,)
        )
        if row is None:
            after = 0
        else:
            after = int(row[0]) - (1 if row[1] == "agent_start" else 0)
        return self.read(sid, after, limit)

    def open_run(self, sid: str) -> "OpenRun":
        """What the stored events of ``sid`` leave open (a run, its message, tools, decisions)."""
        from .render import OpenRun

        run = OpenRun()
        for raw in self.open_tail(sid):
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and isinstance(obj.get("type"), str):
                run.feed(obj["type"], obj)
        return run

    def run_ended(self, sid: str, run_id: str, last: int = 8) -> bool:
        """Whether the stored events of ``sid`` hold run ``run_id``'s end (among its ``last`` ends)."""
        rows = self.store.query("SELECT payload FROM events WHERE sessionId=? AND type='agent_end' "
                                "ORDER BY seq DESC LIMIT ?", (sid, last))
        for (raw,) in rows:
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if isinstance(obj, dict) and obj.get("runId") == run_id:
                return True
        return False

    def count(self, sid: str) -> int:
        row = self.store.query_one("SELECT COUNT(*) FROM events WHERE sessionId=?", (sid,))
        return int(row[0]) if row else 0


def _row_key(row: tuple) -> tuple:
    return row[0], row[1]


def _last(item: tuple) -> Any:
    return item[-1]


def _nothing() -> None:
    pass


def _apply(fn: Callable, args: tuple, _: Any) -> None:
    fn(*args)


def _run(effects: list, lost: Any) -> None:
    """A batch's deferred effects (flat, ``EFFECT`` items each), in order; those of ``lost`` sessions not."""
    it = iter(effects)
    for sid, fn, a, b, c in zip(it, it, it, it, it):
        if lost and sid in lost:
            continue
        try:
            fn(a, b, c)
        except Exception:  # one bad effect never holds back the others
            log.exception("lvmh: showing an event failed")


def _write(conn: Any, b: _Batch, ordered: bool = False) -> None:
    """One batch, in the store's writer thread: the epochs of the pi sessions it holds guarded first
    (several nodes: their rows locked), nothing written for one another node claimed (``b.lost``).

    ``ordered`` (a shared store, where every node writes a bridge session's rows): one lock order on every node,
    the events' rows by (session, seq), then each session's row once, by id (its own writes, then its maxima),
    the order a deleted conversation's rows go in too. The maxima went in each node's own order of the sessions,
    after writes of the sessions' own before the events: two nodes' batches of the same two sessions could take
    their rows crosswise, one losing a deadlock (a second's wait, then run again: the chaos histories kept hold
    13 such losses, their statements not logged; tests/scale/test_lvmh_lock_order.py)."""
    lost = b.lost = fencing.guard(conn, SESSIONS, b.held) if b.held else set()
    sessions = [s for s in b.sessions if s[0] not in lost] if lost else b.sessions
    if not ordered:
        for session in sessions:
            _session_write(conn, *session)
    if b.rows:
        it = iter(b.rows)
        rows: Any = zip(it, it, it, it, it)  # the rows' tuples made here, in the writer thread
        if lost:
            rows = [r for r in rows if r[0] not in lost]
        if ordered:
            rows = sorted(rows, key=_row_key)
        conn.executemany(_INSERT_EVENTS, rows)
    maxima = [(m[0], m[2], m[3], sid) for sid, m in b.maxima.items() if sid not in lost] if b.rows else []
    if ordered and sessions:  # (rare: a session's own write in the batch) with the maxima, session by session
        _in_one_pass(conn, sessions, maxima)
    elif maxima:
        conn.executemany(_MAXIMA, sorted(maxima, key=_last) if ordered else maxima)


def _session_write(conn: Any, sid: str, kind: str, value: Any, source: Any, online: Any) -> None:
    if kind == "upsert":
        conn.execute(
            "INSERT INTO sessions(id, info, source, online) VALUES(?,?,?,?) "
            "ON CONFLICT(id) DO UPDATE SET info=excluded.info, "
            "online=COALESCE(?, sessions.online)",
            (sid, value, source, int(bool(online)), None if online is None else int(online)),
        )
    elif kind == "online":
        conn.execute("UPDATE sessions SET online=? WHERE id=?", (int(online), sid))
    else:
        conn.execute("UPDATE sessions SET seqReserved=MAX(seqReserved, ?) WHERE id=?", (value, sid))


def _in_one_pass(conn: Any, sessions: list, maxima: list) -> None:
    """Each session's own writes (in their order), then its maxima, session after session by id."""
    writes: dict = {}
    for session in sessions:
        writes.setdefault(session[0], []).append(session)
    tops = {m[3]: m for m in maxima}
    for sid in sorted(writes.keys() | tops.keys()):
        for session in writes.get(sid, ()):
            _session_write(conn, *session)
        if sid in tops:
            conn.execute(_MAXIMA, tops[sid])


__all__ = ["EventLog", "MIGRATIONS", "StoredSession"]
