"""Pheby's draft pacing, without I/O (docs/architecture.md, "Where each rule lives").

A streaming message is a run of cumulative ``message.delta`` drafts. Sending
every one is O(n^2) bytes; a client only ever replaces the bubble, so it gets
the first draft at once and then the newest text at most once per
``interval`` (40 ms by default). With ``full_chars`` set the interval adapts
to the draft's size: a draft of ``L`` characters may follow the previous
push after ``interval * L / full_chars``, never sooner than ``min_interval``
and never later than ``max_interval`` (the interval itself unless set
longer). ``L`` is the draft that goes out: a push falls due for the draft
offered then, and when it comes the newest draft may be much longer (an
answer arriving fast); if that one's own wait ends more than ``SLACK``
later, the push waits for it (``recheck``), and so on, never past
``max_interval`` after the previous push. A short answer streams at the
agent's pace (its drafts grow little while a push is due), and the
characters per second a message's drafts take stay under ``full_chars /
interval`` (51,200 at the front end's defaults) until the wait reaches
``max_interval`` (1 s there: drafts of 51,200 characters and more), then one
draft per ``max_interval``. Without that a long answer arriving fast (an
unpaced ``/bench 20000``, 80,000 characters in some 60 ms) got a draft of
most of its text every 40 ms before its ``message.complete``: nearly twice
the text's bytes per client; with it, the text outgrows each wait and the
final text is what is sent. Each push is encoded once, when it is made,
and the same bytes go to every client; a slow client's unsent draft is
replaced in place by the next push (the front end queues it under a
per-message key in the Outbox, ``draft_key``), and one that is still
unsent when its message completes is dropped (``pushed_again``: the first
draft alone always goes out), since ``message.complete`` follows.

While several messages stream at once, their later pushes go on the ticks
of one clock (``tick``, 5 ms: the first tick at or after a push is due), so
the pushes of every message due within a tick are made in one turn of the
loop and leave in one write per connection (bridge_core/kit/outbox.py), not one
write per message. A message streaming alone is pushed exactly when due.
A draft waits at most one tick longer than its interval, never less.

The front end feeds ``offer(now, event)`` with each text delta and
``end(message_id)`` when a message completes; ``offer`` answers ``Pace``:
push now, push at ``at``, or nothing (a push is already due). When the push
is due the front end calls ``push(message_id, now)``, which gives what to
queue (``protocol.Broadcast`` does both for the Pheby front end). The clock,
the timers and the sockets stay in the front end.
"""

from __future__ import annotations

import math
from typing import Any, Hashable, Mapping, Optional

import attrs

from bridge_core.model import events as ev
from bridge_core.model.wire import dumps

from .render import delta_frame

TICK = 0.005  # seconds: the clock of pushes while several messages stream (module docstring)
SLACK = 0.005  # seconds: a due push sends the newest draft if that draft's own wait ends within this
# the Pheby front end's defaults (from_options: [pheby] draft_interval_ms, draft_min_interval_ms,
# draft_max_interval_ms, draft_full_chars)
INTERVAL = 0.040
MIN_INTERVAL = 0.010
MAX_INTERVAL = 1.0
FULL_CHARS = 2048


@attrs.frozen
class Pace:
    """What to do with a draft just offered: push it ``now``, or at ``at`` (loop time); neither: already due."""

    now: bool = False
    at: Optional[float] = None


WAITING = Pace()
PUSH_NOW = Pace(now=True)


def draft_key(message_id: str) -> Hashable:
    """The Outbox key a message's drafts are queued under: a newer one replaces an unsent one."""
    return ("draft", message_id)


class DraftPacer:
    """The newest draft per message, when each was last pushed, and which have a push due."""

    __slots__ = ("interval", "min_interval", "max_interval", "full_chars", "tick", "drafts", "_sent", "_due",
                 "_again")

    def __init__(self, interval: float, *, min_interval: float = 0.0, max_interval: float = 0.0, full_chars: int = 0,
                 tick: float = TICK):
        self.interval = interval
        self.min_interval = min_interval
        self.max_interval = max_interval  # the longest wait for a long draft; never below the interval
        self.full_chars = full_chars  # 0: a fixed interval
        self.tick = tick  # 0: each push exactly when due
        self.drafts: dict[str, ev.TextDelta] = {}  # the messages streaming now: their newest draft
        self._sent: dict[str, float] = {}
        self._due: set[str] = set()
        self._again: set[str] = set()  # the messages pushed more than once

    def offer(self, now: float, event: ev.TextDelta) -> Pace:
        """A text delta arrived at ``now``: keep it as the newest draft of its message."""
        mid = event.message_id
        self.drafts[mid] = event
        if mid in self._due:
            return WAITING  # the push already due sends the newest draft
        sent = self._sent.get(mid)
        if sent is None:
            return PUSH_NOW  # the first draft of a message at once
        due = max(sent + self.interval_for(event.draft.length), now)
        if self._clocked():
            due = self._on_clock(due)
        elif due <= now:
            return PUSH_NOW
        self._due.add(mid)
        return Pace(at=due)

    def recheck(self, message_id: str, now: float) -> Pace:
        """A push of ``message_id`` fell due at ``now``: make it (``now``), or, if the newest draft's own wait
        (``interval_for`` its length, since the previous push) ends more than ``SLACK`` later, at that time."""
        e = self.drafts.get(message_id)
        sent = self._sent.get(message_id)
        if e is None or sent is None:
            return PUSH_NOW  # nothing to send (push answers None), or the first draft: at once
        due = sent + self.interval_for(e.draft.length)
        if due - now <= SLACK:
            return PUSH_NOW
        return Pace(at=self._on_clock(due) if self._clocked() else due)

    def _clocked(self) -> bool:
        """Do pushes go on the clock's ticks now (several messages stream: they share their turn)?"""
        return self.tick > 0 and len(self.drafts) > 1

    def _on_clock(self, due: float) -> float:
        """The first tick at or after ``due``."""
        tick = self.tick
        return math.ceil(due / tick - 1e-6) * tick

    def interval_for(self, length: int) -> float:
        """The least time between two pushes of a message whose newest draft is ``length`` characters."""
        full = self.full_chars
        if not full:
            return self.interval
        shortest = min(self.min_interval, self.interval)
        longest = max(self.max_interval, self.interval)
        return min(max(shortest, self.interval * length / full), longest)

    def push(self, message_id: str, now: float) -> Optional[tuple[bytes, Hashable]]:
        """The push of ``message_id`` at ``now``: (frame bytes, outbox key) to queue to every client, or None.

        The newest draft, encoded now. The first draft of a message goes out
        even if the message completes before it is sent (frames wait for the
        store's commit of what came before them); a later one replaces an
        unsent one in place, and is dropped if still unsent when the message
        completes (``pushed_again``).
        """
        self._due.discard(message_id)
        e = self.drafts.get(message_id)
        if e is None:
            return None
        if message_id in self._sent:
            self._again.add(message_id)
        self._sent[message_id] = now
        return dumps(delta_frame(e)), draft_key(message_id)

    def pushed_again(self, message_id: str) -> bool:
        """Was ``message_id`` pushed more than once (so an unsent draft of it is a later one)?"""
        return message_id in self._again

    def end(self, message_id: str) -> bool:
        """The message completed (or its run finished): forget it. True if a push was due (cancel it)."""
        self.drafts.pop(message_id, None)
        self._again.discard(message_id)
        self._sent.pop(message_id, None)
        if message_id in self._due:
            self._due.discard(message_id)
            return True
        return False


def from_options(opts: Mapping[str, Any], tick: float = TICK) -> DraftPacer:
    """The Pheby front end's pacer from its ``[pheby]`` options (``draft_interval_ms``,
    ``draft_min_interval_ms``, ``draft_max_interval_ms``, ``draft_full_chars``), the defaults above where unset:
    the wait after a push grows with the draft, the interval at ``full_chars``, down to the minimum for short
    drafts and up to the maximum for long ones."""
    return DraftPacer(
        float(opts.get("draft_interval_ms", INTERVAL * 1000)) / 1000.0,
        min_interval=float(opts.get("draft_min_interval_ms", MIN_INTERVAL * 1000)) / 1000.0,
        max_interval=float(opts.get("draft_max_interval_ms", MAX_INTERVAL * 1000)) / 1000.0,
        full_chars=int(opts.get("draft_full_chars", FULL_CHARS)),
        tick=tick,
    )
