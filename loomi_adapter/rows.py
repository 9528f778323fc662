"""The replay rows as store writes: one batch per loop tick, whatever the number of events (no I/O here:
the batch is a function of a database connection, run by the store's writer thread).

The rows are what ``replay.Numbering`` numbered: each frame body the node stores once, and the marks
where a device's offset changed. One node keeps them as ``loomi_events`` and ``loomi_segments``
(devices.py); several nodes as ``loomi_frames`` and ``loomi_spans`` (cluster.py). Both queue them
through ``RowQueue``, the one place of the rule that a new batch holds its first rows before it is
queued (a writer thread taking it at once would otherwise commit it empty and lose them).
"""

from __future__ import annotations

import collections
import itertools
import sqlite3
import threading
import time
from typing import Any, Callable, Optional


def _values(head: str, width: int, big: int) -> dict[int, str]:
    """``head`` with k rows of ``width`` values, for each size ``event_chunks(.., big)`` gives: a batch's rows
    in a few statements, not one per row (each step of the store's writer thread gives the GIL to the loop and
    waits to get it back; executemany runs the statement once per row in PostgreSQL). 33 texts cached."""
    row = "(" + ",".join("?" * width) + ")"
    return {k: head + " VALUES" + ",".join([row] * k) for k in (*range(1, 33), big)}


_EVENTS_SQL = _values("INSERT OR REPLACE INTO loomi_events(n, body)", 2, 256)
_SEGMENT_SQL = "INSERT OR REPLACE INTO loomi_segments(device_id, from_n, seq_offset) VALUES(?,?,?)"
_PRUNE_SQL = (
    "DELETE FROM loomi_events WHERE n < ?1;"
    # a segment is superseded once a later one of its device starts at or below the oldest event kept
    "DELETE FROM loomi_segments WHERE from_n < ?1 AND EXISTS (SELECT 1 FROM loomi_segments t"
    " WHERE t.device_id = loomi_segments.device_id AND t.from_n > loomi_segments.from_n AND t.from_n <= ?1)"
)


ROWS_BIG = 128  # rows in a batch's largest insert of frames or marks (4 or 5 values each: 640 at most)
_FRAMES_SQL = _values("INSERT OR IGNORE INTO loomi_frames(source, m, n, body)", 4, ROWS_BIG)
SPAN_SQL = ("INSERT OR REPLACE INTO loomi_spans(device_id, epoch, source, from_m, to_m, seq_offset) "
            "VALUES(?,?,?,?,?,?)")


_MARK_SQL = "INSERT OR REPLACE INTO loomi_marks(source, message_id, run_id, upto, ts) VALUES(?,?,?,?,?)"
_MARKS_SQL = _values("INSERT OR REPLACE INTO loomi_marks(source, message_id, run_id, upto, ts)", 5, ROWS_BIG)


MARK_KEEP = 600.0  # s a mark is kept past its source's rows (the runs a restart closes later: ``mark_sql``)


def mark_sql(source: str, marks: list[tuple], kept_ts: float, sweep: bool = True,
             now: Optional[float] = None) -> list[tuple[str, tuple]]:
    """The statements of a prune that keep the marks of ``source`` (runtexts.py ``marks``: message id, run id,
    upto, ts) beside its frames: the new ones, and (``sweep``) none older than its oldest frame kept
    (``kept_ts``) and ``MARK_KEEP`` s, nor of a source gone. A mark older than the rows is the last one of its
    message (a source gives a new one before a prune deletes the delta of one that moved since): what went out
    of it, counted by a node closing the run later (journal.py ``stored_run_text``; chaos seed 3310, swept with
    the rows, a filler given twice). The deletes bound the table: one each ``SWEEP_EVERY`` prunes
    (loomi_adapter/cluster.py; at every prune, 50,000 rows fetched in a 3-node scale bench: docs/performance.md)."""
    out = [(_MARK_SQL, (source, *mark)) for mark in marks]
    if sweep:
        old = min(kept_ts, (time.time() if now is None else now) - MARK_KEEP)
        out.append(("DELETE FROM loomi_marks WHERE source=? AND ts<?", (source, old)))
        out.append(("DELETE FROM loomi_marks WHERE source NOT IN (SELECT source FROM loomi_sources)", ()))
    return out


def event_chunks(k: int, big: int = 256) -> list[int]:
    """How many rows each insert of a batch of ``k`` takes (sizes that have a statement: 1 to 32, ``big``)."""
    out = [big] * (k // big)
    k %= big
    out += [32] * (k // 32)
    return out + [k % 32] if k % 32 else out


def write_node_rows(c: sqlite3.Connection, b: "RowBatch") -> None:
    """One node's tables: the events, the segments, then the prune (a batch may hold rows it prunes)."""
    insert_rows(c, _EVENTS_SQL, list(b.events))
    if b.segments:
        c.executemany(_SEGMENT_SQL, b.segments)
    if b.prune is not None:
        for stmt in _PRUNE_SQL.split(";"):
            c.execute(stmt, (b.prune,))


def write_cluster_rows(c: sqlite3.Connection, b: "RowBatch", lost: frozenset = frozenset()) -> None:
    """Several nodes' tables: this source's frames, the spans, then the rest in order (sources, prunes),
    then the statements of one device each. Nothing of a device in ``lost`` (another node owns it now:
    cluster.py, bridge_core/scale/fencing.py) is written."""
    if b.events:
        insert_rows(c, _FRAMES_SQL, list(b.events))
    spans = [s for s in b.segments if s[0] not in lost] if lost else b.segments
    if spans:
        c.executemany(SPAN_SQL, spans)
    for stmt, group in itertools.groupby(b.sql, key=lambda s: s[0]):  # a prune's marks: one statement
        params = [p for _, p in group]
        if stmt == _MARK_SQL:  # the batch's marks, the newest of each message (one statement sets a row once)
            insert_rows(c, _MARKS_SQL, list({p[:2]: p for p in params}.values()))
        elif len(params) == 1:
            c.execute(stmt, params[0])
        else:
            c.executemany(stmt, params)
    for device_id, stmt, params in b.owned:
        if device_id not in lost:
            c.execute(stmt, params)


def insert_rows(c: sqlite3.Connection, sqls: dict[int, str], rows: list[tuple]) -> None:
    """``rows`` in as few statements as the sizes of ``sqls`` allow (``_values``)."""
    i = 0
    for k in event_chunks(len(rows), max(sqls)):
        c.execute(sqls[k], [v for row in rows[i:i + k] for v in row])
        i += k


def held(b: "RowBatch") -> dict:
    """The devices the batch's frames were numbered for, and the epoch of each (the newest seen)."""
    out: dict = {}
    for fence in b.fences:
        for device_id, (epoch, _device) in fence.items():
            out[device_id] = epoch
    return out


class RowBatch:
    """Replay rows as ONE store write, open for more rows until the writer thread takes it.

    The batch is submitted when it opens, after its first rows were added (``RowQueue``), so every frame
    queued after a row was added carries a later ticket and leaves only once the batch committed. Rows
    offered after the writer took the batch go into a new one (submitted then, hence later).
    """

    __slots__ = ("events", "segments", "sql", "owned", "fences", "prune", "taken", "lock", "_write")

    def __init__(self, write: Callable[[sqlite3.Connection, "RowBatch"], None] = write_node_rows,
                 keep: Optional[int] = None) -> None:
        # keep: only the newest ``keep`` events' rows (the journaled batch: older ones are pruned anyway)
        self.events: Any = collections.deque(maxlen=keep) if keep else []
        self.segments: list[tuple] = []
        self.sql: list[tuple[str, tuple]] = []  # statements after the rows, in order
        self.owned: list[tuple[str, str, tuple]] = []  # (device_id, statement, params): one device's, fenced
        # several nodes: the maps device_id -> (epoch, device) of the devices numbered while the batch was
        # open (the registry's map is replaced, never changed, when one attaches or leaves: one check per add)
        self.fences: list[dict] = []
        self.prune: Optional[int] = None  # one node: the oldest event kept (the last one asked for wins)
        self.taken = False
        self.lock = threading.Lock()
        self._write = write

    def add(self, events: list, segments: list, prune: Optional[int] = None, sql: Optional[list] = None,
            owned: Optional[list] = None, fence: Optional[dict] = None) -> bool:
        """More rows, unless the writer thread took the batch (False: they go into a new one)."""
        with self.lock:
            if self.taken:
                return False
            self.extend(events, segments, prune, sql, owned, fence)
            return True

    def extend(self, events: list, segments: list, prune: Optional[int] = None, sql: Optional[list] = None,
               owned: Optional[list] = None, fence: Optional[dict] = None) -> None:
        """More rows, no lock: for a batch no other thread sees yet (the journaled one, until submitted)."""
        if events:
            self.events.extend(events)
        if segments:
            self.segments.extend(segments)
        if prune is not None:
            self.prune = prune
        if sql:
            self.sql.extend(sql)
        if owned:
            self.owned.extend(owned)
        if fence and (not self.fences or self.fences[-1] is not fence):
            self.fences.append(fence)

    def __call__(self, c: sqlite3.Connection) -> None:
        with self.lock:
            self.taken = True
        self._write(c, self)


class RowQueue:
    """The open batch queued to the store: rows added while the writer has not taken it join it."""

    __slots__ = ("_batch", "_write", "_write_later")

    def __init__(self, write_later: Callable[[Callable[[sqlite3.Connection], Any]], None],
                 write: Callable[[sqlite3.Connection, RowBatch], None] = write_node_rows) -> None:
        self._batch: Optional[RowBatch] = None
        self._write = write
        self._write_later = write_later  # Store.write_later: behind the barrier, every later frame waits for it

    def add(self, events: list, segments: list, prune: Optional[int] = None, sql: Optional[list] = None,
            owned: Optional[list] = None, fence: Optional[dict] = None) -> None:
        b = self._batch
        if b is None or not b.add(events, segments, prune, sql, owned, fence):
            b = self._batch = RowBatch(self._write)
            # filled before it is queued: the writer thread may take a queued batch at once (then an add is
            # refused), and these rows would be lost
            b.extend(events, segments, prune, sql, owned, fence)
            self._write_later(b)
