"""The SQLite store: one file in the data directory (WAL), the embedded default.

It is the store interface's engine for one node (``store.BaseStore``: the writer thread,
batched commits, the durability barrier); a shared PostgreSQL is the other
(``bridge_core/scale/pgstore.py``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from typing import Any, Optional

from .private import open_private, private_dir
from .store import BaseStore

log = logging.getLogger("agent_bridge.store")

# SQLite (Store): how often the checkpointer thread copies the WAL into the database while writes go on (each
# complete checkpoint makes the next commit start the WAL over, which syncs the new WAL header: one fsync in
# the writer's path per checkpoint, so not more often than this), and the WAL length (pages; SQLite's default
# autocheckpoint is 1,000) past which the writer checkpoints itself
CHECKPOINT_EVERY = 5.0
WAL_MAX_FRAMES = 16384


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
