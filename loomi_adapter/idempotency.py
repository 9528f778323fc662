"""A device's request memory, without I/O (docs/architecture.md, "Where each rule lives").

A request with a ``request_id`` runs once per (type, request_id) per device:
a repeat while it runs waits for the first one's outcome, a repeat after it
succeeded gets the same result, and a request that failed did nothing, so a
retry runs it again. The newest ``keep`` keys are remembered.

The cache holds, for a key in flight, the ``waiter`` the front end gave it
(an asyncio future there; anything here), and for a finished key its
result. The awaiting and the running stay in the front end.
"""

from __future__ import annotations

import collections
from typing import Any, Hashable, Optional

import attrs

KEEP = 256


@attrs.frozen
class Entry:
    """A remembered request: ``done`` with its ``value`` (the result), or in flight (``value``: its waiter)."""

    done: bool
    value: Any


class RequestCache:
    __slots__ = ("keep", "_entries")

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._entries: collections.OrderedDict[Hashable, Entry] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: Hashable) -> Optional[Entry]:
        """The request already seen under ``key`` (None: run it, after ``start``)."""
        return self._entries.get(key)

    def start(self, key: Hashable, waiter: Any) -> None:
        """``key`` runs now; repeats wait on ``waiter``. The oldest keys beyond ``keep`` are forgotten."""
        entries = self._entries
        entries[key] = Entry(False, waiter)
        entries.move_to_end(key)
        while len(entries) > self.keep:
            entries.popitem(last=False)

    def succeeded(self, key: Hashable, waiter: Any, result: Any) -> None:
        """The run ``waiter`` stood for returned ``result``: repeats get it (unless the key was forgotten)."""
        entry = self._entries.get(key)
        if entry is not None and entry.value is waiter and not entry.done:
            self._entries[key] = Entry(True, result)

    def failed(self, key: Hashable, waiter: Any) -> None:
        """The run ``waiter`` stood for failed, so it did nothing: forget it, a retry runs again."""
        entry = self._entries.get(key)
        if entry is not None and entry.value is waiter and not entry.done:
            del self._entries[key]
