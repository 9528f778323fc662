"""What every front end shares: its aiohttp site, its connections, frame sending.

A front end (``pheby_adapter``, ``loomi_adapter``, ``lvmh_adapter``) subclasses
``FrontEnd``, builds its ``web.Application`` and subscribes to the hub. The
CLI (or the Hermes plugin) starts it on a host and port and stops it, with the TLS
context of ``tls.py``.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import WSMsgType, web

from ..bridge.tasks import TaskSet
from . import aiohttp_compat
from .security import LISTEN_QUEUE, PROXY_RULE, REFUSED_JSON, AuthLimiter, ProxyRule, accept_batch_for, peer_host  # noqa: F401 (peer_host: re-exported)

if TYPE_CHECKING:
    from ..bridge.bridge import Bridge
    from .config import Config

log = logging.getLogger("agent_bridge.frontend")


class PortInUse(OSError):
    pass


# the 429 an over-cap connection gets, in each front end's error shape
REFUSAL_BODIES = {
    "lvmh": b'{"error":"Too many unauthenticated connections from this address","code":"rate_limited"}',
}

STORE_KEY: web.AppKey = web.AppKey("agent_bridge_store")


class FrontEndCounts:
    """What a front end counted since it started, read by the metrics endpoint at scrape time
    (bridge_core/kit/metrics.py): plain int adds where the frames are written and replayed."""

    __slots__ = ("frames_sent", "replay_events")

    def __init__(self) -> None:
        self.frames_sent = 0  # frames its outboxes wrote (outbox.Outbox._sent)
        self.replay_events = 0  # events resent to a client catching up (Loomi replay, lvmh ?after=)


COUNTS_KEY: web.AppKey = web.AppKey("agent_bridge_counts", FrontEndCounts)


async def listen(app: web.Application, name: str, limiter: AuthLimiter, host: str, port: int,
                 ssl_context: Optional[ssl.SSLContext] = None,
                 keepalive_timeout: float = 10.0) -> tuple[web.AppRunner, asyncio.AbstractServer, int]:
    """Serve ``app`` on ``host:port`` behind ``limiter`` (at most its cap of unauthenticated connections
    per address); (its runner, its listener, the bound port). PortInUse (one line) when it cannot."""
    app[PROXY_RULE] = ProxyRule(limiter.trusted, name)  # security.client_address reads it
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0,
                           keepalive_timeout=keepalive_timeout)  # fmt: skip
    await runner.setup()
    limiter.fit_to_descriptors()  # the descriptor limit as raised at start
    # the listener is ours (not a TCPSite): its protocol factory is guarded (security.AuthLimiter)
    loop = asyncio.get_running_loop()
    try:
        listener = await loop.create_server(limiter.guard(runner.server), host, port, ssl=ssl_context,
                                            backlog=accept_batch_for())  # fmt: skip
        # asyncio's backlog is also the kernel's queue: lengthen that one alone (security.accept_batch_for)
        for sock in listener.sockets or []:
            with sock.dup() as raw:
                raw.listen(LISTEN_QUEUE)
    except OSError as exc:
        await runner.cleanup()
        raise PortInUse(exc.errno, f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from exc
    sockets = listener.sockets or []
    return runner, listener, sockets[0].getsockname()[1] if sockets else port


async def close_listener(runner: Optional[web.AppRunner], listener: Optional[asyncio.AbstractServer]) -> None:
    """Stop what ``listen`` started: no new connection, then the app's cleanup."""
    if listener is not None:
        listener.close()
    if runner is not None:
        await runner.cleanup()
    if listener is not None:
        try:
            await asyncio.wait_for(listener.wait_closed(), 2.0)
        except (asyncio.TimeoutError, Exception):
            pass


class ws_text_sender:
    """An Outbox sender (``outbox.Sender``): pre-encoded JSON bytes as WebSocket text frames.

    ``sync`` writes a batch of frames synchronously with one transport write
    while the peer keeps up (``aiohttp_compat.FrameWriter``: the Outbox
    writes from its flush, without a hop through the writer task); ``many``
    writes a batch and waits out aiohttp's flow control when the peer falls
    behind (``aiohttp_compat.write_text_frames``). These are the only uses of
    aiohttp internals. It falls back to ``send_frame`` per frame whenever the
    aiohttp writer is not in the plain state it expects.

    Durable before delivered: ``request`` is the handler's request, whose app
    carries the front end's store under ``STORE_KEY``; the Outbox lets frames
    leave only once the store has committed every write queued before them
    (``Store.synced``), so a client never holds an event a crash could take back.
    """

    __slots__ = ("ws", "_store", "sync", "counts")

    def __init__(self, ws: web.WebSocketResponse, request: Optional[web.BaseRequest] = None):
        self.ws = ws
        self._store: Any = request.app.get(STORE_KEY) if request is not None else None
        self.sync = aiohttp_compat.FrameWriter(ws)
        self.counts = request.app.get(COUNTS_KEY) if request is not None else None  # the Outbox adds what it wrote

    def durable_store(self) -> Any:
        """The store whose writes this connection's frames wait for (the Outbox waits for it)."""
        return self._store

    async def __call__(self, data: bytes) -> None:
        await self.ws.send_frame(data, WSMsgType.TEXT)

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
        self.limiter.trusted = tuple(getattr(config, "trusted_proxies", ()))
        self.counts = FrontEndCounts()

    def connections(self) -> int:
        """Its open authenticated sockets (the metrics endpoint asks at scrape time); a front end whose
        sockets authenticate after the upgrade counts those that did."""
        return len(self.sockets)

    async def prepare(self) -> None:
        """Before the bridge starts: migrations, extra agent sources. The store is open."""

    def tls_changed(self, fingerprint: str) -> None:
        """The served certificate was reloaded (``tls.TLSReloader``); its new SHA-256."""

    def build_app(self) -> web.Application:  # pragma: no cover - abstract
        raise NotImplementedError

    def on_event(self, seq: int, event: Any) -> None:
        """Hub subscriber: render and queue; must not await."""

    async def start(self, host: str, port: int, ssl_context: Optional[ssl.SSLContext] = None) -> int:
        app = self.build_app()
        app[STORE_KEY] = self.bridge.store  # frames wait for the writes queued before them (ws_text_sender)
        app[COUNTS_KEY] = self.counts
        # an address holds at most `unauth_per_address` connections that have not authenticated
        self.runner, self._listener, self.port = await listen(app, self.name, self.limiter, host, port, ssl_context,
                                                              self.keepalive_timeout)  # fmt: skip
        if self._unsubscribe is None:  # (subscribed already: a front end that renders a node's join, prepare)
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
        runner, self.runner = self.runner, None
        await close_listener(runner, listener)
