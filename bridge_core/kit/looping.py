"""The bridge's event loop: asyncio's own, with a hook at the end of every turn (docs/architecture.md, "Socket").

An asyncio loop turn runs every callback that is ready, then waits for I/O
in its selector. ``TurnSelector`` is that selector with one addition: the
callbacks registered with ``at_end`` run when the turn's callbacks are done,
just before the wait. The outboxes use it (``bridge_core/kit/outbox.py`` ``_Soon``):
everything put during a turn (an event's fan-out, a burst of replies) leaves
at the end of that turn, in one write per connection, without a turn of the
loop added for it, which a ``call_soon`` would cost (one more wait for I/O
and one more pass over the timers for every event).

``new_event_loop()`` makes such a loop; ``agent-bridge serve`` and the test
suite run on one. On any other loop (a host's own, such as the Hermes
gateway's) ``end_of_turn(loop)`` is None and the outboxes flush at the next
turn with ``call_soon``, as the same rule with one turn more.

A hook may make callbacks ready (a writer task woken for a peer that fell
behind): the wait is then not blocking, so they run at once. Knowing that
reads the loop's ready queue (``_ready``, CPython's ``BaseEventLoop`` since
3.4); a loop without it gets no hook.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import selectors
import weakref
from typing import Any, Callable, Optional

log = logging.getLogger("agent_bridge.loop")


class TurnSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The platform's default selector, running the turn's ``at_end`` callbacks before it waits."""

    def __init__(self) -> None:
        super().__init__()
        self._at_end: list[Callable[[], None]] = []
        self._ready: Any = None  # the loop's ready queue, once bound

    def bind(self, loop: asyncio.AbstractEventLoop) -> bool:
        ready = getattr(loop, "_ready", None)
        if not isinstance(ready, collections.deque):
            return False
        self._ready = ready
        return True

    def at_end(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` once, when the callbacks of the current turn are done."""
        self._at_end.append(fn)

    def select(self, timeout: Optional[float] = None) -> list:
        if self._at_end:
            hooks, self._at_end = self._at_end, []
            for fn in hooks:
                try:
                    fn()
                except Exception:  # never into the loop's own select
                    log.exception("end-of-turn callback %r failed", fn)
            # a hook made a callback ready, or registered another hook (a flush that closed a connection
            # whose handler put a frame): do not block before they run
            if self._ready or self._at_end:
                timeout = 0
        return super().select(timeout)


_SELECTORS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TurnSelector]" = weakref.WeakKeyDictionary()


def new_event_loop() -> asyncio.AbstractEventLoop:
    """An asyncio selector loop (signals and subprocesses as usual) whose turns end with ``at_end`` hooks."""
    selector = TurnSelector()
    loop = asyncio.SelectorEventLoop(selector)
    if selector.bind(loop):
        _SELECTORS[loop] = selector
    return loop


def end_of_turn(loop: asyncio.AbstractEventLoop) -> Optional[TurnSelector]:
    """The selector whose ``at_end`` runs at the end of ``loop``'s current turn; None for any other loop."""
    return _SELECTORS.get(loop)


class Policy(asyncio.DefaultEventLoopPolicy):  # type: ignore[misc,valid-type]
    """An event loop policy whose new loops are ``new_event_loop()``'s (for runners that take a policy)."""

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return new_event_loop()
