"""What a node reading the bus does about being behind, and about entries the stream lost
(docs/scale-out.md "Catching up"). Pure: no I/O; the Redis bus (redisbus.py) drives it.

- **Read-your-writes.** A command is carried out only once this node has read the stream up to
  where it ended when the command came (``Progress``): whatever another node acknowledged
  before (a conversation it created, a run it ran there) is folded here first, so a node
  continued after a stop never answers "not found" from a view it knows may be behind, and
  never starts a run in a conversation before the runs other nodes ran there.
- **Entries the stream lost.** Event numbers ``n`` go up by one from entry to entry. A node
  that reads an entry numbered above the next one it expects (Redis lost its keys while the
  node was behind: what it had not read went with them, and numbering went on above the
  reservation) holds that entry and what follows (``Gap``), asks every live node for the
  entries it wrote in between (each keeps its last ``KEEP_ENTRIES`` as Redis numbered them:
  ``Written``), delivers what they give back in number order, then what it held. A gap left
  by entries that were dropped (forged, of a node gone) or by numbering jumping forward
  after a loss is asked about the same way; nobody has anything for it, and delivery goes on
  as soon as every live node answered (or after ``REFETCH_WAIT``). Numbers below the last
  event that came back that no answer covers are events gone for good (``Gap.lost``: their
  writer no longer kept them): said, never passed over in silence. A loss of Redis's keys
  with nothing written after it shows no gap: the node that sees the loss asks at once
  (``OPEN``: every number above the last it delivered). Before its first delivery, "the last
  it delivered" is its join's number (busjoin.py ``number_at``; chaos seed 2003).
"""

from __future__ import annotations

import collections
import itertools
import zlib
from array import array
from typing import Any, Iterable, Optional

import orjson

KEEP_ENTRIES = 4096  # entries a node keeps of what it wrote to the events stream, for a refetch
KEEP_BYTES = 8 << 20  # held in at most this many bytes, compressed (the oldest go first): seconds of a busy stream
REFETCH_WAIT = 5.0  # s a node holding a gap waits for the live nodes' answers (a node starved of CPU is slow)
CATCH_UP_WAIT = 10.0  # s a command waits for this node to read the stream up to where it ended
MAX_ANSWER = 2048  # entries in one answer to a refetch (the oldest of a longer range are gone for good)
OPEN = 1 << 62  # a gap's end when no entry showed it: Redis lost its keys, whatever this node had not read with them
CHUNK_BYTES = 64 << 10  # payload bytes a node's written entries gather before they are compressed together


class _Chunk:
    """Entries written one after another, their payloads compressed together: their numbers, where
    each payload ends in the uncompressed run, and the run. ``start``: the first entry still kept."""

    __slots__ = ("ns", "ends", "blob", "start")

    def __init__(self, ns: Iterable[int], bodies: list[bytes]):
        self.ns = array("q", ns)
        self.ends = array("q", itertools.accumulate(len(b) for b in bodies))
        self.blob = zlib.compress(b"".join(bodies), 1)
        self.start = 0

    def length(self, i: int) -> int:
        return self.ends[i] - (self.ends[i - 1] if i else 0)

    def entries(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        ns = self.ns[self.start:]
        if not ns or max(ns) <= lo or min(ns) >= hi:
            return []
        run, ends, out = zlib.decompress(self.blob), self.ends, []
        for i in range(self.start, len(self.ns)):
            n = self.ns[i]
            if lo < n < hi:
                out.append((n, run[ends[i - 1] if i else 0:ends[i]]))
        return out


class Written:
    """This node's last entries in the events stream: (n of their first event, the entry's payload).

    At most ``keep`` entries, held in at most ``keep_bytes`` bytes (the oldest go first). Kept as
    they come until ``CHUNK_BYTES`` of them are in, then compressed together (``_Chunk``): the
    entries are read back only for a refetch, and a stream's events compress several times over
    (a run's text deltas carry its text so far, each entry most of the one before: late in a long
    run one is 10-16 KB, and 8 MB of them as written were a few hundred deltas, a fraction of a
    second; seed 4107 in tests/nemesis). The bound is on what is held, compressed: the memory it
    promises, and as many entries as fit in it (docs/scale-out.md "Catching up").
    """

    def __init__(self, keep: int = KEEP_ENTRIES, keep_bytes: int = KEEP_BYTES, chunk_bytes: int = CHUNK_BYTES):
        self._chunks: collections.deque[_Chunk] = collections.deque()
        self._ns: list[int] = []  # the newest entries, not yet compressed
        self._bodies: list[bytes] = []
        self._fresh = 0  # bytes in _bodies
        self.keep, self.keep_bytes, self.chunk_bytes = keep, keep_bytes, chunk_bytes
        self.size = self.count = 0  # payload bytes and entries kept
        self.held = 0  # bytes held for them: the chunks compressed, the newest as they came

    def add(self, n: int, body: bytes) -> None:
        self._ns.append(n)
        self._bodies.append(body)
        self._fresh += len(body)
        self.size += len(body)
        self.held += len(body)
        self.count += 1
        if self._fresh >= self.chunk_bytes:
            chunk = _Chunk(self._ns, self._bodies)
            self._chunks.append(chunk)
            self.held += len(chunk.blob) - self._fresh
            self._ns, self._bodies, self._fresh = [], [], 0
        while self.count > self.keep:
            self._drop_oldest()
        while self.held > self.keep_bytes and self.count > 1:
            if self._chunks:  # a chunk's memory goes only with the whole chunk
                self._drop_chunk()
            else:
                self._drop_oldest()

    def _drop_oldest(self) -> None:
        self.count -= 1
        if not self._chunks:
            self._ns.pop(0)
            body = self._bodies.pop(0)
            self._fresh -= len(body)
            self.size -= len(body)
            self.held -= len(body)
            return
        chunk = self._chunks[0]
        self.size -= chunk.length(chunk.start)
        chunk.start += 1
        if chunk.start == len(chunk.ns):
            self._chunks.popleft()
            self.held -= len(chunk.blob)

    def _drop_chunk(self) -> None:
        chunk = self._chunks.popleft()
        left = len(chunk.ns) - chunk.start
        self.count -= left
        self.size -= chunk.ends[-1] - (chunk.ends[chunk.start - 1] if chunk.start else 0)
        self.held -= len(chunk.blob)

    def between(self, lo: int, hi: int) -> list[tuple[int, bytes]]:
        """The entries numbered strictly between ``lo`` and ``hi`` (a refetch's range), oldest first."""
        out = [e for chunk in self._chunks for e in chunk.entries(lo, hi)]
        out += [(n, body) for n, body in zip(self._ns, self._bodies) if lo < n < hi]
        return out[-MAX_ANSWER:]


def answer(rid: str, entries: Iterable[tuple[int, bytes]], seen: int = 0) -> bytes:
    """The payload answering refetch ``rid``: the entries spliced in as they were written (no re-encoding),
    and ``seen``, the highest number below the gap's end the answering node knows given (``Gap.lost``)."""
    items = b",".join(b"[%d,%s]" % (n, body) for n, body in entries)
    return b'{"bus":"refetched","id":%s,"entries":[%s],"seen":%d}' % (orjson.dumps(rid), items, seen)


def seen_below(hi: int, first: int, last: int, jumps: Iterable[tuple[int, int]]) -> int:
    """The highest number below ``hi`` a node knows given, from what it delivered: ``first`` and ``last``
    (the lowest and highest it delivered since it started) and the ``jumps`` its delivery made, as (last
    before, first after), oldest first. Numbers are given one after another between jumps: below a jump's
    first, the last before it is the highest known; a node that started at ``hi`` or later knows nothing
    below it (0)."""
    if first <= 0 or first >= hi:
        return 0
    if last < hi:
        return last
    for before, after in reversed(list(jumps)):
        if after < hi:
            break
        if before < hi:
            return before
    return hi - 1


def spans(ranges: list[tuple[int, int]], most: int = 5) -> str:
    """(first, last) ranges of numbers as a log line says them: ``3 to 4, 9`` (at most ``most``)."""
    out = ", ".join(f"{a} to {b}" if b > a else str(a) for a, b in ranges[:most])
    return out + (", ..." if len(ranges) > most else "")


class Gap:
    """One refetch under way: the numbers missing are strictly between ``lo`` and ``hi``; the
    entries read meanwhile are held (``held``) until it is over."""

    def __init__(self, rid: str, lo: int, hi: int, t_lo: Optional[float] = None):
        self.rid, self.lo, self.hi = rid, lo, hi
        self.held: collections.deque = collections.deque()  # (node, fields) read while it is under way
        self.asked: set[str] = set()
        self.answered: set[str] = set()
        self.found: dict[int, tuple[str, Any]] = {}  # n -> (writer, its items)
        self.seen = lo  # the highest number in the range a node answering knows given (it delivered it)
        self.t_lo = t_lo  # the time of event ``lo`` (the last delivered before the gap)
        self.t_hi: Optional[float] = None  # the time of event ``hi`` (the first after it)

    def add(self, node: str, entries: Any, seen: Any = None) -> None:
        """A node's answer: [[n, items], ...], its own entries; only numbers in the range count."""
        self.answered.add(node)
        # (an open gap: a node's highest number may be past the loss's jump; only the entries found count)
        if type(seen) is int and not self.open and self.lo < seen < self.hi and seen > self.seen:
            self.seen = seen
        if type(entries) is not list:
            return
        for entry in entries:
            if type(entry) is list and len(entry) == 2 and type(entry[0]) is int and self.lo < entry[0] < self.hi:
                self.found.setdefault(entry[0], (node, entry[1]))

    @property
    def open(self) -> bool:
        """No entry showed this gap (``OPEN``): every number above ``lo`` a node kept or delivered is asked for."""
        return self.hi == OPEN

    def shown(self) -> None:
        """An open gap's end, once an entry with events was read meanwhile (``held``): its number; what was
        found from there on is read anyway."""
        n = first_n(self.held) if self.open else None
        if n is not None:
            self.hi = n
            self.found = {k: v for k, v in self.found.items() if k < n}

    def complete(self) -> bool:
        return self.asked <= self.answered

    def recovered(self) -> list[tuple[int, str, Any]]:
        """(n, writer, items) of every entry found, in number order."""
        return [(n, node, items) for n, (node, items) in sorted(self.found.items())]

    def lost(self) -> list[tuple[int, int]]:
        """The numbers known given and found nowhere, as (first, last) ranges: those between ``lo``
        and the last event found that no entry found covers (an entry's events take consecutive
        numbers from its ``n``), and up to the highest number a node answering delivered (``seen``:
        a node not behind when Redis lost its keys read them, their writer is gone or kept them no
        longer). Their writer kept them no longer (``Written`` is bounded) or did not answer. Above
        both, numbering may just have jumped: nothing is known."""
        out, expect = [], self.lo + 1
        for n, (_, items) in sorted(self.found.items()):
            if n > expect:
                out.append((expect, n - 1))
            expect = max(expect, n + len(_events(items)))
        if self.seen >= expect:
            out.append((expect, self.seen))
        return out

    def known(self) -> tuple[int, Optional[float]]:
        """The highest number in the range known given, and the latest time of the events known before it
        (the last delivered, ``t_lo``, and those found), or None when it is ``seen`` (a node answering
        delivered it). Above it up to ``hi`` nothing is known: a jump of the numbering, or events nobody
        knows were given (bridge_core/scale/gone.py asks the store about the time between)."""
        top, ts = self.lo, self.t_lo
        for n, (_, items) in self.found.items():
            events = _events(items)
            top = max(top, n + len(events) - 1)
            ts = _latest(ts, *(_ts(e) for e in events))
        return (top, ts) if self.seen <= top else (self.seen, None)

    def after(self) -> Optional[float]:
        """The earliest time of the events known after the range: the entry that showed the gap (``t_hi``)
        and those read meanwhile (two nodes' entries may reach Redis out of their events' times)."""
        known = [t for t in (self.t_hi, *(_ts(e) for e in self.events_after())) if t is not None]
        return min(known) if known else None

    def events_after(self) -> list:
        """The events of the entries read meanwhile (``held``), in the order read."""
        out: list = []
        for _, fields in self.held:
            try:
                out += _events(orjson.loads(fields[b"b"]))
            except (KeyError, TypeError, ValueError):
                continue
        return out


def _latest(*times: Optional[float]) -> Optional[float]:
    known = [t for t in times if t is not None]
    return max(known) if known else None


def _events(items: Any) -> list:
    """The events of an entry's items (each takes a number), in order."""
    return [i[1] for i in items if type(i) is list and i[:1] == ["e"] and len(i) == 2] if type(items) is list else []


def _ts(event: Any) -> Optional[float]:
    ts = event.get("ts") if type(event) is dict else None
    return ts if type(ts) is float else None


def first_ts(items: Any) -> Optional[float]:
    """The time of an entry's first event (its items as read), None when it has none."""
    events = _events(items)
    return _ts(events[0]) if events else None


def ends(fields: dict) -> Optional[tuple[int, int, Optional[float]]]:
    """An entry as read: its ``n``, the number of its last event (``n`` less one with none: a relay takes
    none) and that event's time; None when unreadable."""
    try:
        n, events = int(fields[b"n"]), _events(orjson.loads(fields[b"b"]))
    except (KeyError, TypeError, ValueError):
        return None
    return n, n + len(events) - 1, _ts(events[-1]) if events else None


def first_n(held: Iterable[tuple[str, dict]]) -> Optional[int]:
    """The number of the first entry with events among ``held`` ((node, fields) as read), None when none has."""
    for _, fields in held:
        try:
            if _events(orjson.loads(fields[b"b"])):
                return int(fields[b"n"])
        except (KeyError, TypeError, ValueError):
            continue
    return None
