"""A minimal WebSocket client over a raw asyncio stream.

aiohttp's client is fine for protocol tests; the attacks need what it will not
do: stop answering pings, send half a frame and vanish, send garbage bytes,
hold thousands of sockets cheaply, or read a flood without decoding every
frame (``scan``).
"""

from __future__ import annotations

import asyncio
import base64
import os
import struct
from typing import Optional

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10


def encode_frame(payload: bytes, opcode: int = OP_TEXT, fin: bool = True, mask: bool = True,
                 declared_len: Optional[int] = None) -> bytes:
    """A client frame (masked). ``declared_len`` lies about the length (oversize/truncation attacks)."""
    n = len(payload) if declared_len is None else declared_len
    head = bytes([(0x80 if fin else 0) | opcode])
    mbit = 0x80 if mask else 0
    if n < 126:
        head += bytes([mbit | n])
    elif n < 65536:
        head += bytes([mbit | 126]) + struct.pack("!H", n)
    else:
        head += bytes([mbit | 127]) + struct.pack("!Q", n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + _mask(payload, key)


def _mask(data: bytes, key: bytes) -> bytes:
    if not data:
        return b""
    k = int.from_bytes((key * (len(data) // 4 + 1))[: len(data)], "big")
    return (int.from_bytes(data, "big") ^ k).to_bytes(len(data), "big")


class HandshakeRefused(Exception):
    def __init__(self, status: int, head: bytes, body: bytes = b""):
        super().__init__(f"HTTP {status}")
        self.status = status
        self.head = head
        self.body = body


class RawWS:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader = reader
        self.writer = writer
        self.close_code: Optional[int] = None
        self.close_reason: bytes = b""
        self.pings = 0

    @classmethod
    async def connect(cls, port: int, path: str = "/ws", headers: Optional[dict] = None,
                      host: str = "127.0.0.1", local_addr: Optional[str] = None, timeout: float = 10.0) -> "RawWS":
        kw = {"local_addr": (local_addr, 0)} if local_addr else {}
        # a small StreamReader limit: a client that does not read really stops reading
        # (asyncio pauses the socket above 2 x limit instead of buffering megabytes for it)
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port, limit=1 << 16, **kw), timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket", "Connection: Upgrade",
                 f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except BaseException:
            writer.transport.abort()
            raise
        status = int(head.split(b" ", 2)[1])
        if status != 101:
            body = b""
            try:
                body = await asyncio.wait_for(reader.read(65536), 1.0)
            except Exception:
                pass
            writer.transport.abort()
            raise HandshakeRefused(status, head, body)
        return cls(reader, writer)

    # --- sending ------------------------------------------------------------------------------

    def send_text(self, text) -> None:
        data = text.encode() if isinstance(text, str) else text
        self.writer.write(encode_frame(data, OP_TEXT))

    def send_binary(self, data: bytes) -> None:
        self.writer.write(encode_frame(data, OP_BINARY))

    def send_raw(self, data: bytes) -> None:
        self.writer.write(data)

    def pong(self, payload: bytes = b"") -> None:
        self.writer.write(encode_frame(payload, OP_PONG))

    async def drain(self) -> None:
        await self.writer.drain()

    def abort(self) -> None:
        """Vanish: RST, no close frame."""
        self.writer.transport.abort()

    async def close(self, code: int = 1000) -> None:
        try:
            self.writer.write(encode_frame(struct.pack("!H", code), OP_CLOSE))
            await asyncio.wait_for(self.writer.drain(), 1.0)
        except Exception:
            pass
        self.writer.transport.abort()

    # --- receiving ---------------------------------------------------------------------------

    async def recv_frame(self, timeout: float = 10.0) -> tuple[int, bytes]:
        """The next complete message (opcode, payload); ``(OP_CLOSE, b"")`` at EOF."""
        return await asyncio.wait_for(self._recv(), timeout)

    async def _recv(self) -> tuple[int, bytes]:
        parts = []
        first_op = None
        while True:
            try:
                b0, b1 = await self.reader.readexactly(2)
            except asyncio.IncompleteReadError:
                return OP_CLOSE, b""
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", await self.reader.readexactly(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", await self.reader.readexactly(8))[0]
            key = await self.reader.readexactly(4) if b1 & 0x80 else None
            payload = await self.reader.readexactly(n)
            if key:
                payload = _mask(payload, key)
            op = b0 & 0x0F
            if op == OP_CLOSE:
                self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                self.close_reason = payload[2:]
                return OP_CLOSE, payload
            if op == OP_PING:
                self.pings += 1
                return OP_PING, payload
            if op == OP_PONG:
                return OP_PONG, payload
            if op != OP_CONT:
                first_op = op
            parts.append(payload)
            if b0 & 0x80:
                return first_op or OP_TEXT, b"".join(parts)

    async def recv_text(self, timeout: float = 10.0, answer_pings: bool = True) -> Optional[bytes]:
        """The next text/binary message, answering pings; None once the server closed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            op, data = await self.recv_frame(max(0.01, deadline - loop.time()))
            if op == OP_PING:
                if answer_pings:
                    self.pong(data)
                continue
            if op == OP_PONG:
                continue
            if op == OP_CLOSE:
                return None
            return data

    async def wait_closed(self, timeout: float = 10.0) -> bool:
        """Read (and drop) everything until the server closes the connection; False on timeout."""
        try:
            await asyncio.wait_for(self._drain_until_eof(), timeout)
            return True
        except asyncio.TimeoutError:
            return False

    async def _drain_until_eof(self) -> None:
        while True:
            op, _ = await self._recv()
            if op == OP_CLOSE:
                # after a close frame, the server ends the TCP connection
                try:
                    while await self.reader.read(65536):
                        pass
                except (ConnectionError, OSError):
                    pass
                return

    async def eof(self, timeout: float = 10.0) -> bool:
        """True once the TCP connection is closed by the server (reading and discarding bytes)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        try:
            while loop.time() < deadline:
                chunk = await asyncio.wait_for(self.reader.read(1 << 20), max(0.01, deadline - loop.time()))
                if not chunk:
                    return True
        except asyncio.TimeoutError:
            return False
        except (ConnectionError, OSError):
            return True
        return False
