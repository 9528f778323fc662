"""Paired devices, pairing tokens, per-device seq and the replay window.

Security: tokens and credentials exist in clear only in the frame that
carries them; the store keeps their SHA-256, compared in constant time.

Seq persistence without a write per event: each device row holds
``seq_reserved``, an upper bound of every seq the device was ever given.
Numbers are handed out from memory; when a device's seq comes within half a
block of its reservation, the next block is reserved with one queued write
(the store's writer batches it). Only if a burst outruns that write does
``next_seq`` wait for its commit. A clean shutdown stores the exact seq; after
a crash the device continues above the reserved block. Either way the replay
window (memory only) is lost, so a ``last_seq`` below the restart point gets
``truncated: true``.
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import logging
import os
import secrets
import sqlite3
import time
from typing import Any, Optional

from bridge_core.ids import new_id
from bridge_core.redact import fingerprint
from bridge_core.store import Store

from . import codec

log = logging.getLogger("agent_bridge.loomi.devices")

SEQ_BLOCK = 4096
IDEMPOTENCY_KEEP = 256
MAX_PENDING_TOKENS = 100
MAX_TTL = 86400.0

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
]

_DEVICE_COLUMNS = "device_id, credential_hash, name, model, os, app_version, paired_at, last_seen, seq_reserved"
_DUMMY_HASH = hashlib.sha256(b"no such device").hexdigest()


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


class Device:
    """A paired device: identity, its seq counter, replay window and request memory."""

    def __init__(self, device_id: str, credential_hash: str, *, name=None, model=None, os=None,
                 app_version=None, paired_at: float = 0.0, last_seen: Optional[float] = None,
                 seq: int = 0, reserved: int = 0, window: int = codec.REPLAY_WINDOW):
        self.device_id = device_id
        self.credential_hash = credential_hash
        self.name = name
        self.model = model
        self.os = os
        self.app_version = app_version
        self.paired_at = paired_at
        self.last_seen = last_seen
        self.seq = seq  # the last seq given out
        self.reserved = reserved  # committed upper bound of seq
        self.limit = reserved  # above this seq, Registry.advance must run (set by the registry)
        self.floor = seq  # every replayable frame with seq <= floor is gone
        # (seq, frame) of the last events, appended by the server's fan-out (which updates floor)
        self.window: collections.deque[tuple[int, bytes]] = collections.deque(maxlen=window)
        self.conn: Any = None  # the live connection (server.Connection), if any
        self.requests: collections.OrderedDict = collections.OrderedDict()
        self._pending: Any = None  # concurrent.futures.Future of a block reservation
        self._pending_target = 0
        self._store_failed = False

    def replay(self, last_seq: Optional[int]) -> tuple[list[bytes], bool]:
        """Frames after ``last_seq`` (marked replayed), and whether the gap was truncated."""
        if last_seq is None:
            return [], False
        if last_seq > self.seq:  # a seq this server never gave: its state was lost
            return [], True
        frames = [codec.mark_replayed(f) for s, f in self.window if s > last_seq]
        return frames, last_seq < self.floor

    def remember(self, key: Any, value: Any) -> None:
        self.requests[key] = value
        self.requests.move_to_end(key)
        while len(self.requests) > IDEMPOTENCY_KEEP:
            self.requests.popitem(last=False)

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
    def __init__(self, store: Store, *, block: int = SEQ_BLOCK, window: int = codec.REPLAY_WINDOW):
        self.store = store
        self.block = block
        self.window = window
        self.devices: dict[str, Device] = {}
        self._tokens: dict[str, float] = {}  # token hash -> expires_at

    # --- lifecycle ------------------------------------------------------------

    async def prepare(self) -> None:
        self.store.migrate("loomi", MIGRATIONS)
        now = time.time()
        for row in self.store.query(f"SELECT {_DEVICE_COLUMNS} FROM loomi_devices"):
            did, chash, name, model, os_, app, paired, seen, reserved = row
            self.devices[did] = Device(did, chash, name=name, model=model, os=os_, app_version=app,
                                       paired_at=paired, last_seen=seen, seq=reserved, reserved=reserved,
                                       window=self.window)
        for h, exp in self.store.query("SELECT token_hash, expires_at FROM loomi_pair_tokens"):
            if exp > now:
                self._tokens[h] = exp
        # reserve a fresh block for every device before the first event; drop dead tokens
        rows = []
        for d in self.devices.values():
            d.reserved = d.seq + self.block
            self._relimit(d)
            rows.append((d.reserved, d.device_id))

        def write(c: sqlite3.Connection) -> None:
            c.executemany("UPDATE loomi_devices SET seq_reserved=? WHERE device_id=?", rows)
            c.execute("DELETE FROM loomi_pair_tokens WHERE expires_at <= ?", (now,))

        await self.store.write(write)

    async def persist_exact(self) -> None:
        """Clean shutdown: store each device's exact seq (nothing above it was given out)."""
        for d in self.devices.values():
            if d._pending is not None:
                try:
                    d._pending.result(timeout=10)
                except Exception:
                    pass
        rows = [(d.seq, d.device_id) for d in self.devices.values()]
        if rows:
            await self.store.write(lambda c: c.executemany(
                "UPDATE loomi_devices SET seq_reserved=? WHERE device_id=?", rows))

    # --- seq --------------------------------------------------------------------

    def next_seq(self, d: Device) -> int:
        s = d.seq + 1
        d.seq = s
        if s > d.limit:
            self.advance(d)
        return s

    def advance(self, d: Device) -> None:
        """The slow path of ``next_seq`` (``d.seq`` is past ``d.limit``): settle or reserve a block."""
        s = d.seq
        if d._pending is not None and d._pending.done():
            self._settle(d)
        if s > d.reserved:
            self._reserve_now(d)
        elif d._pending is None and s > d.reserved - self.block // 2:
            self._reserve(d)
        self._relimit(d)

    def _relimit(self, d: Device) -> None:
        d.limit = d.reserved if d._pending is not None else d.reserved - self.block // 2

    def _reserve(self, d: Device) -> None:
        target = max(d.reserved, d.seq) + self.block
        did = d.device_id
        d._pending_target = target
        d._pending = self.store.submit(
            lambda c: c.execute(
                "UPDATE loomi_devices SET seq_reserved=MAX(seq_reserved, ?) WHERE device_id=?", (target, did)
            )
        )

    def _settle(self, d: Device) -> None:
        fut, d._pending = d._pending, None
        exc = fut.exception()
        if exc is None:
            d.reserved = max(d.reserved, d._pending_target)
            d._store_failed = False
        elif not d._store_failed:
            d._store_failed = True
            log.error("could not reserve seq numbers for device %s: %s", d.device_id, exc)

    def _reserve_now(self, d: Device) -> None:
        """A burst outran the reservation: wait for its commit (rare, one small transaction)."""
        if d._pending is None:
            self._reserve(d)
        try:
            d._pending.result(timeout=30)
        except Exception:
            pass
        self._settle(d)
        if d.seq > d.reserved:  # the store is gone (shutdown): keep numbering in memory
            d.reserved = d.seq

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
                   seq=0, reserved=self.block, window=self.window)
        await self.store.write(lambda c: c.execute(
            f"INSERT INTO loomi_devices({_DEVICE_COLUMNS}) VALUES(?,?,?,?,?,?,?,?,?)",
            (d.device_id, d.credential_hash, d.name, d.model, d.os, d.app_version, d.paired_at, d.last_seen,
             d.reserved),
        ))
        self._relimit(d)
        self.devices[d.device_id] = d
        return d, credential

    def authenticate(self, device_id: str, credential: str) -> Optional[Device]:
        d = self.devices.get(device_id)
        h = hash_secret(credential)
        if d is None:
            hmac.compare_digest(h, _DUMMY_HASH)
            return None
        return d if hmac.compare_digest(h, d.credential_hash) else None

    def seen(self, d: Device, info: Optional[codec.DeviceInfo] = None) -> None:
        d.last_seen = time.time()
        if info is not None and (info.model or info.os or info.app_version or info.name):
            d.model = info.model or d.model
            d.os = info.os or d.os
            d.app_version = info.app_version or d.app_version
            d.name = info.name or d.name or info.model
        self.store.execute_later(
            "UPDATE loomi_devices SET last_seen=?, name=?, model=?, os=?, app_version=? WHERE device_id=?",
            (d.last_seen, d.name, d.model, d.os, d.app_version, d.device_id),
        )

    async def revoke(self, device_id: str) -> Optional[Device]:
        d = self.devices.pop(device_id, None)
        if d is not None:
            await self.store.write(lambda c: c.execute("DELETE FROM loomi_devices WHERE device_id=?", (device_id,)))
        return d

    def list(self) -> list[dict]:
        return sorted((d.as_dict() for d in self.devices.values()), key=lambda x: x["paired_at"])


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


def offline_revoke(data_dir: str, device_id: str) -> bool:
    conn = _offline_connect(data_dir)
    if conn is None:
        return False
    try:
        cur = conn.execute("DELETE FROM loomi_devices WHERE device_id=?", (device_id,))
        return cur.rowcount > 0
    finally:
        conn.close()
