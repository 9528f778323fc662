"""Seq-block reservation, the one rule (pure: no I/O; docs/security.md, docs/loomi.md).

A front end that numbers frames (Loomi per device, lvmh per session) must never
hand out a seq twice, even after a ``kill -9``; writing every seq would put a
write on every frame. Instead an upper bound of the seqs handed out, the
*reservation*, is recorded ahead, one block at a time: when a seq passes the
limit (``margin`` below the reservation), the next reservation (``seq +
block``) is due and the caller records it before any frame with that seq can
leave. After a restart, numbering goes on above the recorded reservation.
"""

from __future__ import annotations

from typing import Optional


class SeqReservation:
    """The reservation of one numbered sequence. ``need(seq)`` after handing out ``seq``
    answers the reservation to record now, or None when the recorded one still covers it."""

    __slots__ = ("block", "margin", "reserved", "limit")

    def __init__(self, block: int, reserved: int = 0, *, margin: Optional[int] = None):
        self.block = block
        self.margin = block // 2 if margin is None else margin
        self.reserved = reserved
        self.limit = reserved - self.margin

    def set(self, reserved: int) -> None:
        """What the store says was reserved (at start)."""
        self.reserved = reserved
        self.limit = reserved - self.margin

    def restart(self, seq: int) -> int:
        """A fresh block above ``seq`` (the last seq given out): the reservation to record."""
        self.set(seq + self.block)
        return self.reserved

    def need(self, seq: int) -> Optional[int]:
        if seq <= self.limit:
            return None
        self.set(seq + self.block)
        return self.reserved

    def watch(self, seq: int) -> None:
        """Make ``limit`` (the caller's one comparison per seq) ``seq`` until ``unwatch``: a caller that
        recorded the next reservation without waiting for it checks, at the first seq above the one
        recorded before, whether it is durable yet."""
        self.limit = min(self.limit, seq)

    def unwatch(self) -> None:
        self.limit = self.reserved - self.margin
