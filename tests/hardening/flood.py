"""Cheap WebSocket clients for floods: thousands of sockets in one event loop.

``FloodWS`` is an asyncio Protocol (no StreamReader, no task per socket). It
does the HTTP upgrade, then either parses frames (answering protocol pings,
handing text frames to a callback) or, in ``scan`` mode, only counts byte
patterns in the raw stream (a flood of broadcasts is then read without
decoding each frame).
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from typing import Callable, Iterable, Optional

from .wsraw import OP_CLOSE, OP_PING, OP_PONG, encode_frame

SOURCES = [f"127.0.0.{i}" for i in range(2, 42)]  # spread ephemeral ports over 40 loopback addresses


class FloodWS(asyncio.Protocol):
    def __init__(self, path: str, host_header: str, headers: Optional[dict] = None,
                 on_text: Optional[Callable[["FloodWS", bytes], None]] = None,
                 scan: Iterable[bytes] = ()):
        self.path = path
        self.host_header = host_header
        self.headers = headers or {}
        self.on_text = on_text
        self.patterns = list(scan)
        self.counts = [0] * len(self.patterns)
        self._tail = b""
        self.transport: Optional[asyncio.Transport] = None
        self.upgraded: asyncio.Future = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future = asyncio.get_running_loop().create_future()
        self.close_code: Optional[int] = None
        self.status: Optional[int] = None
        self._buf = bytearray()
        self._handshake = True
        self.bytes = 0
        self.frames = 0
        self.pings = 0
        self.waiters: list[tuple[Callable[["FloodWS"], bool], asyncio.Future]] = []

    # --- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {self.path} HTTP/1.1", f"Host: {self.host_header}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        transport.write(("\r\n".join(lines) + "\r\n\r\n").encode())

    def data_received(self, data: bytes) -> None:
        self.bytes += len(data)
        if self._handshake:
            self._buf += data
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end])
            rest = bytes(self._buf[end + 4:])
            self._buf.clear()
            self._handshake = False
            try:
                self.status = int(head.split(b" ", 2)[1])
            except (IndexError, ValueError):
                self.status = 0
            if not self.upgraded.done():
                self.upgraded.set_result(self.status)
            if self.status != 101:
                self.transport.close()
                return
            if not rest:
                return
            data = rest
        if self.patterns:
            chunk = self._tail + data
            for i, p in enumerate(self.patterns):
                self.counts[i] += chunk.count(p)
            keep = max(len(p) for p in self.patterns) - 1
            # never count a match twice: the tail is shorter than any pattern
            self._tail = chunk[-keep:] if keep > 0 else b""
            self._check()
            return
        self._buf += data
        self._parse()
        self._check()

    def connection_lost(self, exc) -> None:
        if not self.upgraded.done():
            self.upgraded.set_result(self.status or 0)
        if not self.closed.done():
            self.closed.set_result(self.close_code or 1006)
        for _, fut in self.waiters:
            if not fut.done():
                fut.set_result(False)

    # --- frames ----------------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        pos = 0
        n = len(buf)
        while n - pos >= 2:
            b0, b1 = buf[pos], buf[pos + 1]
            ln = b1 & 0x7F
            hdr = 2
            if ln == 126:
                if n - pos < 4:
                    break
                ln = struct.unpack_from("!H", buf, pos + 2)[0]
                hdr = 4
            elif ln == 127:
                if n - pos < 10:
                    break
                ln = struct.unpack_from("!Q", buf, pos + 2)[0]
                hdr = 10
            if n - pos < hdr + ln:
                break
            payload = bytes(buf[pos + hdr: pos + hdr + ln])
            pos += hdr + ln
            op = b0 & 0x0F
            if op == OP_PING:
                self.pings += 1
                self.transport.write(encode_frame(payload, OP_PONG))
            elif op == OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                if not self.closed.done():
                    self.closed.set_result(self.close_code)
            elif op != OP_PONG:
                self.frames += 1
                if self.on_text is not None:
                    self.on_text(self, payload)
        if pos:
            del buf[:pos]

    def _check(self) -> None:
        if not self.waiters:
            return
        keep = []
        for pred, fut in self.waiters:
            if fut.done():
                continue
            if pred(self):
                fut.set_result(True)
            else:
                keep.append((pred, fut))
        self.waiters = keep

    async def wait(self, pred: Callable[["FloodWS"], bool], timeout: float) -> bool:
        if pred(self):
            return True
        fut = asyncio.get_running_loop().create_future()
        self.waiters.append((pred, fut))
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            return False

    # --- sending -----------------------------------------------------------------------------------

    def send(self, data) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode_frame(data.encode() if isinstance(data, str) else data))

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()


async def open_ws(port: int, path: str = "/ws", *, source: Optional[str] = None, headers: Optional[dict] = None,
                  on_text=None, scan: Iterable[bytes] = (), timeout: float = 30.0) -> FloodWS:
    loop = asyncio.get_running_loop()
    kw = {"local_addr": (source, 0)} if source else {}
    _, proto = await asyncio.wait_for(
        loop.create_connection(lambda: FloodWS(path, f"127.0.0.1:{port}", headers, on_text, scan),
                               "127.0.0.1", port, **kw), timeout)
    status = await asyncio.wait_for(proto.upgraded, timeout)
    if status != 101:
        raise ConnectionError(f"upgrade refused: HTTP {status}")
    return proto


async def open_many(n: int, factory: Callable[[int], "asyncio.Future"], batch: int = 500) -> list:
    """``factory(i)`` for i in range(n), ``batch`` at a time."""
    out = []
    for start in range(0, n, batch):
        out += await asyncio.gather(*(factory(i) for i in range(start, min(n, start + batch))))
    return out
