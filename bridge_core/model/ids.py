"""Opaque identifiers.

Ids (conversations, runs, messages, tool calls, approvals) are random bytes
from the operating system's CSPRNG, as ``secrets.token_hex`` gives them, but
read 4 KiB at a time (``_Pool``): ``os.urandom`` releases the GIL around its
system call, and on a serving bridge the store's writer thread, woken by the
writes a run's start queues, takes it there; the loop then waits up to the
switch interval for it back, three times per run started (docs/performance.md,
"A team's start"). The pool hands out each byte
once, under a lock, and a forked child starts a pool of its own.
"""

from __future__ import annotations

import os
import re
import threading

HEX32 = re.compile(r"^[0-9a-f]{32}$")

POOL_BYTES = 4096  # one read of the OS's random source per 256 ids


class _Pool:
    """Random bytes read ahead from ``os.urandom``; every byte given out once."""

    def __init__(self, size: int = POOL_BYTES) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            pos = self._pos
            if pos + n > len(self._buf):
                self._buf = os.urandom(max(self.size, n))
                pos = 0
            self._pos = pos + n
            return self._buf[pos:pos + n]

    def reset(self) -> None:
        """Forget what was read ahead (a forked child must not repeat its parent's ids)."""
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.reset)


def new_id() -> str:
    """A 32-hex opaque id (conversations, runs, attachments)."""
    return _POOL.take(16).hex()


def short_id() -> str:
    return _POOL.take(6).hex()


def draft_message_id(run_id: str) -> str:
    return f"draft-{run_id}"


def is_hex32(value: object) -> bool:
    return isinstance(value, str) and bool(HEX32.match(value))
