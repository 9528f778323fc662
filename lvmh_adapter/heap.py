"""The C heap given back after a whole session list (glibc's ``malloc_trim``; elsewhere nothing).

A spec client's whole ``session_list`` and ``GET /api/sessions`` are megabytes at 10,000
conversations (3.7 MB), and leave through a few transient copies of that size: the encoded runs
and frame (listing.py), the frame's WebSocket header joined to it, the socket's send buffer. Once
glibc has freed one such buffer from an mmap it raises its mmap threshold to that size, so the
next ones come from the heap, and what they leave free there stays in the process (2-4 MB after
four lists, measured with ``mallinfo2`` and ``/proc/self/smaps``: docs/performance.md).
``trim()`` hands those free pages back; it walks the heap (0.2-1.3 ms in a server holding 10,000
conversations), so it runs once a whole list is let go, not per send.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any, Optional


def _malloc_trim() -> Optional[Any]:
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to do
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_TRIM = _malloc_trim()
trims = 0  # how many times the heap was trimmed (tests)


def trim() -> bool:
    """Give the heap's free pages back to the system; False where that is not available."""
    global trims
    if _TRIM is None:
        return False
    _TRIM(0)
    trims += 1
    return True


__all__ = ["trim"]
