"""Devices, seqs and replay windows when several nodes share the store (docs/loomi.md, "Several nodes").

Every node's hub gets every event of the cluster, numbered ``n`` cluster-wide, in one order.
A device's frames are numbered only by the node it is connected to, and that node is the
only one writing its numbering:

- each process (a *source*) stores every Loomi frame it renders once, whatever the number
  of devices: ``loomi_frames(source, m, n, body)``, ``m`` its own consecutive frame number;
- a hello *claims* the device: the node rebuilds the device's numbering and window from the
  store (history.py), closes the previous epoch at the last seq it finds, and opens a new
  epoch (one awaited, conditional write: two claims never both win);
- the events the device missed since the last one it was numbered for (its *cursor*) are
  numbered at the hello from this node's rows (older ones from another source's), and
  replayed with the window; events up to the cursor that this node has not processed yet
  (another node was ahead in the stream) are skipped for the device when they arrive;
- live, the device's seqs are ``m + offset`` over this node's rows: a span row is written
  when the offset changes, and a reply or a ping writes its span at once, so both reach the
  store before the frame carrying the seq (the durability barrier);
- a heartbeat reads the device's row: revoked or claimed by another node closes the socket;
- the epoch is a fencing token (bridge_core/scale/fencing.py, docs/scale-out.md "Fenced ownership"):
  a claim takes it (committed) before it reads the device's history, and every batch of rows this
  node writes first guards the epochs of the devices it numbered; a device another node claimed
  meanwhile gets nothing more written (spans, reply seqs, seq blocks), nothing queued for it leaves,
  and its socket here is closed (``on_lost``).

The embedded default (``devices.Registry``) is untouched by all of this.
"""

from __future__ import annotations

import collections
import logging
import secrets
import time
from typing import Any, Callable, Optional

import orjson

from bridge_core.kit.security import same_secret
from bridge_core.bridge.store import BaseStore
from bridge_core.scale import fencing, gone

from . import codec
from .devices import _DEVICE_COLUMNS, _DUMMY_HASH, MIGRATIONS, Device, Registry, hash_secret
from .history import Epoch, History, Range, Span, crossed, passed_by, plan, rebuild, renumber
from .replay import Numbering, Resume, SeqLog
from .rows import RowBatch, RowQueue, held, mark_sql, write_cluster_rows

log = logging.getLogger("agent_bridge.loomi.cluster")

PRUNE_EVERY = 64
SWEEP_EVERY = 16  # prunes between two deletes of the stale marks (rows.py ``mark_sql``)

_REPLY_SQL = "UPDATE loomi_epochs SET reply_seq=MAX(reply_seq, ?) WHERE device_id=? AND epoch=?"
_RESERVE_SQL = "UPDATE loomi_devices SET seq_reserved=MAX(seq_reserved, ?) WHERE device_id=? AND epoch=?"
# a skip ``?2`` before the next row ``?1`` of source ``?3`` for every device whose newest span (by first seq) in its
# current epoch is that source's, open, from at most ``?4`` (not an error's span at ``?1``: it has the skip already)
_SKIP_SQL = ("INSERT OR REPLACE INTO loomi_spans(device_id, epoch, source, from_m, to_m, seq_offset) "
             "SELECT s.device_id, s.epoch, s.source, ?1, NULL, s.seq_offset + ?2 FROM loomi_spans s "
             "JOIN loomi_devices d ON d.device_id = s.device_id AND d.epoch = s.epoch "
             "WHERE s.source = ?3 AND s.to_m IS NULL AND s.from_m <= ?4 AND NOT EXISTS (SELECT 1 FROM loomi_spans t "
             "WHERE t.device_id = s.device_id AND t.epoch = s.epoch "
             "AND t.from_m + t.seq_offset > s.from_m + s.seq_offset)")
DEVICES = fencing.Owners("loomi_devices", "device_id")  # where a device's epoch lives
# s a hello's claim waits for the device's row lock (its owner stopped inside a batch that guards it):
# then the hello is answered ``unavailable`` and the phone retries (docs/scale-out.md "Fenced ownership")
CLAIM_LOCK_WAIT = 2.0


def _ts(tail: bytes) -> float:
    """The time of a stored frame (its body without the opening brace)."""
    try:
        return float(orjson.loads(b"{" + tail)["ts"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return 0.0


def held_by(tails: list) -> gone.Held:
    """What stored frames (bodies without the opening brace) carry: the runs they start and end, the
    messages they hold (gone.happened counts only what they lack)."""
    starts, ends, messages = set(), set(), set()
    for tail in tails:
        try:
            f = orjson.loads(b"{" + bytes(tail))
        except orjson.JSONDecodeError:
            continue
        kind, run_id, payload = f.get("type"), f.get("run_id"), f.get("payload") or {}
        if run_id and kind == "run.started":
            starts.add(run_id)
        elif run_id and kind in ("run.completed", "run.failed"):
            ends.add(run_id)
        if isinstance(payload, dict) and payload.get("message_id"):
            messages.add(payload["message_id"])
    return gone.Held(frozenset(starts), frozenset(ends), frozenset(messages))


class Claim:
    """What a hello read and won: the device's history and its new epoch."""

    __slots__ = ("history", "epoch", "base", "lost", "reserved", "gone")

    def __init__(self, history: History, epoch: int, base: int, lost: bool, reserved: int, gone: bool = False):
        self.history = history
        self.epoch = epoch
        self.base = base  # the seq before the epoch's first frame
        self.lost = lost  # the app reported a seq above anything stored (its state was lost)
        self.reserved = reserved
        self.gone = gone  # it was numbered across events gone for good (bridge_core/scale/gone.py)


class ClusterRegistry(Registry):
    def __init__(self, store: BaseStore, node_id: str, life: Optional[str] = None, **kw: Any):
        super().__init__(store, **kw)
        self.node_id = node_id
        # this process's rows: the node's life (bridge_core/scale/nodes.py new_life), whose holes are its own
        self.source = life or f"{node_id}:{secrets.token_hex(6)}"
        self.position = -1  # the cluster-wide number of the last event seen
        # the number of the last event this source stored rows for (-1: none yet). Not ``position``: until the
        # first event arrives that is the newest event any node stored, and a node joining the stream stores
        # the events before it afterwards (``next_seq``)
        self.stored_n = -1
        self.own_from: Optional[int] = None  # the first event all of whose frames ``recent`` holds
        self.recent: collections.deque[tuple[int, int, bytes]] = collections.deque(maxlen=self.window + 1)
        self.attached: dict[str, Device] = {}  # devices connected here, numbered here
        # the one seq rule (replay.py), over this source's frames ``m``, for the devices connected here only
        self.numbering = Numbering(self.attached, self._reserve)
        self._rows = RowQueue(store.write_later, self._write_rows)
        # device_id -> (epoch, device) of the devices numbered here: a new map at every attach and detach
        # (a batch keeps the maps it saw: rows.held), so the hot path adds one identity check per event
        self._held: dict[str, tuple[int, Device]] = {}
        # called in the store's writer thread for a device another node claimed, before the write that found
        # it out counts as processed (the server closes its socket: nothing queued for it may leave)
        self.on_lost: Optional[Callable[[Device], None]] = None
        # device_id -> (epoch, seqs): a device this life numbered across events gone for good (``passed_gone``)
        self._gone_skip: dict[str, tuple[int, int]] = {}
        self._left: dict[str, int] = {}  # device_id -> the last row given to a device detached here (``next_seq``)
        self.marking: Callable[[float], list] = lambda due: []  # the marks stored at a prune (runtexts.py ``marks``)
        self._prunes = 0

    @property
    def m(self) -> int:
        """This source's last frame number."""
        return self.numbering.k

    # --- lifecycle ------------------------------------------------------------------

    async def prepare(self) -> None:
        await self.store.amigrate("loomi", MIGRATIONS)
        # until the first event arrives: the newest event any node stored (this node joins the stream after it)
        row = self.store.query_one("SELECT MAX(n) FROM loomi_frames")
        self.position = row[0] if row is not None and row[0] is not None else -1

    async def persist_exact(self) -> None:
        """Nothing to do: a device's numbering is exact in the store at every moment."""

    # --- the hot path ------------------------------------------------------------------

    def wants(self, n: int) -> bool:
        """Event ``n`` arrived: it is stored and numbered, paired devices or not. A node that stored nothing
        until it learnt of a device (a look at the store every 5 s) could not serve a phone's first hello
        on it: the events it had passed and the other nodes had not stored yet were given to nobody, with
        no seq gap (issue 41, seed 4111: tests/scale/test_first_hello_rows.py)."""
        self.position = n
        return True

    def record(self, tails: list[bytes], n: int = 0) -> list[tuple[Device, bytes]]:
        """Event ``n`` (its bodies without their ``{``): stored once as this source's rows, and
        numbered for every device connected here (the spans it changes queued first)."""
        m0, marks, out = self.numbering.record(tails, n)
        if n > self.stored_n:
            self.stored_n = n
        src = self.source
        recent = self.recent
        rows = []
        m = m0
        for tail in tails:
            m += 1
            rows.append((src, m, n, tail))
            if len(recent) == recent.maxlen:
                self.own_from = recent[0][1] + 1
            recent.append((m, n, tail))
        sql = None
        if self.own_from is None:
            self.own_from = n
            sql = [("INSERT OR REPLACE INTO loomi_sources(source, node, kept_from_n) VALUES(?,?,?)",
                    (src, self.node_id, n))]
        elif m - self._pruned_at >= PRUNE_EVERY:
            self._pruned_at = m
            sql = self._prune()
        spans = [(d.device_id, d.epoch, src, k, None, off) for d, k, off in marks]
        self._rows.add(rows, spans, sql=sql, fence=self._held)
        return out

    def _write_rows(self, c: Any, b: RowBatch) -> None:
        """A batch of rows, in the store's writer thread: the epochs of the devices it numbered guarded
        first (fencing.guard: their rows locked), nothing written for a device another node claimed."""
        mine = held(b)
        lost = fencing.guard(c, DEVICES, mine) if mine else set()
        write_cluster_rows(c, b, frozenset(lost))
        if lost:
            log.info("loomi: %d device(s) claimed by another node; their frames here are dropped", len(lost))
            for did in lost:
                for fence in b.fences:
                    epoch, d = fence.get(did, (None, None))
                    if d is not None and d.epoch == epoch and self.on_lost is not None:
                        self.on_lost(d)
                        break

    def _prune(self) -> list[tuple[str, tuple]]:
        """Keep this source's newest ``window + 1`` rows; drop this node's earlier sources' rows
        outside every window (never another node's: two nodes never delete the same rows)."""
        src, node, kept, recent = self.source, self.node_id, self.own_from, self.recent
        self._prunes += 1
        due = _ts(recent[max(0, len(recent) + PRUNE_EVERY - recent.maxlen)][2])  # the next prune's oldest kept
        return [
            ("DELETE FROM loomi_frames WHERE source=? AND m<?", (src, self.recent[0][0])),
            ("DELETE FROM loomi_frames WHERE n<? AND source IN (SELECT source FROM loomi_sources "
             "WHERE node=? AND source!=?)", (kept, node, src)),
            ("DELETE FROM loomi_sources WHERE node=? AND source!=? AND NOT EXISTS "
             "(SELECT 1 FROM loomi_frames f WHERE f.source=loomi_sources.source)", (node, src)),
            ("UPDATE loomi_sources SET kept_from_n=? WHERE source=?", (kept, src)),
        ] + mark_sql(src, self.marking(due), _ts(recent[0][2]), sweep=self._prunes % SWEEP_EVERY == 0)

    def next_seq(self, d: Device) -> int:
        """A reply's or a ping's seq, recorded before the frame leaves: a span starting one above it
        over this node's next rows (while those are still skipped for it, the epoch's reply seq).

        "Still skipped" is judged by the rows this node stored (``stored_n``), not by ``position``: a node
        that just started has the newest event any node stored as its position, then stores the events of
        its join before it (the stream's last seconds, below the device's ``skip_to``: events the device got
        elsewhere). A span opened at that reply took them as the device's next frames, and its next hello
        replayed them under new seqs (chaos seed 2003: ``event_twice`` after a Redis restart and a kill -9).
        A device detached here (an answer after its fatal error) got none of the rows stored since, which its open
        span numbers for it: the span starts at the first of them (at ``m + 1`` the seqs went back: seed 2701)."""
        s = self.numbering.next_seq(d)
        if d.epoch:
            if d.skip_to > self.stored_n:
                self._rows.add([], [], owned=[(d.device_id, _REPLY_SQL, (s, d.device_id, d.epoch))], fence=self._held)
            else:
                m, (epoch, skip) = self._left.get(d.device_id, self.m), self._gone_skip.get(d.device_id, (None, 0))
                d.offset = s - m + (skip if epoch == d.epoch else 0)
                self._rows.add([], [(d.device_id, d.epoch, self.source, m + 1, None, d.offset)], fence=self._held)
        return s

    def passed_gone(self, lost: list, closing: list) -> None:
        """This life's delivery passed over events gone for good (bridge_core/scale/gone.py, ``lost``: their
        numbers), before what follows is rendered: every device its rows number takes a skip of at least the
        window (one per number gone) before its seqs after them. Those connected here (``closing``, about to be
        closed ``unavailable``: server.py ``_gone``) from the span their error, and any answer due after it,
        opens (``next_seq``); those away whose open span is this source's, in their current epoch, from a span
        queued now at the next row (``_SKIP_SQL``: in the writer, behind every span queued before, and never
        over an error's span). They missed those events and cannot be given them: the next hello is
        ``truncated`` (``crossed``), and the seqs show a gap beyond the window, as the spec's ``truncated``
        says. Before, they went on with no gap: a truncation with nothing skipped (chaos seed 2022,
        ``truncated_under_window``: 360 replayed, 0 skipped)."""
        skip = max(self.window, sum(b - a + 1 for a, b in lost))
        for d in closing:
            if d.epoch:
                self._gone_skip[d.device_id] = (d.epoch, skip)
        m = self.m
        self._rows.add([], [], sql=[(_SKIP_SQL, (m + 1, skip, self.source, m))], fence=self._held)

    def _reserve_sql(self, d: Device, target: int) -> tuple[str, tuple]:
        """A seq block: recorded only while the store still has ``d`` in this node's epoch (fenced)."""
        return _RESERVE_SQL, (target, d.device_id, d.epoch)

    # --- hello: load, claim, attach ---------------------------------------------------------

    def authenticate(self, device_id: str, credential: str) -> Optional[Device]:
        """The device as the store has it now (it may have been paired, revoked or numbered
        elsewhere): a fresh read at every hello."""
        row = self.store.query_one(f"SELECT {_DEVICE_COLUMNS}, epoch FROM loomi_devices WHERE device_id=?",
                                   (device_id,))
        h = hash_secret(credential)
        if row is None:
            same_secret(h, _DUMMY_HASH)
            self.devices.pop(device_id, None)
            return None
        if not same_secret(h, row[1]):
            return None
        d = self.devices.get(device_id)
        if d is None:
            d = self.devices[device_id] = _device(row, self.block, self.window)
        d.stored_epoch = row[10]
        d.stored_reserved = row[8]
        return d

    async def pair(self, info: codec.DeviceInfo) -> tuple[Device, str]:
        d, credential = await super().pair(info)
        d.stored_epoch = 0
        d.stored_reserved = 0
        return d, credential

    def history(self, d: Device) -> History:
        q = self.store.query
        did = d.device_id
        epochs = [Epoch(*r) for r in q(
            "SELECT epoch, start_n, base_seq, reply_seq, last_seq FROM loomi_epochs WHERE device_id=? ORDER BY epoch",
            (did,))]
        spans = [Span(*r) for r in q(
            "SELECT epoch, source, from_m, to_m, seq_offset FROM loomi_spans WHERE device_id=?", (did,))]
        lowest: dict[str, int] = {}
        for sp in spans:
            lowest[sp.source] = min(lowest.get(sp.source, sp.from_m), sp.from_m)
        rows: dict[str, list[tuple[int, int, bytes]]] = {}

        def fetch(source: str, lo: int, hi: Optional[int], limit: int) -> list[tuple[int, int, bytes]]:
            got = rows.get(source)
            if got is None:  # one read per source (a source keeps its newest window + 1 rows)
                got = rows[source] = [(m, n, bytes(b)) for m, n, b in q(
                    "SELECT m, n, body FROM loomi_frames WHERE source=? AND m>=? ORDER BY m DESC",
                    (source, lowest.get(source, lo)))]
            out = [r for r in got if lo <= r[0] and (hi is None or r[0] <= hi)]
            return out[:limit]

        return rebuild(epochs, spans, fetch, self._extent, self.window, base=d.stored_reserved)

    def _extent(self, source: str) -> Optional[tuple[int, int]]:
        row = self.store.query_one("SELECT MIN(m), MAX(m) FROM loomi_frames WHERE source=?", (source,))
        return None if row is None or row[0] is None else (row[0], row[1])

    async def claim(self, d: Device, last_seq: Optional[int]) -> Optional[Claim]:
        """Take ``d`` (a new epoch: the fence, committed first) and rebuild it from the store, or None
        when another hello took it meanwhile; ``Unavailable`` when its row stayed locked longer than
        ``CLAIM_LOCK_WAIT`` (its owner stopped mid-batch). Nothing is numbered for ``d`` until ``attach``.

        The epoch is taken before the history is read: from then on the node that numbered ``d`` has
        every write of its own for ``d`` refused (its batches guard the epoch: ``_write_rows``), and a
        batch of its in progress is committed before the claim is (the device's row is locked), so
        the history read here holds every seq that node ever sent (docs/scale-out.md)."""
        self.detach(d)
        prev = d.stored_epoch
        did = d.device_id
        store = self.store
        epoch = await store.write(lambda c: store.lock_bounded(
            c, CLAIM_LOCK_WAIT, lambda: fencing.claim(c, DEVICES, did, prev)))  # fmt: skip
        if epoch is None:
            self._reread(d)
            return None
        d.stored_epoch = epoch
        h = self.history(d)
        lost = last_seq is not None and last_seq > h.seq
        base = last_seq if lost else h.seq
        reserved = max(d.stored_reserved, base + self.block)
        start_n = max(self.position, h.cursor)

        def write(c: Any) -> bool:
            cur = c.execute("UPDATE loomi_devices SET seq_reserved=?, replay_floor=? WHERE device_id=? AND epoch=?",
                            (reserved, reserved, did, epoch))
            if cur.rowcount != 1:
                return False  # another claim (or a revoke) since ours
            # the epoch numbered last ends at the seq read: a claim that died between its two writes left
            # no row, so the newest row before this epoch is the one to close
            c.execute("UPDATE loomi_epochs SET last_seq=? WHERE device_id=? AND epoch=(SELECT MAX(epoch) "
                      "FROM loomi_epochs WHERE device_id=? AND epoch<?)", (h.seq, did, did, epoch))
            c.execute("INSERT INTO loomi_epochs(device_id, epoch, start_n, base_seq, last_seq) VALUES(?,?,?,?,NULL)",
                      (did, epoch, start_n, base))
            c.execute("DELETE FROM loomi_spans WHERE device_id=? AND epoch<?", (did, h.epochs_used))
            c.execute("DELETE FROM loomi_epochs WHERE device_id=? AND epoch<?", (did, h.epochs_used))
            c.execute("DELETE FROM loomi_segments WHERE device_id=?", (did,))  # the single-node window: gone
            return True

        if not await store.write(lambda c: store.lock_bounded(c, CLAIM_LOCK_WAIT, lambda: write(c))):
            self._reread(d)
            return None
        d.stored_reserved = reserved
        return Claim(h, epoch, base, lost, reserved, self._crossed(did, h.cursor, epoch))

    def _crossed(self, did: str, cursor: int, epoch: int) -> bool:
        """Whether the device's epoch before ``epoch`` numbered it across events its node passed over, gone
        for good (bridge_core/scale/gone.py): it missed them, and its hello is answered ``truncated``."""
        row = self.store.query_one("SELECT epoch, start_n FROM loomi_epochs WHERE device_id=? AND epoch<? "
                                   "ORDER BY epoch DESC LIMIT 1", (did, epoch))
        if row is None:
            return False
        epoch, start_n = row
        sources = {src for (src,) in self.store.query(
            "SELECT DISTINCT source FROM loomi_spans WHERE device_id=? AND epoch=?", (did, epoch))}
        return crossed(start_n, cursor, sources, gone.holes(self.store, start_n))

    def _reread(self, d: Device) -> None:
        row = self.store.query_one("SELECT epoch, seq_reserved FROM loomi_devices WHERE device_id=?", (d.device_id,))
        if row is not None:
            d.stored_epoch, d.stored_reserved = row

    def attach(self, d: Device, claim: Claim, last_seq: Optional[int]) -> Resume:
        """Synchronous, right before ``hello.ok``: the events ``d`` missed numbered from the stored
        rows, its window rebuilt, and ``d`` numbered live from here."""
        h = claim.history
        d.epoch = claim.epoch
        d.offset = None
        self._gone_skip.pop(d.device_id, None)
        self._left.pop(d.device_id, None)
        d.skip_to = h.cursor
        d.seqs.set(claim.reserved)
        self._held = {**self._held, d.device_id: (claim.epoch, d)}
        catching = 0 <= h.cursor < self.position
        parts, gap = self._missed(h.cursor) if catching else ([], False)
        told = last_seq is not None and (claim.lost or claim.gone or gap)
        skip = self._told(d, claim, last_seq) if told and last_seq >= h.floor else None
        log_, spans, owned = skip or (SeqLog(seq=claim.base, floor=h.floor, size=self.window,
                                             frames=[(s, f) for s, f, _ in h.frames]), [], [])  # fmt: skip
        if catching:
            spans += self._number(d, log_, parts)
            d.skip_to = self.position
        elif h.cursor < 0:
            d.skip_to = self.position  # a device never numbered: it starts with the next event
        if spans or owned:
            self._rows.add([], spans, owned=owned, fence=self._held)
        d.log = log_
        if log_.seq > d.seqs.limit:
            self._reserve(d)
        self.attached[d.device_id] = d
        res = log_.resume(last_seq)
        if told and not res.truncated:
            res = Resume(res.seq, res.frames, True)
        return res

    def _told(self, d: Device, claim: Claim, last_seq: int) -> Optional[tuple[SeqLog, list[tuple], list[tuple]]]:
        """The log of a device told ``truncated`` for events gone for good (a claim ``lost`` or ``gone``, or a
        catch-up over a gap), its new spans and the write closing its previous epoch: a window's worth of seqs
        skipped after ``last_seq``, and the window's frames above it numbered again after them (history.py
        ``renumber``). The spec's ``truncated`` is a gap beyond the window: before, the frames went on from
        ``last_seq + 1``, as if the phone had missed nothing (chaos seed 2010, ``truncated_under_window``: 3
        frames replayed, 0 seqs skipped, 485 deltas gone; tests/scale/test_gone_skipped.py). None: left as it
        was (history.renumber)."""
        h = claim.history
        start = max(last_seq + self.window, claim.base)
        r = renumber(h, last_seq, start)
        if r is None:  # frames of two epochs above it: left as they were
            return None
        did = d.device_id
        log_ = SeqLog(seq=start + sum(b - a + 1 for _, a, b, _ in r.spans), floor=start, size=self.window,
                      frames=r.frames)
        spans = [(did, claim.epoch, source, a, b, off) for source, a, b, off in r.spans]
        owned = [] if r.epoch is None else [(did, "UPDATE loomi_epochs SET last_seq=? WHERE device_id=? AND epoch=?",
                                             (last_seq, did, r.epoch))]  # fmt: skip
        return log_, spans, owned

    def _missed(self, cursor: int) -> tuple[list[tuple[str, Any]], bool]:
        """What the events after ``cursor`` are (``_served``, then this node's own rows) and whether some of them
        cannot be served."""
        parts, gap = self._served(cursor)
        own = [row for row in self.recent if row[1] > cursor]
        if own and any(passed_by(w, self.source) and a <= own[-1][1] for w, a, _ in gone.holes(self.store, cursor)):
            gap = True  # this node's own rows pass over events gone for good (gone.py)
        if own:
            parts.append((self.source, own))
        return parts, gap

    def _number(self, d: Device, log_: SeqLog, parts: list[tuple[str, Any]]) -> list[tuple]:
        """Number the events after the cursor for ``d`` (``_missed``): this node's rows, older ones from other
        sources; the spans that say so.

        Events nobody's rows hold any more (pruned by every source, or a hole: ``history.plan``'s ``gone``)
        take their seqs too, as a device away takes a seq for every event it misses: skipped, one per number
        gone (an upper bound of the frames there: an event renders at most one), all below the window's
        floor. Before, they took none: the replay went on from the phone's last seq with no gap, a
        ``truncated`` over fewer seqs than the window though the phone had missed more (chaos seed 2004,
        ``truncated_under_window``: 409 replayed, 0 skipped, 709 events gone)."""
        spans = []
        did = d.device_id
        for source, rows in parts:
            if isinstance(rows, int):  # events gone: their seqs, and nothing at or below them replayed
                log_.seq += rows
                log_.known_floor = max(log_.known_floor, log_.seq)
                continue
            offset = log_.seq + 1 - rows[0][0]
            for m, _n, body in rows:
                s = m + offset
                log_.seq = s
                log_.keep(s, codec.stamp_tail(s, body))
            live = source == self.source
            spans.append((did, d.epoch, source, rows[0][0], None if live else rows[-1][0], offset))
            if live:
                d.offset = offset
        return spans

    def _served(self, cursor: int) -> tuple[list[tuple[str, Any]], bool]:
        """What the events after ``cursor`` and before this node's own rows are, oldest first: (source, its
        rows) served, or (source, a count) of numbers gone; and whether some cannot be served."""
        parts: list[tuple[str, Any]] = []
        own_from = self.own_from if self.own_from is not None else self.position + 1
        if cursor + 1 >= own_from:
            return parts, False
        others = [(s, kf, last) for s, kf, last in self.store.query(
            "SELECT s.source, s.kept_from_n, MAX(f.n) FROM loomi_sources s JOIN loomi_frames f "
            "ON f.source = s.source WHERE s.source != ? GROUP BY s.source, s.kept_from_n", (self.source,))]
        p = plan(cursor, own_from, others, self._holes(others, cursor), self._happened)
        gap = p.gap
        steps = [(r.n_from, r) for r in p.ranges] + [(a, Range("", a, b)) for a, b in p.gone]
        for _, r in sorted(steps, key=lambda x: x[0]):
            if not r.source:
                parts.append(("", r.n_to - r.n_from + 1))
                continue
            rows = self.store.query("SELECT m, n, body FROM loomi_frames WHERE source=? AND n>=? AND n<=? "
                                    "ORDER BY m", (r.source, r.n_from, r.n_to))
            if rows:
                parts.append((r.source, [(m, n, bytes(b)) for m, n, b in rows]))
                gap = gap or self._unstored(r.source, rows[0][0], rows[-1][0], len(rows))
        return parts, gap

    def _unstored(self, source: str, lo: int, hi: int, got: int) -> bool:
        """Whether rows ``lo..hi`` of ``source`` (``got`` of them served) lack one the store never had: its
        batch's write failed (history.rebuild's ``_missing``, the same rule), so the seqs the catch-up gives
        over them pass over an event. A row between them of an event outside the range served is no hole."""
        if hi - lo + 1 == got:
            return False
        row = self.store.query_one("SELECT COUNT(*) FROM loomi_frames WHERE source=? AND m>=? AND m<=?",
                                   (source, lo, hi))
        return row is None or row[0] < hi - lo + 1

    def _happened(self, after: int, before: int) -> bool:
        """Whether the core's store records something done between events ``after`` and ``before``: from the
        latest time of the newest rows at or below ``after`` to that of this node's first row at or above
        ``before`` (history.plan)."""
        rows = self.store.query("SELECT body FROM loomi_frames WHERE n<=? ORDER BY n DESC LIMIT 16", (after,))
        served = [body for _, n, body in self.recent if n >= before]
        if not rows or not served:
            return False  # no time to look from: as before, nothing known missing
        return gone.happened(self.store, max(_ts(bytes(r[0])) for r in rows), _ts(served[0]), held_by(served))

    def _holes(self, others: list, above: int) -> dict:
        """Per source of ``others``: the holes its life recorded above ``above`` (gone.py, history.passed_by)."""
        found = gone.holes(self.store, above)
        out = {src: [(a, b) for w, a, b in found if passed_by(w, src)] for src, _, _ in others}
        return {src: hs for src, hs in out.items() if hs}

    def detach(self, d: Device) -> None:
        if self.attached.pop(d.device_id, None) is not None and d.skip_to <= self.stored_n:
            self._left[d.device_id] = self.m  # every row after it numbers ``d`` away (``next_seq``)
        if d.device_id in self._held:
            self._held = {k: v for k, v in self._held.items() if k != d.device_id}

    def resume(self, d: Device, last_seq: Optional[int]):  # pragma: no cover - the cluster hello is claim + attach
        raise NotImplementedError

    def check(self, d: Device) -> Optional[str]:
        """At a heartbeat: ``revoked`` or ``replaced`` when the store says so (another node)."""
        row = self.store.query_one("SELECT epoch FROM loomi_devices WHERE device_id=?", (d.device_id,))
        if row is None:
            return "revoked"
        return "replaced" if row[0] != d.epoch else None

    # --- pairing tokens: in the store, consumed there ---------------------------------------

    async def take_token(self, token: str) -> bool:
        """Single use across nodes: the store's delete decides who had it."""
        h = hash_secret(token)
        self._tokens.pop(h, None)
        now = time.time()
        return bool(await self.store.write(lambda c: c.execute(
            "DELETE FROM loomi_pair_tokens WHERE token_hash=? AND expires_at>?", (h, now)).rowcount == 1))

    # --- devices ----------------------------------------------------------------------------

    async def revoke(self, device_id: str) -> Optional[Device]:
        d = self.devices.pop(device_id, None)
        if d is not None:
            self.detach(d)
        self.attached.pop(device_id, None)

        def write(c: Any) -> bool:
            gone = c.execute("DELETE FROM loomi_devices WHERE device_id=?", (device_id,)).rowcount == 1
            for table in ("loomi_segments", "loomi_spans", "loomi_epochs"):
                c.execute(f"DELETE FROM {table} WHERE device_id=?", (device_id,))
            return gone

        gone = await self.store.write(write)
        if d is None and gone:
            d = Device(device_id, "")
        return d

    def device_ids(self) -> list[str]:
        """Every device paired on any node: the store's."""
        return [r[0] for r in self.store.query("SELECT device_id FROM loomi_devices")]

    def list(self) -> list[dict]:
        keys = ("device_id", "name", "model", "os", "app_version", "paired_at", "last_seen")
        rows = self.store.query(f"SELECT {', '.join(keys)} FROM loomi_devices ORDER BY paired_at")
        return [dict(zip(keys, r), online=r[0] in self.attached) for r in rows]


def _device(row: tuple, block: int, window: int) -> Device:
    did, chash, name, model, os_, app, paired, seen, reserved, _floor, _epoch = row
    return Device(did, chash, name=name, model=model, os=os_, app_version=app, paired_at=paired, last_seen=seen,
                  reserved=reserved, block=block, log_=SeqLog(size=window))

