"""The one module that touches aiohttp internals (docs/architecture.md, "Where each rule lives").

Everything else in the bridge uses aiohttp's public API. aiohttp has no
public way to write a batch of WebSocket frames with one transport write,
and that batching is what keeps a busy connection's fan-out cheap (one
syscall per batch instead of one per frame, see bench/). So this module
does it with the writer's internals, and only here:

- ``WebSocketResponse._writer``: the frame writer (its ``transport``,
  ``protocol``, ``_closing``, ``_output_size``, ``_limit``);
- ``BaseProtocol._paused`` and ``_drain_helper()``: the flow-control wait
  aiohttp's own ``send_frame`` does once ``_limit`` bytes are buffered.

``batch_ready`` says whether a socket's writer is in the plain state this
relies on (``FrameWriter.ready`` also that it is not paused); when it is not (another aiohttp, a socket closing), callers fall
back to the public ``send_frame``. ``check_internals`` lists what is missing
from the installed aiohttp; tests/core/test_aiohttp_compat.py fails loudly
on it, so an aiohttp release that changes them is noticed before it ships
(pyproject.toml pins aiohttp to the tested range).
"""

from __future__ import annotations

import struct
from typing import Any, Optional

from aiohttp import web

_LEN1 = struct.Struct("!BB").pack
_LEN2 = struct.Struct("!BBH").pack
_LEN3 = struct.Struct("!BBQ").pack
HEAD_MAX = 10  # a frame's header counts this many bytes in aiohttp's flow control (the most one takes: _count)

# what the batched writer reads or writes on aiohttp's objects
WRITER_ATTRS = ("transport", "protocol", "_closing", "_output_size", "_limit")
PROTOCOL_ATTRS = ("_paused", "_drain_helper")


def _writer(ws: web.WebSocketResponse) -> Any:
    return getattr(ws, "_writer", None)


def check_internals(ws: Optional[web.WebSocketResponse] = None) -> list[str]:
    """What the batched writer needs and the installed aiohttp lacks (empty: all there).

    With a prepared ``ws`` its live writer and protocol are checked too.
    """
    from aiohttp import base_protocol

    missing = []
    if not hasattr(web.WebSocketResponse, "_writer"):
        missing.append("WebSocketResponse._writer")
    if not callable(getattr(base_protocol.BaseProtocol, "_drain_helper", None)):
        missing.append("BaseProtocol._drain_helper")
    if "_paused" not in getattr(base_protocol.BaseProtocol, "__slots__", ()) and not hasattr(
        base_protocol.BaseProtocol, "_paused"
    ):
        missing.append("BaseProtocol._paused")
    if ws is not None:
        writer = _writer(ws)
        if writer is None:
            missing.append("WebSocketResponse._writer (prepared socket)")
        else:
            missing += [f"WebSocketWriter.{a}" for a in WRITER_ATTRS if not hasattr(writer, a)]
            protocol = getattr(writer, "protocol", None)
            missing += [f"protocol.{a}" for a in PROTOCOL_ATTRS if not hasattr(protocol, a)]
    return missing


def batch_ready(ws: web.WebSocketResponse) -> bool:
    """Whether ``write_text_frames`` can write to this socket (else: ``send_frame`` per frame)."""
    writer = _writer(ws)
    return (
        writer is not None
        and getattr(writer, "transport", None) is not None
        and not getattr(writer, "_closing", True)
        and hasattr(writer, "_output_size")
        and hasattr(writer, "_limit")
    )


def _text_head(n: int) -> bytes:
    """An unmasked, final text frame's header for an ``n``-byte payload (RFC 6455 5.2)."""
    if n < 126:
        return _LEN1(0x81, n)
    if n < 65536:
        return _LEN2(0x81, 126, n)
    return _LEN3(0x81, 127, n)


def _one_frame(data: bytes) -> tuple[bytes, int]:
    """One unmasked text frame, and the count aiohttp's flow control adds for it."""
    n = len(data)
    return _text_head(n) + data, n + HEAD_MAX


def _frame_bytes(frames: list) -> tuple[bytes, int]:
    """``frames`` as unmasked text frames in one buffer, and the count aiohttp's flow control adds."""
    if len(frames) == 1:  # one frame, nothing to join
        return _one_frame(frames[0])
    parts = []
    total = 0
    for data in frames:
        n = len(data)
        parts.append(_text_head(n))
        parts.append(data)
        total += n + HEAD_MAX
    return b"".join(parts), total


class FrameWriter:
    """Synchronous batched writes to one prepared socket (the Outbox's path while the peer keeps up).

    ``ready()``: the writer is in the plain state (``batch_ready``), its
    transport is not closing and aiohttp's flow control has not paused it,
    so a write needs no waiting. ``write(frames)`` then puts ``frames`` on
    the transport as text frames in one ``transport.write`` (one syscall when
    the transport buffers nothing, else an append to its buffer), with
    aiohttp's accounting: past ``_limit`` bytes the count starts again and
    the next ``ready()`` reports a pause, which the caller waits out with
    ``write_text_frames`` (it awaits the drain).
    """

    __slots__ = ("ws", "_w", "_transport", "_protocol")

    def __init__(self, ws: web.WebSocketResponse):
        self.ws = ws
        self._w: Any = None  # the aiohttp writer, looked up once the socket is prepared
        self._transport: Any = None
        self._protocol: Any = None

    def ready(self) -> bool:
        w = self._w
        if w is None:
            if not batch_ready(self.ws):
                return False
            w = self._w = _writer(self.ws)
            self._transport = w.transport
            self._protocol = w.protocol
        if w._closing or w.transport is not self._transport or self._transport.is_closing():
            return False
        return not getattr(self._protocol, "_paused", True)

    def write_one(self, data: bytes) -> bool:
        """``ready()`` and then ``write([data])``, for the flush of one frame; False (nothing written) when not ready."""
        if not self.ready():
            return False
        # once per connection per event at a run's pace: _one_frame, _text_head and _count inlined
        w = self._w
        n = len(data)
        self._transport.write((_LEN1(0x81, n) if n < 126 else _LEN2(0x81, 126, n) if n < 65536
                               else _LEN3(0x81, 127, n)) + data)
        _count(w, n + HEAD_MAX)  # a pause shows in ready()
        return True

    def write(self, frames: list) -> None:
        """Only after ``ready()``: ``frames`` (bytes, UTF-8 JSON) as unmasked text frames, one transport write."""
        w = self._w
        buf, total = _frame_bytes(frames)
        self._transport.write(buf)
        _count(w, total)  # a pause shows in ready()


def _count(writer: Any, total: int) -> bool:
    """The writer's buffered count as aiohttp's ``send_frame`` keeps it (``total`` counts 10 header bytes a
    frame, the most a header takes, so the count is never below aiohttp's): ``total`` bytes added; True
    (and the count reset) once past its limit, when a paused transport must be waited for."""
    n = writer._output_size + total
    if n > writer._limit:
        writer._output_size = 0
        return True
    writer._output_size = n
    return False


async def write_text_frames(ws: web.WebSocketResponse, frames: list) -> None:
    """Write ``frames`` (bytes, UTF-8 JSON) as unmasked text frames with one transport write.

    Only after ``batch_ready(ws)``. Uncompressed frames are valid even when
    permessage-deflate was negotiated. Flow control is aiohttp's own: once
    the writer's buffered count passes its limit, wait for the transport to
    drain if it paused us.
    """
    writer = _writer(ws)
    transport = writer.transport
    if transport.is_closing():
        raise ConnectionResetError("Cannot write to closing transport")
    buf, total = _frame_bytes(frames)
    transport.write(buf)
    if _count(writer, total):
        protocol = writer.protocol
        if getattr(protocol, "_paused", False):
            await protocol._drain_helper()
