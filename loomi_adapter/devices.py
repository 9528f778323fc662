"""Paired devices, pairing tokens, per-device seq and the durable replay window.

Security: tokens and credentials exist in clear only in the frame that
carries them; the store keeps their SHA-256, compared in constant time.

Seq and replay (docs/loomi.md, "Seq across restarts"): numbering and the
window themselves are pure (replay.SeqLog, numbered by replay.Numbering,
the rule several nodes share: cluster.py); this registry makes them
durable without a write per event on the loop's critical path, and without
ever waiting for the disk:

- each device row holds ``seq_reserved``, an upper bound of every seq the
  device was ever given; when a device's seq comes within half a block of
  it, the next block is reserved with one queued write;
- each event is stored ONCE, whatever the number of devices: a row of
  ``loomi_events`` (its number ``n`` and its body without the seq), and for
  each device a row of ``loomi_segments`` only when the device's offset
  ``seq - n`` changed (a reply or a restart took seqs in between), so a
  device's frame of event ``n`` is rebuilt exactly as it was sent. The rows
  of one loop tick form one write (``rows.RowBatch``); old events and
  superseded segments are pruned now and then, keeping the newest
  ``window + 1`` events (the one before a device's window gives its floor).

Both are made durable *before* the frame that carries the seq leaves: the
reservation is a store write queued half a block ahead, behind no frame, and
the first frame above the block recorded before it leaves only once it
committed (the store's durability barrier, ``Store.synced``: ``_reserve``); the
rows are appended to the journal (journal.py) on the loop, and reach the
database when a journal file is half full (only the newest window's rows),
behind no frame. Whatever a device
received, the database or the journal knows (its seq is reserved, its event
is kept), so a ``kill -9`` never makes a seq repeat or a sent event vanish
from the replay. Without a journal (it could not be written) the rows are a
store write of their own, behind the barrier.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import os
import secrets
import sqlite3
import time
from typing import Any, Callable, Optional

from bridge_core.model.ids import new_id
from bridge_core.kit.security import same_secret
from bridge_core.model.redact import fingerprint
from bridge_core.model.seqalloc import SeqReservation
from bridge_core.bridge.store import BaseStore

from . import codec
from .idempotency import RequestCache
from .journal import Journal
from .replay import Numbering, SeqLog, frames_of, restored
from .rows import RowBatch, RowQueue

log = logging.getLogger("agent_bridge.loomi.devices")

SEQ_BLOCK = 4096
IDEMPOTENCY_KEEP = 256
MAX_PENDING_TOKENS = 100
MAX_TTL = 86400.0
PRUNE_EVERY = 64  # events between two prunes of old events and superseded segments

MIGRATIONS = [
    """
    CREATE TABLE loomi_devices(
        device_id TEXT PRIMARY KEY,
        credential_hash TEXT NOT NULL,
        name TEXT,
        model TEXT,
        os TEXT,
        app_version TEXT,
        paired_at REAL NOT NULL,
        last_seen REAL,
        seq_reserved INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE loomi_pair_tokens(
        token_hash TEXT PRIMARY KEY,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    );
    """,
    # 2: the replay window in the database. replay_floor: every event at or below it is gone
    # (-1: a device from before these tables, whose window was in memory: all of its past is gone)
    """
    ALTER TABLE loomi_devices ADD COLUMN replay_floor INTEGER NOT NULL DEFAULT -1;
    CREATE TABLE loomi_events(
        n INTEGER PRIMARY KEY,
        body BLOB NOT NULL
    );
    CREATE TABLE loomi_segments(
        device_id TEXT NOT NULL,
        from_n INTEGER NOT NULL,
        seq_offset INTEGER NOT NULL,
        PRIMARY KEY(device_id, from_n)
    ) WITHOUT ROWID;
    """,
    # 3: several nodes (cluster.py, docs/loomi.md "Several nodes"): each process's frames, and each
    # device's numbering as epochs (one per hello) of spans over them
    """
    ALTER TABLE loomi_devices ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE loomi_frames(
        source TEXT NOT NULL,
        m INTEGER NOT NULL,
        n INTEGER NOT NULL,
        body BLOB NOT NULL,
        PRIMARY KEY(source, m)
    ) WITHOUT ROWID;
    CREATE TABLE loomi_sources(
        source TEXT PRIMARY KEY,
        node TEXT NOT NULL,
        kept_from_n INTEGER NOT NULL
    );
    CREATE TABLE loomi_epochs(
        device_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        start_n INTEGER NOT NULL,
        base_seq INTEGER NOT NULL,
        reply_seq INTEGER NOT NULL DEFAULT 0,
        last_seq INTEGER,
        PRIMARY KEY(device_id, epoch)
    ) WITHOUT ROWID;
    CREATE TABLE loomi_spans(
        device_id TEXT NOT NULL,
        epoch INTEGER NOT NULL,
        source TEXT NOT NULL,
        from_m INTEGER NOT NULL,
        to_m INTEGER,
        seq_offset INTEGER NOT NULL,
        PRIMARY KEY(device_id, epoch, source, from_m)
    ) WITHOUT ROWID;
    """,
    # 4: where a source's frames of a streaming message stood, now and then (runtexts.py ``marks``): the text
    # its deltas up to the one of time ``ts`` made, ``upto`` long. A node that rendered none of them counts
    # from it what went out where the rows no longer hold the run's start (journal.py ``stored_run_text``)
    """
    CREATE TABLE loomi_marks(
        source TEXT NOT NULL,
        message_id TEXT NOT NULL,
        run_id TEXT NOT NULL,
        upto INTEGER NOT NULL,
        ts REAL NOT NULL,
        PRIMARY KEY(source, message_id)
    ) WITHOUT ROWID;
    """,
]

_DEVICE_COLUMNS = ("device_id, credential_hash, name, model, os, app_version, paired_at, last_seen, seq_reserved, "
                   "replay_floor")
_DUMMY_HASH = hashlib.sha256(b"no such device").hexdigest()
def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Device:
    """A paired device: identity, its seq log (counter + replay window) and request memory."""

    # slots: the fan-out reads a few of these per device per event (replay.Numbering)
    __slots__ = ("device_id", "credential_hash", "name", "model", "os", "app_version", "paired_at", "last_seen",
                 "log", "seqs", "reserving", "offset", "epoch", "skip_to", "stored_epoch", "stored_reserved", "conn",
                 "requests")

    def __init__(self, device_id: str, credential_hash: str, *, name=None, model=None, os=None,
                 app_version=None, paired_at: float = 0.0, last_seen: Optional[float] = None,
                 log_: Optional[SeqLog] = None, reserved: int = 0, block: int = SEQ_BLOCK):
        self.device_id = device_id
        self.credential_hash = credential_hash
        self.name = name
        self.model = model
        self.os = os
        self.app_version = app_version
        self.paired_at = paired_at
        self.last_seen = last_seen
        self.log = log_ if log_ is not None else SeqLog()
        # the highest seq reservation queued (durable before a frame above the block recorded before it
        # leaves: Registry._reserve); the shared rule
        self.seqs = SeqReservation(block, reserved)
        # the next block's write queued behind no frame, and the reservation recorded before it (_reserve)
        self.reserving: Optional[tuple[int, int]] = None
        self.offset: Optional[int] = None  # seq - frame number of its last mark (replay.Numbering)
        # several nodes (cluster.py): the epoch this node numbers it in, the last event numbered for it
        # elsewhere (skipped here), and its row as last read
        self.epoch = 0
        self.skip_to = -1
        self.stored_epoch = 0
        self.stored_reserved = 0
        self.conn: Any = None  # the live connection (server.Connection), if any
        self.requests = RequestCache(IDEMPOTENCY_KEEP)  # (type, request_id) -> in flight or its result

    @property
    def seq(self) -> int:
        """The last seq given out."""
        return self.log.seq

    def as_dict(self) -> dict:
        return {
            "device_id": self.device_id,
            "name": self.name,
            "model": self.model,
            "os": self.os,
            "app_version": self.app_version,
            "paired_at": self.paired_at,
            "last_seen": self.last_seen,
            "online": self.conn is not None,
        }


class Registry:
    def __init__(self, store: BaseStore, *, block: int = SEQ_BLOCK, window: int = codec.REPLAY_WINDOW):
        self.store = store
        self.block = block
        self.window = window
        self.devices: dict[str, Device] = {}
        self._tokens: dict[str, float] = {}  # token hash -> expires_at
        # the one seq rule (replay.py): one node numbers every paired device, connected or not
        self.numbering = Numbering(self.devices, self._reserve, live_only=True)
        self._rows = RowQueue(store.write_later)  # the replay rows' open write (without a journal)
        self._jbatch: Optional[RowBatch] = None  # the journaled rows not yet handed to the store
        self._pruned_at = 0
        # the replay rows' journal (an embedded store's directory only)
        self.journal: Optional[Journal] = None
        self._rows_failed = False  # a journaled batch did not commit: its rows stay in the journal until a start
        # called before the journal moves to its next file: the core's streaming drafts saved then (queued
        # before the batch that prunes the rows they go on from: journal.py ``Journal.drafts_from``)
        self.before_move: Optional[Callable[[], None]] = None
        self.drafts_from: Optional[int] = None  # the journal's, as recovered at start (stored_run_text)

    # --- lifecycle ------------------------------------------------------------

    async def prepare(self) -> None:
        await self.store.amigrate("loomi", MIGRATIONS)  # never blocks the loop on the writer thread
        if self.store.local_dir and not self.store.shared:
            journal = Journal(self.store.local_dir)
            events, segments = journal.recover()  # what a crash left before it reached the database
            self.drafts_from = journal.drafts_from
            if events or segments:
                b = RowBatch()
                b.extend(events, segments)
                await self.store.write(b)
                log.info("replay rows of %d events recovered from the journal", len(events))
            if journal.open():
                self.journal = journal
        now = time.time()
        events = [(n, bytes(b)) for n, b in self.store.query("SELECT n, body FROM loomi_events ORDER BY n")]
        self.numbering.k = self._pruned_at = events[-1][0] if events else 0
        segments: dict[str, list[tuple[int, int]]] = collections.defaultdict(list)
        for did, from_n, off in self.store.query(
                "SELECT device_id, from_n, seq_offset FROM loomi_segments ORDER BY device_id, from_n"):
            segments[did].append((from_n, off))
        floors = []
        for row in self.store.query(f"SELECT {_DEVICE_COLUMNS} FROM loomi_devices"):
            did, chash, name, model, os_, app, paired, seen, reserved, floor = row
            if floor < 0:  # its window was in memory only: everything it was given is gone
                floor = reserved
                floors.append((floor, did))
            self.devices[did] = Device(did, chash, name=name, model=model, os=os_, app_version=app,
                                       paired_at=paired, last_seen=seen, reserved=reserved, block=self.block,
                                       log_=restored(frames_of(events, segments.get(did, [])), reserved, floor,
                                                    self.window))
        for h, exp in self.store.query("SELECT token_hash, expires_at FROM loomi_pair_tokens"):
            if exp > now:
                self._tokens[h] = exp
        # reserve a fresh block for every device before the first event; drop dead tokens and rows
        rows = []
        for d in self.devices.values():
            rows.append((d.seqs.restart(d.seq), d.device_id))

        def write(c: sqlite3.Connection) -> None:
            c.executemany("UPDATE loomi_devices SET seq_reserved=? WHERE device_id=?", rows)
            c.executemany("UPDATE loomi_devices SET replay_floor=? WHERE device_id=?", floors)
            c.execute("DELETE FROM loomi_pair_tokens WHERE expires_at <= ?", (now,))
            c.execute("DELETE FROM loomi_segments WHERE device_id NOT IN (SELECT device_id FROM loomi_devices)")
            # one node again after several (cluster.py): the devices' seq_reserved bounds what they were
            # given; what the nodes kept for replay is not this registry's (docs/loomi.md "Several nodes")
            for table in ("loomi_spans", "loomi_epochs", "loomi_frames", "loomi_sources"):
                c.execute(f"DELETE FROM {table}")

        await self.store.write(write)

    async def persist_exact(self) -> None:
        """Clean shutdown: store each device's exact seq (nothing above it was given out), and the
        journaled rows (the journal is then empty)."""
        await self.flush_rows()
        rows = [(d.seq, d.device_id) for d in self.devices.values()]
        if rows:
            await self.store.write(lambda c: c.executemany(
                "UPDATE loomi_devices SET seq_reserved=? WHERE device_id=?", rows))
        if self.journal is not None:
            if self._rows_failed:  # its rows are for the next start
                self.journal.close()
            else:
                self.journal.remove()
            self.journal = None

    async def flush_rows(self) -> None:
        """Commit the journaled replay rows now (tests that read the tables, shutdown)."""
        fut = self._submit_rows()
        if fut is not None:
            await asyncio.wrap_future(fut)

    # --- seq and the window ----------------------------------------------------------

    @property
    def event_no(self) -> int:
        """The number of the last event stored."""
        return self.numbering.k

    def passed_gone(self, lost: list, closing: list) -> None:
        """Events gone for good passed over (server.py ``_gone``): one node numbers from its own rows, which
        have no holes, so nothing is skipped here; several nodes skip the window (cluster.py)."""

    def next_seq(self, d: Device) -> int:
        """A seq for a frame that is not replayed (replies, pings)."""
        return self.numbering.next_seq(d)

    def wants(self, n: int) -> bool:
        """Whether event ``n`` is numbered at all (one node: while any device is paired)."""
        return bool(self.devices)

    def record(self, tails: list[bytes], n: int = 0) -> list[tuple[Device, bytes]]:
        """An event (its bodies without their ``{``) for every device: each device's frames (its
        next seqs spliced in), kept in its window and, before any frame is queued, in the store."""
        if not self.devices:
            return []
        n0, marks, out = self.numbering.record(tails, n)
        n = n0 + len(tails)
        prune = None
        if n - self._pruned_at >= PRUNE_EVERY:
            self._pruned_at = n
            prune = n - self.window  # keeps the newest window + 1 events
        segments = [(d.device_id, k, off) for d, k, off in marks] if marks else marks
        self._store_rows([(n, tails[0])] if n == n0 + 1 else [(n0 + i + 1, t) for i, t in enumerate(tails)],
                         segments, prune)
        return out

    def _store_rows(self, events: list[tuple], segments: list[tuple], prune: Optional[int]) -> None:
        journal = self.journal
        stored = journal.append(events, segments) if journal is not None else False
        if stored:
            # durable now: the batch is the loop's until _submit_rows hands it to the store, behind no frame,
            # when the journal moves to its next file (or at shutdown). Only the newest window + 1 events' rows
            # are kept for it: what a restart reads back (the older ones' frames are out of every window)
            b = self._jbatch
            if b is None:  # record() runs on the loop (the hub's fan-out)
                b = self._jbatch = RowBatch(keep=self.window + 1)
            if segments or prune is not None:
                b.extend(events, segments, prune)
            else:  # the common record (an event's rows only): RowBatch.extend's one step
                b.events.extend(events)
            if stored is not True and journal.due():  # journal.HALF: the file half full (True: not due)
                self._submit_rows()
            return
        if self._jbatch is not None:  # no room in the journal: what it took goes to the store first
            self._submit_rows()
        self._rows.add(events, segments, prune)

    def _submit_rows(self) -> Any:
        """Hand the journaled rows' batch to the store (its future; None without one)."""
        b = self._jbatch
        journal = self.journal
        if b is None or journal is None:
            return None
        self._jbatch = None
        if self.before_move is not None:  # before rotate, whether it moves or not (its readiness is a thread's)
            self.before_move()
        full = journal.rotate()  # every row of a full file still in a window is in this batch or an earlier one
        fut = self.store.submit(b, barrier=False)
        fut.add_done_callback(lambda f: self._rows_done(f, full))
        return fut

    def _rows_done(self, fut: Any, full: Optional[str]) -> None:
        """In the store's writer thread: a journaled batch committed (a full file may go) or failed."""
        exc = fut.exception()
        if exc is not None:
            self._rows_failed = True
            log.error("replay rows not stored (%s): kept in the journal until the next start", exc)
        elif full is not None and not self._rows_failed:
            Journal.drop(full)

    def resume(self, d: Device, last_seq: Optional[int]):
        """``replay.Resume`` for a hello with ``last_seq``; reserves seqs when it moved the numbering."""
        res = d.log.resume(last_seq)
        if d.seq > d.seqs.limit:
            self._reserve(d)
        return res

    def detach(self, d: Device) -> None:
        """``d``'s socket closed (the embedded registry numbers every device, connected or not)."""

    def check(self, d: Device) -> Optional[str]:
        """At a heartbeat: whether ``d`` was revoked or taken by another node (only with several nodes)."""
        return None

    def _reserve(self, d: Device) -> None:
        """Queue the next block, half a block ahead, behind no frame; never waits. The frames up to the
        block recorded before need not wait for it; at the first seq above that one, if its write has
        not committed yet, every frame queued from then on waits for it (the durability barrier)."""
        seqs = d.seqs
        store = self.store
        pending = d.reserving
        if pending is not None and d.seq > pending[1]:
            d.reserving = None
            seqs.unwatch()
            if store.processed < pending[0]:
                store.hold_from(pending[0])
        covered = seqs.reserved  # recorded: committed, or every frame above the block before it waits for it
        target = seqs.need(d.seq)
        if target is None:
            return
        store.execute_later(*self._reserve_sql(d, target), barrier=False)
        number = store.submitted  # this write's (or a later one's, if another thread queued meanwhile)
        if d.seq > covered:  # the numbering moved past the recorded block at once (a resume): wait now
            store.hold_from(number)
        else:
            d.reserving = (number, covered)
            seqs.watch(covered)

    def _reserve_sql(self, d: Device, target: int) -> tuple[str, tuple]:
        """The statement recording ``d``'s next seq block (several nodes fence it: cluster.py)."""
        return "UPDATE loomi_devices SET seq_reserved=MAX(seq_reserved, ?) WHERE device_id=?", (target, d.device_id)

# --- pairing tokens -----------------------------------------------------------

    async def create_token(self, ttl: float) -> tuple[str, float]:
        ttl = min(float(ttl), MAX_TTL)
        now = time.time()
        for h, exp in list(self._tokens.items()):
            if exp <= now:
                del self._tokens[h]
        while len(self._tokens) >= MAX_PENDING_TOKENS:
            oldest = min(self._tokens, key=self._tokens.__getitem__)
            del self._tokens[oldest]
            self.store.execute_later("DELETE FROM loomi_pair_tokens WHERE token_hash=?", (oldest,))
        token = secrets.token_urlsafe(32)
        h = hash_secret(token)
        expires = now + ttl
        await self.store.write(lambda c: c.execute(
            "INSERT INTO loomi_pair_tokens(token_hash, created_at, expires_at) VALUES(?,?,?)", (h, now, expires)))
        self._tokens[h] = expires
        log.info("pairing token %s issued, valid %.0f s", fingerprint(token), ttl)
        return token, expires

    async def take_token(self, token: str) -> bool:
        """``consume_token`` for the hello (with several nodes, the store decides: cluster.py)."""
        return self.consume_token(token)

    def consume_token(self, token: str) -> bool:
        """Single use: the first caller takes it (synchronously), everyone else fails."""
        h = hash_secret(token)
        expires = self._tokens.pop(h, None)
        if expires is None:
            return False
        self.store.execute_later("DELETE FROM loomi_pair_tokens WHERE token_hash=?", (h,))
        return expires > time.time()

    # --- devices ----------------------------------------------------------------------

    async def pair(self, info: codec.DeviceInfo) -> tuple[Device, str]:
        """A new device; returns it and its credential (the only time it exists in clear)."""
        credential = secrets.token_urlsafe(32)
        now = time.time()
        d = Device(new_id(), hash_secret(credential), name=info.name or info.model, model=info.model,
                   os=info.os, app_version=info.app_version, paired_at=now, last_seen=now,
                   reserved=self.block, block=self.block, log_=SeqLog(size=self.window))
        await self.store.write(lambda c: c.execute(
            f"INSERT INTO loomi_devices({_DEVICE_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?,?)",
            (d.device_id, d.credential_hash, d.name, d.model, d.os, d.app_version, d.paired_at, d.last_seen,
             d.seqs.reserved, 0),
        ))
        self.devices[d.device_id] = d
        return d, credential

    def authenticate(self, device_id: str, credential: str) -> Optional[Device]:
        d = self.devices.get(device_id)
        h = hash_secret(credential)
        if d is None:
            same_secret(h, _DUMMY_HASH)
            return None
        return d if same_secret(h, d.credential_hash) else None

    def seen(self, d: Device, info: Optional[codec.DeviceInfo] = None) -> None:
        d.last_seen = time.time()
        if info is not None and (info.model or info.os or info.app_version or info.name):
            d.model = info.model or d.model
            d.os = info.os or d.os
            d.app_version = info.app_version or d.app_version
            d.name = info.name or d.name or info.model
        # bookkeeping for `loomi devices`, shown in no frame: behind no frame either (hello.ok and the replay
        # that follows it do not wait for its commit)
        self.store.execute_later(
            "UPDATE loomi_devices SET last_seen=?, name=?, model=?, os=?, app_version=? WHERE device_id=?",
            (d.last_seen, d.name, d.model, d.os, d.app_version, d.device_id), barrier=False,
        )

    async def revoke(self, device_id: str) -> Optional[Device]:
        d = self.devices.pop(device_id, None)
        if d is not None:
            self._submit_rows()  # its journaled rows first: the delete comes after them

            def write(c: sqlite3.Connection) -> None:
                c.execute("DELETE FROM loomi_devices WHERE device_id=?", (device_id,))
                c.execute("DELETE FROM loomi_segments WHERE device_id=?", (device_id,))

            await self.store.write(write)
        return d

    def list(self) -> list[dict]:
        return sorted((d.as_dict() for d in self.devices.values()), key=lambda x: x["paired_at"])

    def device_ids(self) -> list[str]:
        """Every paired device's id (push drops what it holds for any other: revocation.py)."""
        return list(self.devices)


# --- the CLI's fallback when no server is running ------------------------------------


def _offline_connect(data_dir: str) -> Optional[sqlite3.Connection]:
    path = os.path.join(data_dir, "bridge.db")
    if not os.path.exists(path):
        return None
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout=30000")
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='loomi_devices'").fetchone()
    if not exists:
        conn.close()
        return None
    return conn


def offline_list(data_dir: str) -> list[dict]:
    conn = _offline_connect(data_dir)
    if conn is None:
        return []
    try:
        rows = conn.execute(
            "SELECT device_id, name, model, os, app_version, paired_at, last_seen FROM loomi_devices ORDER BY paired_at"
        ).fetchall()
    finally:
        conn.close()
    keys = ("device_id", "name", "model", "os", "app_version", "paired_at", "last_seen")
    return [dict(zip(keys, r), online=False) for r in rows]
