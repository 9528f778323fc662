"""The lvmh session registry, without I/O (docs/architecture.md, "Where each rule lives").

One ``SessionRecord`` per session the daemon knows: a plugin session (pi
numbers its events) or a bridge conversation (the daemon numbers them). The
record keeps the seq books and answers what the front end must do; the front
end does it (store writes, streaming, closing sockets):

- ``high``: plugin, the highest seq accepted; bridge, the last seq assigned.
- ``top``: plugin, the highest seq it used, deltas (``message_update``, never
  stored) included; after a restart never below ``reserved``.
- ``reserved``: bridge, seqs up to here are recorded as handed out (a block
  ahead, so a restart never reuses a seq); plugin, seen up to here at most
  (recorded once a delta's seq passes it, so a closing event the daemon
  writes never reuses a delta's seq).
- ``conn``: the plugin connection holding the session, if any (``claim``).
- ``stored``: plugin, the bytes of events it stored, counted against its quota
  (``charge``; ``[lvmh] worker_quota_mb``, docs/security.md "What a worker may store").
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

from bridge_core.model.seqalloc import SeqReservation

from .protocol import Claim, claim
from .render import OpenRun

SEQ_BLOCK = 1000  # seqs of a session reserved at a time (message_update numbers are never stored)
# Several nodes (docs/scale-out.md "lvmh numbering"): a bridge conversation's lvmh events are numbered
# from the cluster-wide event number, the same on every node: the i-th event rendered from event n
# is ``base + n * SEQ_STRIDE + i``. No renderer output comes near it (a run's end, closing what a
# restart left open, is the longest).
SEQ_STRIDE = 256


# A run's end takes the last two slots of its event's stride, whatever closing precedes it: nodes whose
# renderers close a different set of things first (one restored a run from a store lacking the run's
# decisions) still store the run's end under the same seqs, once (issue 41). A run's end closes no message there
# (render.py ``completed_before_end``): the rows under the end's other slots are the same on every node too.
END_SLOTS = {"agent_end": SEQ_STRIDE - 2, "agent_settled": SEQ_STRIDE - 1}


def cluster_seq(base: int, n: int, i: int) -> int:
    """The seq of the ``i``-th lvmh event rendered from cluster event ``n`` (``i < SEQ_STRIDE``)."""
    return base + n * SEQ_STRIDE + i


def rendered_seq(base: int, n: int, i: int, etype: str) -> int:
    """The seq of the ``i``-th lvmh event rendered from cluster event ``n``, of type ``etype``: a run's end
    at its fixed slots (``END_SLOTS``), every other event at its place (``i < SEQ_STRIDE - 2``)."""
    return cluster_seq(base, n, END_SLOTS.get(etype, i))


class SessionRecord:
    __slots__ = ("id", "source", "info", "high", "last_event_at", "conn", "seqs", "run", "abandon", "top", "stored")

    def __init__(self, sid: str, source: str, info: dict, high: int = 0, last_event_at: Optional[int] = None):
        self.id = sid
        self.source = source  # "plugin" | "bridge"
        self.info = info
        self.high = high
        self.last_event_at = last_event_at
        self.conn: Any = None  # server.PluginConn
        # bridge: handed out, reserved half a block early; plugin: seen, recorded once a seq passes it
        self.seqs = SeqReservation(SEQ_BLOCK, high, margin=SEQ_BLOCK // 2 if source == "bridge" else 0)
        self.top = high
        # plugin: what its stored events leave open (a run, message, tools); a bridge conversation's runs are
        # the core's (none is kept per conversation: thousands of them cost nothing here)
        self.run: Any = OpenRun() if source == "plugin" else None
        self.abandon: Any = None  # plugin: the front end's timer that closes its open run if it never returns
        self.stored = 0  # plugin: bytes of events stored (persisted with the session, so a restart keeps it)

    # --- seqs -------------------------------------------------------------------------------------

    @property
    def reserved(self) -> int:
        """The seqs recorded as used (bridge: handed out; plugin: its deltas included)."""
        return self.seqs.reserved

    def next_bridge_seq(self) -> tuple[int, Optional[int]]:
        """A bridge conversation's next seq, and the reservation to record now (None: still covered)."""
        self.high += 1
        seq = self.high
        return seq, self.seqs.need(seq)  # reserve ahead, so a restart never reuses a seq

    def plugin_delta(self, seq: int) -> tuple[bool, Optional[int]]:
        """A plugin's ``message_update`` numbered ``seq``: (new, so shown; the reservation to record or None)."""
        if seq <= self.high:
            return False, None
        reserve = None
        if seq > self.top:
            self.top = seq
            reserve = self.seqs.need(seq)  # recorded ahead, so a closing event never reuses a delta's seq
        return True, reserve

    def plugin_event(self, seq: int, ts: int) -> bool:
        """A plugin's stored event: True when new, False for a resend (stored once, never shown twice)."""
        if seq <= self.high:
            return False
        self.high = seq
        if seq > self.top:
            self.top = seq
        if self.last_event_at is None or ts > self.last_event_at:
            self.last_event_at = ts
        return True

    def charge(self, size: int, quota: int) -> bool:
        """Count ``size`` bytes of a plugin event about to be stored against ``quota`` (0: none): False,
        nothing counted, when it would take the session past it. The hot path's only cost: an add."""
        total = self.stored + size
        if quota and total > quota:
            return False
        self.stored = total
        return True

    def refreshed(self, last_seq: int, reserved: int, stored: int = 0) -> None:
        """Several nodes: the store's ``lastSeq``, ``seqReserved`` and ``storedBytes`` of this plugin session,
        written by the node its plugin was connected to (never below what this node knew)."""
        if stored > self.stored:
            self.stored = stored
        if last_seq > self.high:
            self.high = last_seq
        top = max(last_seq, reserved)
        if top > self.top:
            self.top = top
        if reserved > self.seqs.reserved:
            self.seqs.set(reserved)

    def lost(self) -> None:
        """Several nodes: another node claimed this plugin session (its epoch moved on): what this node
        counted of it is no longer the session's (frames it read after the claim were refused by the
        store, never stored or shown), so its seq books start again from nothing; the next hello here
        reads them from the store (``refreshed``)."""
        self.high = self.top = self.stored = 0
        self.seqs.set(0)

    def welcomed(self, last_seq: int) -> None:
        """``welcome`` told the plugin ``last_seq`` is stored: nothing at or below it is new."""
        if last_seq > self.high:
            self.high = last_seq

    def daemon_seqs(self, count: int) -> range:
        """Seqs for ``count`` events the daemon writes into a plugin session (closing a run it left
        open): above every seq the plugin used, its unstored deltas included."""
        start = max(self.high, self.top)
        self.high = self.top = start + count
        return range(start + 1, start + count + 1)

    # --- ownership --------------------------------------------------------------------------------

    def claim(self, conn: Any) -> tuple[Claim, Any]:
        """``conn`` says hello for this session (``protocol.claim``, the rule): on ``REPLACE`` the older
        connection is returned, marked ``replaced``, to be closed."""
        old = self.conn
        got = claim(old, conn)
        if got is not Claim.REPLACE:
            return got, None
        old.replaced = True
        self.conn = None
        return got, old


class SessionRegistry:
    """Every known session by id (``records``), restored from the store's rows at start."""

    __slots__ = ("records",)

    def __init__(self) -> None:
        self.records: dict[str, SessionRecord] = {}

    def restore(self, rows: Iterable[Any], plugin_info: Any) -> None:
        """Rows of the session table (``id``, ``source``, ``info``, ``last_seq``, ``reserved``,
        ``last_event_at``); ``plugin_info(raw, sid)`` cleans a plugin session's info."""
        for row in rows:
            source = "bridge" if row.source == "bridge" else "plugin"
            info = row.info if source == "bridge" else plugin_info(row.info, row.id)
            high = max(row.last_seq, row.reserved) if source == "bridge" else row.last_seq
            rec = self.records[row.id] = SessionRecord(row.id, source, info, high, row.last_event_at)
            rec.stored = getattr(row, "stored", 0)
            if source == "plugin":  # its unstored deltas may have used seqs up to what was recorded
                rec.seqs.set(row.reserved)
                rec.top = max(row.last_seq, row.reserved)

    def restore_one(self, row: Any, plugin_info: Any) -> Optional[SessionRecord]:
        """One stored session (several nodes: another node made it), unless it is known already."""
        if row is None:
            return None
        if row.id not in self.records:
            self.restore([row], plugin_info)
        return self.records[row.id]

    def get(self, sid: str) -> Optional[SessionRecord]:
        return self.records.get(sid)

    def add(self, sid: str, source: str, info: dict, committed: int) -> SessionRecord:
        """A session first seen now, numbered on from ``committed`` (its highest stored seq)."""
        rec = self.records[sid] = SessionRecord(sid, source, info, committed)
        return rec

    def pop(self, sid: str) -> Optional[SessionRecord]:
        return self.records.pop(sid, None)
