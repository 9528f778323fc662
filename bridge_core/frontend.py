"""What every front end shares: its aiohttp site, its connections, frame sending.

A front end (``pheby_adapter``, ``loomi_adapter``, ``lvmh_adapter``) subclasses
``FrontEnd``, builds its ``web.Application`` and subscribes to the hub. The
CLI (or the Hermes plugin) starts it on a host and port and stops it.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import WSMsgType, web

from . import aiohttp_compat
from .security import REFUSED_JSON, AuthLimiter, peer_host  # noqa: F401 (peer_host: re-exported for the adapters)
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


# the 429 an over-cap connection gets, in each front end's error shape
REFUSAL_BODIES = {
    "lvmh": b'{"error":"Too many unauthenticated connections from this address","code":"rate_limited"}',
}

STORE_KEY: web.AppKey = web.AppKey("agent_bridge_store")


class ws_text_sender:
    """An Outbox sender: pre-encoded JSON bytes as WebSocket text frames.

    ``many`` writes a batch of frames with one transport write
    (``aiohttp_compat.write_text_frames``, the only use of aiohttp internals);
    ``now`` writes one frame synchronously when the connection's previous
    writes have drained (``aiohttp_compat.write_now``), so an idle connection
    gets a frame without waiting for the writer task.
    It falls back to ``send_frame`` per frame whenever the aiohttp writer is
    not in the plain state it expects.

    Durable before delivered: ``request`` is the handler's request, whose app
    carries the front end's store under ``STORE_KEY``; the Outbox lets frames
    leave only once the store has committed every write queued before them
    (``Store.synced``), so a client never holds an event a crash could take back.
    """

    __slots__ = ("ws", "_store")

    def __init__(self, ws: web.WebSocketResponse, request: Optional[web.BaseRequest] = None):
        self.ws = ws
        self._store: Any = request.app.get(STORE_KEY) if request is not None else None

    def durable_store(self) -> Any:
        """The store whose writes this connection's frames wait for (the Outbox awaits it)."""
        return self._store

    async def __call__(self, data: bytes) -> None:
        await self.ws.send_frame(data, WSMsgType.TEXT)

    def now(self, data: bytes) -> bool:
        """Write ``data`` at once if the previous writes drained (True), else leave it to the Outbox's writer."""
        return aiohttp_compat.write_now(self.ws, data)

    async def many(self, frames: list) -> None:
        if not aiohttp_compat.batch_ready(self.ws):
            for data in frames:
                await self.ws.send_frame(data, WSMsgType.TEXT)
            return
        await aiohttp_compat.write_text_frames(self.ws, frames)


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
        self._listener: Optional[asyncio.AbstractServer] = None
        # wrong credentials slowed per address; unauthenticated connections capped per address
        self.limiter = AuthLimiter(rate=config.wrong_auth_rate, cap=config.unauth_per_address,
                                   refusal_body=REFUSAL_BODIES.get(self.name, REFUSED_JSON))

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
        self.limiter.fit_to_descriptors()  # the descriptor limit as raised at start
        # the listener is ours (not a TCPSite): its protocol factory is guarded, so an address
        # holds at most `unauth_per_address` connections that have not authenticated (security.AuthLimiter)
        loop = asyncio.get_running_loop()
        try:
            self._listener = await loop.create_server(
                self.limiter.guard(self.runner.server), host, port, ssl=ssl_context, backlog=4096
            )
        except OSError as exc:
            await self.runner.cleanup()
            self.runner = None
            raise PortInUse(exc.errno, f"{self.name}: cannot listen on {host}:{port}: {exc.strerror}") from exc
        sockets = self._listener.sockets or []
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
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if listener is not None:
            try:
                await asyncio.wait_for(listener.wait_closed(), 2.0)
            except (asyncio.TimeoutError, Exception):
                pass
