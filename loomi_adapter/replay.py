"""Loomi's seq numbering and replay window, without I/O: the one seq rule (docs/loomi.md, "Seq and replay").

Every frame to a device takes the device's next seq. Events are also kept:
the last ``size`` of them, as the exact frames sent, for a ``hello`` with
``last_seq`` to replay. ``floor`` is the seq of the newest event no longer
kept: a ``last_seq`` below it missed an event that is gone (``truncated``).

``SeqLog`` is one device's log. ``Numbering`` numbers a node's frames for
every device it serves, one event at a time: each frame the node stores gets
the node's next frame number ``k`` (its rows: ``loomi_events.n`` on one node,
``loomi_frames.m`` with several), and each device's frame is that body with
the device's next seq spliced in front; a device's seq is ``k + offset``, and
the *marks* record where a device's offset changed (a reply, a ping or a
restart took seqs in between), so the stored rows rebuild every frame byte for
byte. The single node (``devices.Registry``) and several nodes
(``cluster.ClusterRegistry``) both number through it; they differ only in the
rows they store and in which devices they number. What makes a seq durable
(the reservation in the store, the rows' journal) is theirs: ``Numbering``
calls ``reserve`` when a seq passes its reservation's limit, before any frame
carrying it is queued.
"""

from __future__ import annotations

import collections
import itertools
from typing import Any, Callable, Iterable, Mapping, Optional

import attrs

from . import codec

WINDOW = codec.REPLAY_WINDOW


@attrs.frozen
class Resume:
    """What a resuming hello gets: ``hello.ok``'s seq, the replayed frames (in seq order), truncation."""

    seq: int
    frames: list[bytes]
    truncated: bool


class SeqLog:
    """One device's numbering: the last seq given and the window of its last ``size`` events' frames."""

    __slots__ = ("seq", "known_floor", "kept", "size")

    def __init__(self, seq: int = 0, floor: int = 0, size: int = WINDOW,
                 frames: Iterable[tuple[int, bytes]] = ()):
        self.seq = seq  # the last seq given out
        self.size = size
        self.known_floor = floor  # every event with seq <= it may be gone (what the store or a claim said)
        # the window and, once it is full, the event it pushed out last before it: that one's seq is the floor.
        # Keeping it costs nothing per event (the deque drops the one before), where tracking the floor at
        # each append costs a comparison per device per frame on the hot path
        self.kept: collections.deque[tuple[int, bytes]] = collections.deque(frames, maxlen=size + 1)

    @property
    def floor(self) -> int:
        """Every event with seq <= floor may be gone: a ``last_seq`` below it missed one (``truncated``)."""
        kept = self.kept
        if len(kept) > self.size:
            return max(self.known_floor, kept[0][0])
        return self.known_floor

    @property
    def window(self) -> list[tuple[int, bytes]]:
        """The kept events' (seq, frame), the last ``size`` of them.

        A kept entry is the frame itself (``keep``, a restart's or a claim's rows) or, as ``Numbering``
        keeps an event, the node's body without its ``{`` (the tail every device's frame of it shares:
        a frame starts with ``{``, a tail never does), whose frame is ``codec.stamp_tail(seq, tail)``,
        byte for byte the frame sent."""
        stamp = codec.stamp_tail
        return [(s, f if f[:1] == b"{" else stamp(s, f))
                for s, f in itertools.islice(self.kept, max(0, len(self.kept) - self.size), None)]

    def keep(self, seq: int, frame: bytes) -> Optional[int]:
        """Keep an event frame (or its tail, see ``window``) for replay; returns the seq of the event it pushed
        out of the window, if any."""
        kept = self.kept
        kept.append((seq, frame))
        return kept[0][0] if len(kept) > self.size else None

    def resume(self, last_seq: Optional[int]) -> Resume:
        """A hello reporting ``last_seq`` (None: nothing to replay).

        ``hello.ok`` carries the reported seq, never a new one: an app drops
        every frame below what it processed, so a higher ``hello.ok`` would
        make it drop the replay that follows. A ``last_seq`` above anything
        given out (the state was lost) moves the numbering up to it, so the
        app's next frames are not dropped either.
        """
        if last_seq is None:
            return Resume(self.seq, [], False)
        if last_seq > self.seq:
            self.seq = last_seq
            return Resume(last_seq, [], True)
        # the one place a replay is made (docs/architecture.md): every replayed frame passes here
        frames = [codec.mark_replayed(f) for s, f in self.window if s > last_seq]
        return Resume(last_seq, frames, last_seq < self.floor)


def restored(rows: list[tuple[int, bytes]], seq: int, floor: int, size: int = WINDOW) -> SeqLog:
    """A device's log after a restart from its stored rows (ascending seq).

    The store keeps the newest evicted event beside the window (pruning
    deletes only below the floor), so with more than ``size`` rows the floor
    is the row just before the last ``size``; otherwise nothing was evicted
    since ``floor`` was stored.
    """
    if len(rows) > size:
        floor = max(floor, rows[-size - 1][0])
        rows = rows[-size:]
    if rows:
        seq = max(seq, rows[-1][0])
    return SeqLog(seq=seq, floor=floor, size=size, frames=rows)


def frames_of(events: list[tuple[int, bytes]], marks: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
    """A device's stored frames (seq, frame), rebuilt from the node's stored bodies ``(k, tail)`` and the
    device's marks ``(from_k, offset)`` (ascending): from a mark on, the body ``k`` had seq ``k + offset``."""
    if not marks:
        return []
    out = []
    i = 0
    for k, tail in events:
        if k < marks[0][0]:
            continue  # before the device had any event
        while i + 1 < len(marks) and marks[i + 1][0] <= k:
            i += 1
        s = k + marks[i][1]
        out.append((s, codec.stamp_tail(s, tail)))
    return out


# A numbered device, as ``Numbering`` reads it (devices.Device): ``log`` (its SeqLog), ``seqs`` (its
# bridge_core.model.seqalloc.SeqReservation), ``offset`` (its seq minus the frame number of its last mark, None
# before any) and ``skip_to`` (events up to this number were numbered for it elsewhere: several nodes).
Numbered = Any


class Numbering:
    """A node's numbering of its devices' frames over the frames it stores: the one seq rule.

    ``streams`` maps a device id to every device this node numbers (one node: every paired device,
    connected or not; several nodes: the devices connected here). ``k`` is the number of the last frame
    stored. ``reserve(device)`` is called when a device's seq passed its reservation's limit.
    """

    __slots__ = ("k", "streams", "reserve", "live_only")

    def __init__(self, streams: Mapping[str, Numbered], reserve: Callable[[Numbered], None], k: int = 0,
                 live_only: bool = False):
        self.k = k
        self.streams = streams
        self.reserve = reserve
        # frames only for the devices with a connection (``d.conn``): one node numbers its paired devices
        # whether connected or not, and a device offline needs its seqs and window, not a frame now
        self.live_only = live_only

    def record(self, tails: list[bytes], n: int = 0) -> tuple[int, list[tuple[Numbered, int, int]],
                                                               list[tuple[Numbered, bytes]]]:
        """Event ``n`` (its bodies without their ``{``) for every device: the frame number before it,
        the marks ``(device, k, offset)`` of the devices whose offset changed, and the frames ``(device,
        frame)`` (each device's next seq spliced in; a device's frames in order; with ``live_only``, only
        the connected devices'). Each device's window keeps the event's tail with its seq (one body shared
        by every device's window, no frame kept per device: ``SeqLog.window``). The node stores the rows
        before any frame leaves."""
        k = k0 = self.k
        marks: list[tuple[Numbered, int, int]] = []
        out: list[tuple[Numbered, bytes]] = []
        frame = codec.SEQ_FRAME
        reserve = self.reserve
        streams = self.streams.values()
        live_only = self.live_only
        # the hot path, per device per frame: a seq, the window's entry and, for a connected device, the
        # splice (SeqLog.keep and codec.stamp_tail inlined)
        for tail in tails:
            k += 1
            for d in streams:
                if n <= d.skip_to:
                    continue  # numbered for it by another node that was ahead in the stream
                log = d.log
                s = log.seq + 1
                log.seq = s
                if s - k != d.offset:  # a reply or a ping took seqs since its last frame
                    d.offset = s - k
                    marks.append((d, k, s - k))
                if s > d.seqs.limit:
                    reserve(d)
                log.kept.append((s, tail))
                if live_only and d.conn is None:
                    continue
                out.append((d, frame % (s, s, tail)))
        self.k = k
        return k0, marks, out

    def next_seq(self, d: Numbered) -> int:
        """A seq for a frame that is not replayed (replies, pings)."""
        log = d.log
        s = log.seq + 1
        log.seq = s
        if s > d.seqs.limit:
            self.reserve(d)
        return s
