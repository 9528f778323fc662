"""The one place the nemesis reaches under aiohttp's client WebSocket: its raw transport, to cut
a socket with no close frame or mid-frame (a fault no public API makes). aiohttp is pinned in
pyproject.toml; tests/nemesis/test_rawsock.py fails if this stops finding the transport."""

from __future__ import annotations

import asyncio
from typing import Any, Optional


def transport_of(ws: Any) -> Optional[asyncio.Transport]:
    """The connection under a client WebSocket (aiohttp's private ``_writer.transport``)."""
    writer = getattr(ws, "_writer", None)
    return getattr(writer, "transport", None)
