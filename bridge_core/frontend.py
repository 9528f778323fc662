"""What every front end shares: its aiohttp site, its connections, frame sending.

A front end (``pheby_adapter``, ``loomi_adapter``, ``lvmh_adapter``) subclasses
``FrontEnd``, builds its ``web.Application`` and subscribes to the hub. The
CLI (or the Hermes plugin) starts it on a host and port and stops it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import WSMsgType, web

from .tasks import TaskSet

if TYPE_CHECKING:
    from .bridge import Bridge
    from .config import Config

log = logging.getLogger("agent_bridge.frontend")


class PortInUse(OSError):
    pass


def make_ssl_context(cert: Optional[str], key: Optional[str]) -> Optional[ssl.SSLContext]:
    if not (cert and key):
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    return ctx


_LEN1 = struct.Struct("!BB").pack
_LEN2 = struct.Struct("!BBH").pack
_LEN3 = struct.Struct("!BBQ").pack


STORE_KEY: web.AppKey = web.AppKey("agent_bridge_store")


class ws_text_sender:
    """An Outbox sender: pre-encoded JSON bytes as WebSocket text frames.

    ``many`` writes a batch of frames with one transport write (server frames
    are unmasked; uncompressed frames are valid even when permessage-deflate
    was negotiated). It falls back to ``send_frame`` per frame whenever the
    aiohttp writer is not in the plain state it expects.

    Durable before delivered: ``durable_store`` is the front end's store (its
    app carries it under ``STORE_KEY``); the Outbox lets frames leave only once
    the store has committed every write queued before them (``Store.synced``),
    so a client never holds an event a crash could take back.
    """

    __slots__ = ("ws", "_store")

    def __init__(self, ws: web.WebSocketResponse):
        self.ws = ws
        self._store: Any = False

    def durable_store(self) -> Any:
        """The store whose writes this connection's frames wait for (the Outbox awaits it)."""
        if self._store is False:
            req = getattr(self.ws, "_req", None)
            app = getattr(req, "app", None) if req is not None else None
            self._store = app.get(STORE_KEY) if app is not None else None
        return self._store

    async def __call__(self, data: bytes) -> None:
        await self.ws.send_frame(data, WSMsgType.TEXT)

    async def many(self, frames: list) -> None:
        writer = getattr(self.ws, "_writer", None)
        transport = getattr(writer, "transport", None)
        if (
            writer is None
            or transport is None
            or getattr(writer, "_closing", True)
            or not hasattr(writer, "_output_size")
            or not hasattr(writer, "_limit")
        ):
            for data in frames:
                await self.ws.send_frame(data, WSMsgType.TEXT)
            return
        if transport.is_closing():
            raise ConnectionResetError("Cannot write to closing transport")
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
        transport.write(b"".join(parts))
        writer._output_size += total
        if writer._output_size > writer._limit:
            writer._output_size = 0
            protocol = writer.protocol
            if getattr(protocol, "_paused", False):
                await protocol._drain_helper()


class FailedAuthLimiter:
    """Counts failed authentications per source address in a sliding window."""

    def __init__(self, limit: int = 5, window: float = 60.0):
        self.limit = limit
        self.window = window
        self._fails: dict[str, list[float]] = {}

    def _recent(self, addr: str, now: float) -> list[float]:
        times = [t for t in self._fails.get(addr, ()) if now - t < self.window]
        if times:
            self._fails[addr] = times
        else:
            self._fails.pop(addr, None)
        return times

    def locked(self, addr: str) -> bool:
        return len(self._recent(addr, time.monotonic())) >= self.limit

    def fail(self, addr: str) -> None:
        now = time.monotonic()
        self._recent(addr, now)
        self._fails.setdefault(addr, []).append(now)
        if len(self._fails) > 100_000:  # bound memory under an address flood
            for k in list(self._fails)[:50_000]:
                self._fails.pop(k, None)


def peer_host(request: web.Request) -> str:
    """The socket's peer address: never a header."""
    transport = request.transport
    peer = transport.get_extra_info("peername") if transport is not None else None
    if isinstance(peer, (tuple, list)) and peer:
        return str(peer[0])
    return "unknown"


class FrontEnd:
    name = "frontend"
    # a connection that sends no complete HTTP request (or idles between keep-alive
    # requests) this long is closed: an idle or slowloris socket never holds a descriptor
    # for aiohttp's default hour. Upgraded WebSockets are not affected.
    keepalive_timeout = 10.0

    def __init__(self, bridge: "Bridge", config: "Config"):
        self.bridge = bridge
        self.config = config
        self.tasks = TaskSet(self.name)
        self.runner: Optional[web.AppRunner] = None
        self.port: Optional[int] = None
        self.sockets: set[web.WebSocketResponse] = set()
        self._unsubscribe = None

    async def prepare(self) -> None:
        """Before the bridge starts: migrations, extra agent sources. The store is open."""

    def build_app(self) -> web.Application:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_event(self, seq: int, event: Any) -> None:
        """Hub subscriber: render and queue; must not await."""

    async def start(self, host: str, port: int, ssl_context: Optional[ssl.SSLContext] = None) -> int:
        app = self.build_app()
        app[STORE_KEY] = self.bridge.store  # frames wait for the writes queued before them (ws_text_sender)
        self.runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=2.0, keepalive_timeout=self.keepalive_timeout
        )
        await self.runner.setup()
        site = web.TCPSite(self.runner, host, port, ssl_context=ssl_context, backlog=4096)
        try:
            await site.start()
        except OSError as exc:
            await self.runner.cleanup()
            self.runner = None
            raise PortInUse(exc.errno, f"{self.name}: cannot listen on {host}:{port}: {exc.strerror}") from exc
        server = site._server  # the asyncio server, to read the chosen port
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else port
        self._unsubscribe = self.bridge.hub.subscribe(self.on_event)
        return self.port

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for ws in list(self.sockets):
            try:
                await asyncio.wait_for(ws.close(code=1001, message=b"server shutdown"), 1.0)
            except Exception:
                pass
        await self.tasks.close()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
