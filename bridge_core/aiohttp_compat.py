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
relies on; when it is not (another aiohttp, a socket closing), callers fall
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


def _frame_bytes(frames: list) -> tuple[bytes, int]:
    """``frames`` as unmasked text frames in one buffer, and the count aiohttp's flow control adds."""
    parts = []
    total = 0
    for data in frames:
        n = len(data)
        if n < 126:
            parts.append(_LEN1(0x81, n))
        elif n < 65536:
            parts.append(_LEN2(0x81, 126, n))
        else:
            parts.append(_LEN3(0x81, 127, n))
        parts.append(data)
        total += n + 10
    return b"".join(parts), total


def write_now(ws: web.WebSocketResponse, data: bytes) -> bool:
    """Write one text frame at once if the connection's previous writes have drained; else False.

    Drained: the transport buffers nothing (the kernel took every earlier
    write), the protocol is not paused and the writer's flow-control count is
    under its limit, so nothing would have to be awaited. Then the frame
    goes out synchronously, with the same accounting as ``write_text_frames``;
    otherwise the caller queues it for the next (batched) write.
    """
    if not batch_ready(ws):
        return False
    writer = _writer(ws)
    transport = writer.transport
    if transport.is_closing() or transport.get_write_buffer_size():
        return False
    if getattr(getattr(writer, "protocol", None), "_paused", True):
        return False
    buf, total = _frame_bytes([data])
    if writer._output_size + total > writer._limit:
        return False
    transport.write(buf)
    writer._output_size += total
    return True


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
    writer._output_size += total
    if writer._output_size > writer._limit:
        writer._output_size = 0
        protocol = writer.protocol
        if getattr(protocol, "_paused", False):
            await protocol._drain_helper()
