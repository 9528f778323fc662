"""The one ordered log of shared events, and its fan-out.

The hub gives every event a place in one ordered log (``seq``) and calls each
subscriber synchronously, in publish order. Subscribers are the bridge's
persistence and the front ends: a front end renders an event once for its
protocol and puts the same bytes into the outbox of every connection
(``bridge_core/kit/outbox.py``). ``publish`` never awaits, so the agent never
blocks on a front end.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

log = logging.getLogger("agent_bridge.hub")

Subscriber = Callable[[int, Any], None]


class Hub:
    def __init__(self) -> None:
        self.seq = 0
        self._subs: list[Subscriber] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        self._subs.append(fn)

        def unsubscribe() -> None:
            try:
                self._subs.remove(fn)
            except ValueError:
                pass

        return unsubscribe

    def publish(self, event: Any) -> int:
        self.seq += 1
        seq = self.seq
        for fn in tuple(self._subs):
            try:
                fn(seq, event)
            except Exception:  # a broken subscriber never stops the others
                log.exception("hub subscriber %r failed on %s", fn, type(event).__name__)
        return seq

    def publish_at(self, seq: int, event: Any) -> None:
        """Publish ``event`` as number ``seq`` given elsewhere (the bus's cluster-wide number:
        bridge_core/scale/cluster.py), not the next local one; the log's number is then ``seq``."""
        self.seq = seq
        for fn in tuple(self._subs):
            try:
                fn(seq, event)
            except Exception:
                log.exception("hub subscriber %r failed on %s", fn, type(event).__name__)
