"""A device's seq numbering and replay window, without I/O (docs/loomi.md, "Seq and replay").

Every frame to a device takes the device's next seq. Events are also kept:
the last ``size`` of them, as the exact frames sent, for a ``hello`` with
``last_seq`` to replay. ``floor`` is the seq of the newest event no longer
kept: a ``last_seq`` below it missed an event that is gone (``truncated``).

The registry (devices.py) wraps this with the durable side: the seq blocks
reserved in the database and the window's rows.
"""

from __future__ import annotations

import collections
from typing import Iterable, Optional

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
    __slots__ = ("seq", "floor", "window")

    def __init__(self, seq: int = 0, floor: int = 0, size: int = WINDOW,
                 frames: Iterable[tuple[int, bytes]] = ()):
        self.seq = seq  # the last seq given out
        self.floor = floor  # every event with seq <= floor may be gone
        self.window: collections.deque[tuple[int, bytes]] = collections.deque(frames, maxlen=size)

    def keep(self, seq: int, frame: bytes) -> Optional[int]:
        """Keep an event frame for replay; returns the seq of the event it pushed out, if any."""
        window = self.window
        evicted = None
        if len(window) == window.maxlen:
            evicted = window[0][0]
            self.floor = evicted
        window.append((seq, frame))
        return evicted

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
