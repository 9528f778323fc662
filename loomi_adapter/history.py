"""A device's numbering across nodes, rebuilt from what the store holds (pure; docs/loomi.md,
"Several nodes").

With several nodes, only the node a device is connected to numbers its frames. Each node
(each process: a *source*) stores every Loomi frame it renders once, as a row ``(source, m,
n, body)``: ``m`` its own frame counter (consecutive), ``n`` the cluster-wide event number.
A device's numbering is a list of *epochs*, one per hello (a claim): the epoch's start
(``start_n``, the node's stream position at the claim; ``base_seq``, the seq before it) and, once the next hello claimed the device, its last seq (``last_seq``). Within an
epoch, *spans* say which rows were the device's frames and with which seqs: the rows of
``source`` from ``from_m`` on (up to ``to_m``, the next span of that source, or the epoch's end)
have seq ``m + offset``. A reply or a ping takes a seq between frames: it starts a new span
whose first seq is one above it.

Everything a device received was in the store before it left (the rows and spans are queued
before the frame: the store's durability barrier), so a node rebuilding the device from the
store at hello knows every seq it was given, every frame of its window and the last event it
was numbered for. A source keeps numbering a device that went away until another hello
claims it (the rows it renders anyway are the events the device then missed), so nothing
needs writing when a device disconnects, and a node that dies (``kill -9``) leaves a history
that is just as exact.
"""

from __future__ import annotations

from typing import Callable, Iterable, Optional

import attrs

from .codec import stamp_tail

# (source, lo, hi or None, limit) -> rows (m, n, body) with lo <= m <= hi, newest first, at most limit
Fetch = Callable[[str, int, Optional[int], int], list[tuple[int, int, bytes]]]
# source -> (min m, max m) of its stored rows, or None when it has none
Extent = Callable[[str], Optional[tuple[int, int]]]


@attrs.frozen
class Epoch:
    epoch: int
    start_n: int
    base_seq: int  # the seq before the epoch (below it, what earlier epochs gave)
    reply_seq: int = 0  # a reply or ping taken while the node skipped events the device had (no span yet)
    last_seq: Optional[int] = None  # set by the hello that claimed the device next


@attrs.frozen
class Span:
    epoch: int
    source: str
    from_m: int
    to_m: Optional[int]
    offset: int

    @property
    def first_seq(self) -> int:
        return self.from_m + self.offset


@attrs.frozen
class History:
    """What a hello needs: the last seq given, the last event numbered, the window and its floor."""

    seq: int
    cursor: int  # the cluster-wide number of the last event the device was numbered for
    floor: int  # every frame at or below it may be gone
    frames: list  # (seq, frame, epoch), ascending, at most ``window``
    epochs_used: int  # the oldest epoch with a frame in the window (older ones may be dropped)
    places: list = attrs.field(factory=list)  # (source, m, body): the row of each frame of ``frames``


# the device's frame of a stored body (the body without its opening brace, as stored): the one splice
stamp = stamp_tail


def rebuild(epochs: list[Epoch], spans: Iterable[Span], fetch: Fetch, extent: Extent, window: int,
            base: int = 0) -> History:
    """The device's numbering from its epochs (ascending) and spans. ``base``: the seq before
    any epoch (a device numbered before it was ever claimed: an upper bound of what it got)."""
    if not epochs:
        return History(seq=base, cursor=-1, floor=base, frames=[], epochs_used=0)
    by_epoch: dict[int, list[Span]] = {}
    for s in spans:
        by_epoch.setdefault(s.epoch, []).append(s)
    need = window + 1  # the one beyond the window gives the floor
    newest: list[tuple[int, bytes, int]] = []  # (seq, frame, epoch), newest first
    places: list[tuple[str, int, bytes]] = []  # (source, m, body) of each of ``newest``
    floor = epochs[0].base_seq
    seq = cursor = None
    complete = False  # every older frame is known gone (floor) or the window is full
    for ep in reversed(epochs):
        sp = sorted(by_epoch.get(ep.epoch, ()), key=lambda s: s.first_seq)
        ep_seq = max(ep.base_seq, ep.reply_seq)
        ep_n = ep.start_n
        for j in range(len(sp) - 1, -1, -1):
            s = sp[j]
            hi = _last_row(s, sp[j + 1] if j + 1 < len(sp) else None, ep)
            if ep_seq < s.first_seq - 1:
                ep_seq = s.first_seq - 1  # a reply or ping took the seq just below the span
            if complete or (hi is not None and hi < s.from_m):
                continue
            limit = need - len(newest)
            rows = fetch(s.source, s.from_m, hi, max(limit, 1))
            missing = _missing(rows)
            if missing is not None:
                floor = max(floor, missing + s.offset)  # rows numbered for the device, never stored: gone
            for m, n, body in rows:
                if ep_n < n:
                    ep_n = n
                q = m + s.offset
                if ep_seq < q:
                    ep_seq = q
                if len(newest) < need:
                    newest.append((q, stamp(q, body), ep.epoch))
                    places.append((s.source, m, body))
            if len(newest) >= need:
                complete = True
                continue
            gone = _pruned(s, hi, rows, extent)
            if gone is not None:
                floor = max(floor, gone + s.offset)
                complete = True
        if ep.last_seq is not None:
            ep_seq = ep.last_seq
        if seq is None:
            seq, cursor = ep_seq, ep_n
    newest.reverse()
    places.reverse()
    if len(newest) > window:
        floor = max(floor, newest[0][0])
        newest, places = newest[1:], places[1:]
    used = newest[0][2] if newest else epochs[-1].epoch
    return History(seq=seq or 0, cursor=cursor if cursor is not None else -1, floor=floor, frames=newest,
                   epochs_used=used, places=places)


@attrs.frozen
class Renumbered:
    """A window whose frames above a phone's ``last_seq`` take new seqs (``renumber``)."""

    frames: list  # (seq, frame), ascending: the window as the device now has it
    spans: list  # (source, from_m, to_m, offset): the new epoch's spans over the rows renumbered
    epoch: Optional[int]  # the epoch that numbered them, to be closed at ``last_seq`` (None: none renumbered)


def renumber(h: History, last_seq: int, start: int) -> Optional[Renumbered]:
    """The frames of ``h`` above ``last_seq`` (a phone told ``truncated``: it missed events, gone for good) numbered
    again from ``start + 1``, so that the seqs it is given say what it was told: a gap (the spec's ``truncated``
    is a gap beyond the window). Their rows become the new epoch's (``spans``) and the epoch that numbered them
    ends at ``last_seq``; None when they came from more than one epoch (left as they were)."""
    above = [i for i, f in enumerate(h.frames) if f[0] > last_seq]
    frames = [(q, f) for q, f, _ in h.frames if q <= last_seq]
    if not above:
        return Renumbered(frames, [], None)
    if len({h.frames[i][2] for i in above}) != 1 or len(h.places) != len(h.frames):
        return None
    spans: list[tuple[str, int, int, int]] = []
    q = start
    for i in above:
        source, m, body = h.places[i]
        q += 1
        frames.append((q, stamp(q, body)))
        if spans and spans[-1][0] == source and spans[-1][2] == m - 1 and spans[-1][3] == q - m:
            spans[-1] = (source, spans[-1][1], m, q - m)
        else:
            spans.append((source, m, m, q - m))
    return Renumbered(frames, spans, h.frames[above[0]][2])


def _last_row(s: Span, after: Optional[Span], ep: Epoch) -> Optional[int]:
    """The last row ``m`` of span ``s`` (None: open), bounded by the next span of its source and the epoch's end."""
    hi = s.to_m
    if hi is None and after is not None and after.source == s.source:
        hi = after.from_m - 1
    if ep.last_seq is not None:
        cap = ep.last_seq - s.offset
        hi = cap if hi is None else min(hi, cap)
    return hi


def _missing(rows: list[tuple[int, int, bytes]]) -> Optional[int]:
    """The highest row ``m`` missing between the rows of a span (newest first), or None when they are consecutive.

    A source writes its rows with consecutive ``m`` and prunes only below its oldest kept one, so a row
    missing between two stored ones was numbered (its seq given in the store's view of the device: ``m +
    offset``) and never stored: its batch's write failed (a PostgreSQL restart: chaos seed 2001,
    ``deltas_incomplete``). Its event cannot be replayed; a phone whose last seq is below it missed it."""
    for (hi, _, _), (lo, _, _) in zip(rows, rows[1:]):
        if hi - lo > 1:
            return hi - 1
    return None


def _pruned(s: Span, hi: Optional[int], rows: list[tuple[int, int, bytes]], extent: Extent) -> Optional[int]:
    """The highest row ``m`` of span ``s`` known gone (pruned), or None when none is known gone."""
    lowest = rows[-1][0] if rows else None
    if lowest is not None:
        return lowest - 1 if lowest > s.from_m else None  # rows are consecutive: the ones below were pruned
    ext = extent(s.source)
    if ext is not None and ext[1] >= s.from_m and ext[0] > s.from_m:
        return ext[0] - 1 if hi is None else min(hi, ext[0] - 1)
    return None


@attrs.frozen
class Range:
    """Catch-up rows of one source: the events ``n_from..n_to`` it rendered."""

    source: str
    n_from: int
    n_to: int


Holes = dict  # source -> [(first, last), ...]: numbers its node's delivery passed over, known given (gone)


def plan_catchup(cursor: int, own_first: int, others: list[tuple[str, int, int]],
                 holes: Optional[Holes] = None,
                 happened: Optional[Callable[[int, int], bool]] = None) -> tuple[list[Range], bool]:
    """Where the events a device missed before this node's first event come from (``plan``'s ranges and
    whether some events in between cannot be served)."""
    p = plan(cursor, own_first, others, holes, happened)
    return p.ranges, p.gap


@attrs.frozen
class Plan:
    ranges: list  # Range, oldest first
    gap: bool  # some events in between cannot be served
    # the numbers (first, last) known given whose events nobody's rows hold any more, in order among the ranges:
    # an event renders at most one frame (codec.RENDERERS), so their count bounds the frames the device missed
    # there from above (the seqs they take: loomi_adapter/cluster.py ``_catch_up``)
    gone: list = attrs.field(factory=list)


def plan(cursor: int, own_first: int, others: list[tuple[str, int, int]], holes: Optional[Holes] = None,
         happened: Optional[Callable[[int, int], bool]] = None) -> Plan:
    """Where the events a device missed before this node's first event come from.

    ``cursor``: the last event the device was numbered for; ``own_first``: the first event this
    node rendered (its own rows serve from there on); ``others``: the other sources as (source,
    the first event whose rows they still keep, the last event they rendered); ``holes``: per
    source, the numbers its node passed over that were events gone for good (bridge_core/scale/
    gone.py): a source serves nothing there, and a hole nobody else covers is a gap; ``happened(a, b)``:
    whether a durable record (the core's store) says something was done between events ``a`` and ``b``,
    asked when no node has rows after ``a`` (after Redis lost its keys while the nodes were behind, a
    node started since): then events there are missing, not numbers the numbering jumped over (how many
    is not known: nothing said gone). Returns the ranges to read, whether some events in between cannot
    be served, and the numbers gone where that is known (a hole, or rows every source pruned).
    """
    holes = holes or {}
    out: list[Range] = []
    lost: list[tuple[int, int]] = []
    pos = cursor  # served up to here
    gap = False
    while pos < own_first - 1:
        best = None
        for source, kept_from, last in others:
            reach = _reach(pos + 1, last, holes.get(source, ()))
            if kept_from <= pos + 1 and reach > pos and (best is None or reach > best[2]):
                best = (source, kept_from, reach)
        if best is None:
            gone = [b for hs in holes.values() for a, b in hs if a <= pos + 1 <= b]
            if gone:  # events known given that no source has: gone, said
                end = min(max(gone), own_first - 1)
            else:
                later = [kf for _, kf, last in others if kf > pos + 1 and last > pos]
                if not later:  # no node stored anything after pos: a jump, or what nobody rendered (yet)
                    return Plan(out, gap or (happened is not None and happened(pos, own_first)), lost)
                end = min(min(later), own_first) - 1  # events pos+1 .. end were stored, and are gone everywhere
            gap = True
            lost.append((pos + 1, end))
            pos = end
            continue
        end = min(best[2], own_first - 1)
        out.append(Range(best[0], pos + 1, end))
        pos = end
    return Plan(out, gap, lost)


def _reach(start: int, last: int, holes: Iterable[tuple[int, int]]) -> int:
    """The last number a source's rows cover from ``start`` on, up to ``last``, short of its next hole
    (``start - 1``: it has nothing at ``start``)."""
    for a, b in holes:
        if a <= start <= b:
            return start - 1
        if start < a <= last:
            last = a - 1
    return last


def passed_by(whose: str, source: str) -> bool:
    """Whether a hole recorded by ``whose`` (bridge_core/scale/gone.py ``holes``: a node's life, ``node:life``,
    or a bare node id for a hole recorded before lives were) lies in the rows of ``source`` (a life too: the
    Loomi rows of one process). A life's holes say what that life's rows lack, nothing of another life's: a
    node restarted under its own name passes over its previous life's entries, which that life rendered."""
    return whose == source or whose == source.rsplit(":", 1)[0]


def crossed(start_n: int, cursor: int, sources: Iterable[str], holes: Iterable[tuple[str, int, int]]) -> bool:
    """Whether a device numbered from event ``start_n`` to ``cursor`` by rows of ``sources`` was numbered
    across events one of those sources passed over, gone for good (``holes``: (whose, first, last),
    ``passed_by``): it missed them and was never told, so its next hello is answered ``truncated``."""
    sources = set(sources)
    return any(b > start_n and a <= cursor and any(passed_by(whose, s) for s in sources) for whose, a, b in holes)
