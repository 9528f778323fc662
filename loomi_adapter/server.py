"""The Loomi front end: WS ``/ws``, ``GET /health``, pairing and devices (loopback only),
authenticated attachment downloads. A thin aiohttp layer over codec, session and devices.
"""

from __future__ import annotations

import asyncio
import collections
import importlib.metadata
import logging
import os
import socket
import ssl
from typing import Any, Awaitable, Callable, Optional

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from bridge_core.model import events as ev
from bridge_core.kit.downloads import file_response
from bridge_core.model.commands import Origin
from bridge_core.model.errors import (
    AuthTimeout,
    BadRequest,
    BridgeError,
    RateLimited,
    SlowConsumer,
    TooLarge,
    Unauthorized,
    Unavailable,
    as_bridge_error,
)
from bridge_core.kit.remote import bound_url, served_directly
from bridge_core.kit.frontend import FrontEnd, ws_text_sender
from bridge_core.kit.tls import cert_fingerprint, chains_to_public_ca
from bridge_core.kit.security import bearer_token, client_address, require_loopback_admin
from bridge_core.kit.outbox import Outbox
from bridge_core.bridge.private import write_private
from bridge_core.model.redact import fingerprint

from . import codec
from .cluster import ClusterRegistry
from .config import PART
from .devices import Device, Registry
from .errors import Replaced, Revoked, close_code, error_payload
from .revocation import Revocations
from .session import PairHello, Session

log = logging.getLogger("agent_bridge.loomi")

MAX_FRAME = 2 * 1024 * 1024
MAX_QUEUED_REQUESTS = 64
# requests that change something: a repeated request_id returns the first ack
IDEMPOTENT = (codec.SessionSend, codec.ApprovalResolve, codec.ClarifyResolve, codec.RunCancel,
              codec.RunPause, codec.RunResume)


def qr_fingerprint(public_fp: str, public_url: Optional[str], served_fp: str, served_public_ca: bool,
                   bound_port: Optional[int]) -> str:
    """The ``fp`` of the pairing QR (pure; docs/remote-access.md): ``--public-fp loomi=`` when given;
    else empty when the bridge serves no TLS or a certificate from a public CA (nothing to pin), or
    when the public URL names another port (a proxy presents its own certificate, which the bridge
    does not know); else the served certificate's SHA-256."""
    if public_fp:
        return public_fp
    if not served_fp or served_public_ca:
        return ""
    if public_url and not served_directly(public_url, bound_port):
        return ""
    return served_fp


def _version() -> str:
    try:
        return importlib.metadata.version("agent-bridge")
    except importlib.metadata.PackageNotFoundError:
        return "0"


# events whose frames need the conversation (task shape, session id) or the run's final text
_NEEDS_EXTRA = frozenset({ev.ConversationCreated, ev.ConversationRenamed, ev.ConversationUpdated, ev.RunStarted,
                          ev.RunFinished})
_NO_EXTRA = codec.Extra()


class LoomiWS(web.WebSocketResponse):
    """The protocol socket, with one addition: a frame over ``MAX_FRAME`` is answered with a fatal
    ``too_large`` error before the close (aiohttp's reader refuses it from its header and closes
    with 1009 by itself, so the error goes out from the close)."""

    on_too_large: Optional[Callable[[], Awaitable[bytes]]] = None

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        hook, self.on_too_large = self.on_too_large, None
        if hook is not None and code == WSCloseCode.MESSAGE_TOO_BIG and not self.closed:
            try:
                data = await asyncio.wait_for(hook(), 1.0)
                await asyncio.wait_for(self.send_frame(data, WSMsgType.TEXT), 1.0)
            except Exception:
                pass
        return await super().close(code=code, message=message, drain=drain)


class Connection:
    """One socket: its outbox, protocol session, device (once authenticated) and tasks."""

    def __init__(self, ws: web.WebSocketResponse, addr: str, session: Session, transport: Any = None):
        self.ws = ws
        self.transport = transport
        self.addr = addr
        self.session = session
        self.outbox: Outbox = None  # type: ignore[assignment]
        self.device: Optional[Device] = None
        self.queue: asyncio.Queue = asyncio.Queue(MAX_QUEUED_REQUESTS)
        self.tasks: list[asyncio.Task] = []
        self.closing = False
        self.closer: Optional[asyncio.Task] = None  # a close started from elsewhere (_kick)


class LoomiFrontEnd(FrontEnd):
    name = "loomi"

    def __init__(self, bridge, config):
        super().__init__(bridge, config)
        sec = config.section("loomi")
        # unauthenticated sockets are closed within 10 s: the hello deadline, then a short close
        self.hello_timeout = float(sec.get("hello_timeout", 9.0))
        self.ping_interval = float(sec.get("ping_interval", 25.0))
        self.max_missed = int(sec.get("max_missed_pongs", 3))
        self.pong_timeout = float(sec.get("pong_timeout", 10.0))  # a ping is missed without a pong by then
        self.outbox_items = int(sec.get("outbox_items", 2048))
        self.rate = float(sec.get("rate", 100.0))  # frames per second per socket (pongs exempt)
        self.burst = float(sec.get("burst", 200.0))
        self.pair_ttl = float(config.frontend("loomi").pair_ttl)
        self.registry = Registry(bridge.store)
        self.server_name = socket.gethostname()
        self.server_version = _version()
        self.fp = ""  # the QR's certificate pin, set once the port is known (qr_fingerprint)
        self._served_fp = cert_fingerprint(config.tls_cert) if config.tls else ""
        self._served_public_ca = chains_to_public_ca(config.tls_cert) if config.tls else False
        self._final_text: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._stopped = False
        self.revocations = Revocations(self)

    def watching(self, conversation_id: str) -> bool:
        """Whether a device would see ``conversation_id`` now (push: docs/push.md); a connected device sees every task."""
        return any(d.conn is not None for d in self.registry.devices.values())

    def connections(self) -> int:
        return sum(d.conn is not None for d in self.registry.devices.values())  # devices past their hello (metrics)

    # --- lifecycle ---------------------------------------------------------------

    async def prepare(self) -> None:
        codec.prepare()
        cluster = getattr(self.bridge, "cluster", None)
        if cluster is not None:  # several nodes: numbering by the node a device is connected to (cluster.py)
            self.registry = ClusterRegistry(self.bridge.store, cluster.node_id)
            self.on_event = self._on_cluster_event  # type: ignore[method-assign]
        await self.registry.prepare()
        await self.revocations.prepare()

    async def start(self, host: str, port: int, ssl_context: Optional[ssl.SSLContext] = None) -> int:
        port = await super().start(host, port, ssl_context)
        self._set_fp()
        return port

    def _set_fp(self) -> None:
        self.fp = qr_fingerprint(self.config.public_fp.get("loomi", ""), self.config.public_urls.get("loomi"),
                                 self._served_fp, self._served_public_ca, self.port)
        self._write_runtime_file()

    def tls_changed(self, fingerprint: str) -> None:
        """A renewed certificate: new pairings carry its fingerprint, and the CLI pins it."""
        self._served_fp = fingerprint
        self._served_public_ca = chains_to_public_ca(self.config.tls_cert) if self.config.tls else False
        self._set_fp()

    @property
    def runtime_file(self) -> str:
        return os.path.join(self.config.run_dir, "loomi.json")

    def _write_runtime_file(self) -> None:
        """How ``agent-bridge loomi ...`` reaches this server: its port, scheme and certificate pin."""
        os.makedirs(self.config.run_dir, mode=0o700, exist_ok=True)
        # fp: the served certificate, which the CLI pins on 127.0.0.1
        write_private(self.runtime_file, orjson.dumps({"port": self.port, "host": self.config.host,
                                                       "tls": self.config.tls, "fp": self._served_fp, "qr_fp": self.fp}))

    async def stop(self) -> None:
        if not self._stopped:
            try:
                os.unlink(self.runtime_file)
            except OSError:
                pass
        await super().stop()
        if self._stopped:
            return
        self._stopped = True
        try:
            await self.registry.persist_exact()
        except Exception as exc:
            log.warning("could not store the devices' seq on shutdown: %s", exc)

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/ws", self.handle_ws)
        app.router.add_get("/health", self.handle_health)
        app.router.add_post("/internal/pair/new", self.handle_pair_new)
        app.router.add_get("/internal/devices", self.handle_devices)
        app.router.add_post("/internal/devices/revoke", self.handle_revoke)
        app.router.add_get("/attachments/{attachment_id}", self.handle_attachment)
        return app

    def pair_url(self) -> str:
        """The QR's URL: the loomi public URL, else the bound address (a wildcard made dialable)."""
        return self.config.public_urls.get("loomi") or bound_url(PART.public, self.config.host, self.port or 0,
                                                                 self.config.tls)

    # --- the event fan-out ----------------------------------------------------------

    def on_event(self, seq: int, event: Any) -> None:
        t = type(event)
        if t is ev.MessageCompleted and event.run_id is not None:
            self._remember_final_text(event)
        if not self.registry.devices:
            return
        bodies = self._bodies(t, event)
        if not bodies:
            return
        # the hot path: per device a seq, a small prefix and a concatenation, kept for replay. Every
        # device's rows are queued (one batched write) before any frame is (devices.py), so once one
        # device has the event it is durable for all of them
        for d, frames in self.registry.record([b[1:] for b in bodies]):
            conn = d.conn
            if conn is not None:
                put = conn.outbox.put
                for f in frames:
                    put(f)

    def _on_cluster_event(self, seq: int, event: Any) -> None:
        """``on_event`` with several nodes: ``seq`` is the cluster-wide event number. Every event is
        stored once as this node's rows (for devices that will reconnect here or elsewhere) and
        numbered for the devices connected here only (cluster.py)."""
        reg = self.registry
        reg.position = seq
        t = type(event)
        if t is ev.MessageCompleted and event.run_id is not None:
            self._remember_final_text(event)
        if not reg.any_devices and not reg.poll_devices():
            return
        bodies = self._bodies(t, event)
        if not bodies:
            return
        for d, frames in reg.record_at(seq, [b[1:] for b in bodies]):
            conn = d.conn
            if conn is not None:
                put = conn.outbox.put
                for f in frames:
                    put(f)

    def _remember_final_text(self, event: Any) -> None:
        self._final_text[event.run_id] = event.text
        while len(self._final_text) > 1024:
            self._final_text.popitem(last=False)

    def _bodies(self, t: type, event: Any) -> list[bytes]:
        """The event's encoded bodies (none for an event Loomi does not show)."""
        render = codec.RENDERERS.get(t)
        if render is None:
            return []
        if t in _NEEDS_EXTRA:
            extra = codec.Extra(conv=self.bridge.conversations.get(event.conversation_id))
            if t is ev.RunFinished:
                extra.final_text = self._final_text.pop(event.run_id, None)
        else:
            extra = _NO_EXTRA
        return render(event, extra)

    def _send(self, conn: Connection, type_: str, payload: dict) -> None:
        """A reply frame (not replayed): the device's next seq, or 0 before authentication."""
        d = conn.device
        seq = self.registry.next_seq(d) if d is not None else 0
        conn.outbox.put(codec.frame(seq, type_, payload))

    def _error(self, conn: Connection, exc: BaseException, request_id: Optional[str] = None) -> None:
        if not isinstance(exc, BridgeError):
            log.error("loomi request failed", exc_info=exc)
        self._send(conn, "error", error_payload(exc, request_id))

    # --- WebSocket -------------------------------------------------------------------

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        addr = client_address(request)
        ws = LoomiWS(max_msg_size=MAX_FRAME, heartbeat=None, autoping=True, compress=False)
        await ws.prepare(request)
        session = Session(self.max_missed, pong_timeout=self.pong_timeout, rate=self.rate, burst=self.burst)
        conn = Connection(ws, addr, session, request.transport)
        conn.outbox = Outbox(ws_text_sender(ws, request), max_items=self.outbox_items,
                             on_overflow=lambda: self._overflow(conn))
        ws.on_too_large = lambda: self._direct_error(conn, TooLarge(f"Frame larger than {MAX_FRAME} bytes"))
        self.sockets.add(ws)
        writer = self.tasks.spawn(self._write(conn), name="loomi-writer")
        try:
            if await self._handshake(conn):
                self.limiter.passed(request)  # authenticated: no longer counted as unauthenticated
                await self._serve(conn)
        finally:
            conn.closing = True
            self._detach(conn)
            conn.session.closed()
            for t in conn.tasks:
                t.cancel()
            if conn.closer is not None and not conn.closer.done():
                await asyncio.wait([conn.closer], timeout=3.0)  # let the close handshake finish
            conn.outbox.close()
            self.sockets.discard(ws)
            if not ws.closed:
                await self._close(conn, 1000, "")
            writer.cancel()
        return ws

    async def _write(self, conn: Connection) -> None:
        try:
            await conn.outbox.run()
        except (ConnectionError, RuntimeError):
            conn.outbox.close()

    async def _handshake(self, conn: Connection) -> bool:
        try:
            msg = await conn.ws.receive(timeout=self.hello_timeout)
        except asyncio.TimeoutError:
            await self._fatal(conn, AuthTimeout())
            return False
        if msg.type is not WSMsgType.TEXT:
            if msg.type is WSMsgType.BINARY:
                await self._fatal(conn, Unauthorized("The first frame must be a hello"))
            return False
        token_fp = None
        guessed = False  # a token or credential was checked against the registry, and was wrong
        try:
            hs = conn.session.receive_hello(msg.data)
            if isinstance(hs, PairHello):
                token_fp = fingerprint(hs.token)
                if not await self.registry.take_token(hs.token):
                    guessed = True
                    raise Unauthorized("Invalid or expired pairing token")
                device, credential = await self.registry.pair(hs.info)
                log.info("loomi: paired device %s (%s), pairing token fingerprint %s", device.device_id,
                         device.model or "unknown model", token_fp)
                last_seq = None
            else:
                found = self.registry.authenticate(hs.device_id, hs.credential)
                if found is None:
                    guessed = True
                    raise Unauthorized("Unknown device or wrong credential")
                device, credential, last_seq = found, None, hs.last_seq
        except BridgeError as exc:
            if guessed:  # never a lockout (a valid credential always passes): the answer waits for a slot
                await self.limiter.wrong(conn.addr)
            if exc.code == "unauthorized":
                log.warning("loomi: refused hello from %s%s: %s", conn.addr,
                            f" (token {token_fp})" if token_fp else "", exc.message)
            await self._fatal(conn, exc)
            return False
        if conn.ws.closed:
            return False
        if isinstance(self.registry, ClusterRegistry):
            claim = await self._claim(device, last_seq)
            if claim is None:
                await self._fatal(conn, Unavailable("The device is being connected elsewhere; try again"))
                return False
            if conn.ws.closed:
                return False
            res = self.registry.attach(device, claim, last_seq)
        else:
            res = self.registry.resume(device, last_seq)
        self._open(conn, device, credential, res, hs.info)
        return True

    async def _claim(self, d: Device, last_seq: Optional[int]):
        """Several nodes: take the device from wherever it was numbered (cluster.py). Its older
        socket on this node is closed first, so nothing numbers it while the store is read."""
        old = d.conn
        if old is not None:
            self._kick(old, Replaced())
        for _ in range(3):
            claim = await self.registry.claim(d, last_seq)
            if claim is not None:
                return claim
        return None

    def _open(self, conn: Connection, d: Device, credential: Optional[str], res, info) -> None:
        """Synchronous: hello.ok, then the replayed gap, then live frames, in this order."""
        old = d.conn
        if old is not None and old is not conn:
            self._kick(old, Replaced())
        conn.device = d
        conn.session.opened(d.device_id)
        self.registry.seen(d, info)
        # hello.ok carries the seq the app reported (docs/loomi.md "Handshake"): the replay follows above it
        conn.outbox.put(codec.frame(res.seq, "hello.ok", codec.hello_ok(
            device_id=d.device_id, credential=credential, server_name=self.server_name,
            server_version=self.server_version, truncated=res.truncated,
        )))
        for f in res.frames:
            conn.outbox.put(f)
        self.counts.replay_events += len(res.frames)
        d.conn = conn
        conn.tasks.append(self.tasks.spawn(self._worker(conn), name="loomi-worker"))
        conn.tasks.append(self.tasks.spawn(self._heartbeat(conn), name="loomi-heartbeat"))
        log.info("loomi: device %s connected from %s (replayed %d, truncated %s)", d.device_id, conn.addr,
                 len(res.frames), res.truncated)

    async def _serve(self, conn: Connection) -> None:
        ws = conn.ws
        while not conn.closing:
            msg = await ws.receive()
            if msg.type is WSMsgType.TEXT:
                self._on_text(conn, msg.data)
                if len(conn.outbox) > self.outbox_items // 2:
                    await conn.outbox.wait_room(self.outbox_items // 4)  # a burst is answered as fast as it is read
            elif msg.type is WSMsgType.BINARY:
                self._error(conn, BadRequest("Binary frames are reserved"))
            elif msg.type is WSMsgType.ERROR:
                return  # the error (too_large included, see LoomiWS) was sent and the socket is closed
            else:
                return

    def _on_text(self, conn: Connection, data: str) -> None:
        now = asyncio.get_running_loop().time()
        try:
            frame = codec.parse_frame(data)
        except BridgeError as exc:
            if exc.fatal:  # one bad frame on an open socket is answered, never a reason to close it
                exc = BridgeError(exc.message, code=exc.code, fatal=False)
            self._error(conn, exc if conn.session.allow(now) else RateLimited("Too many frames; slow down"))
            return
        if frame.type != "pong" and not conn.session.allow(now):
            self._error(conn, RateLimited("Too many frames; slow down"), frame.request_id)
            return
        try:
            req = conn.session.request(frame)
        except BridgeError as exc:
            self._error(conn, exc, frame.request_id)
            return
        t = type(req)
        if t is codec.Ping:
            self._send(conn, "pong", {})
        elif t is codec.Pong:
            pass
        else:
            try:
                conn.queue.put_nowait(req)
            except asyncio.QueueFull:
                self._error(conn, RateLimited("Too many requests in flight"), getattr(req, "request_id", None))

    async def _worker(self, conn: Connection) -> None:
        while True:
            req = await conn.queue.get()
            try:
                await self._handle(conn, req)
            except Exception as exc:  # never let one request end the socket
                self._error(conn, exc, getattr(req, "request_id", None))
            # a queue of requests read in one go (a burst of new tasks) would run back to back without the
            # loop turning: every other connection's frames wait for all of them (docs/architecture.md)
            await asyncio.sleep(0)

    async def _handle(self, conn: Connection, req: Any) -> None:
        d = conn.device
        assert d is not None
        rid = getattr(req, "request_id", None)
        origin = Origin(surface="loomi", connection=d.device_id, decided_by="remote")
        try:
            if type(req) is codec.TaskList:
                convs = await self.bridge.execute(codec.to_command(req), origin)
                self._send(conn, "task.list.result", {"request_id": rid, "tasks": [codec.task_dict(c) for c in convs]})
                return
            if rid is None:
                await self.bridge.execute(codec.to_command(req), origin)
                return
            result = await self._execute_once(d, (codec.TYPE_OF[type(req)], rid), req, origin)
        except BridgeError as exc:
            self._error(conn, exc, rid)
            return
        self._send(conn, "ack", {"request_id": rid, "ok": True, "result": result})

    async def _execute_once(self, d: Device, key: tuple, req: Any, origin: Origin) -> Any:
        """Run a request once per (type, request_id) per device; a repeat gets the first result.

        What was seen is the device's ``RequestCache`` (idempotency.py); here only the running and awaiting.
        """
        entry = d.requests.lookup(key)
        if entry is not None:
            if entry.done:
                return entry.value
            ok, value = await asyncio.shield(entry.value)
            if ok:
                return value
            raise value
        fut = asyncio.get_running_loop().create_future()
        d.requests.start(key, fut)
        try:
            result = codec.result_of(req, await self.bridge.execute(codec.to_command(req), origin))
        except Exception as exc:
            err = exc if isinstance(exc, BridgeError) else error_from(exc)
            self._forget(d, key, fut, err)  # a failed request did nothing: a retry may run it
            raise err
        except BaseException:
            self._forget(d, key, fut, Unavailable("Request interrupted"))
            raise
        d.requests.succeeded(key, fut, result)
        fut.set_result((True, result))
        return result

    @staticmethod
    def _forget(d: Device, key: tuple, fut: asyncio.Future, err: BridgeError) -> None:
        d.requests.failed(key, fut)
        fut.set_result((False, err))

    async def _heartbeat(self, conn: Connection) -> None:
        """A ping every ``ping_interval``; each pong deadline is checked when it passes (session.expire)."""
        loop = asyncio.get_running_loop()
        session = conn.session
        next_ping = loop.time() + self.ping_interval
        deadline: Optional[float] = None
        while not conn.closing:
            wake = next_ping if deadline is None else min(next_ping, deadline)
            await asyncio.sleep(max(0.0, wake - loop.time()))
            if conn.closing:
                return
            now = loop.time()
            try:
                deadline = session.expire(now)
            except BridgeError as exc:
                log.info("loomi: device %s missed %d pings in a row; disconnecting", session.device_id,
                         session.missed)
                self._kick(conn, exc)
                return
            if now >= next_ping:
                gone = self.registry.check(conn.device) if conn.device is not None else None
                if gone is not None:  # revoked, or connected to another node since (several nodes)
                    log.info("loomi: device %s is %s elsewhere; closing this socket", session.device_id, gone)
                    self._kick(conn, Revoked() if gone == "revoked" else Replaced())
                    return
                self._send(conn, "ping", {})
                session.ping_sent(now)
                next_ping = now + self.ping_interval
                if deadline is None:
                    deadline = now + self.pong_timeout

    # --- closing -----------------------------------------------------------------------

    def _detach(self, conn: Connection) -> None:
        d = conn.device
        if d is not None and d.conn is conn:
            d.conn = None
            self.registry.detach(d)
            if d.device_id in self.registry.devices:
                try:
                    self.registry.seen(d)
                except Exception:
                    pass

    def _overflow(self, conn: Connection) -> None:
        log.warning("loomi: device %s could not keep up; disconnected (it recovers by replay)",
                    conn.session.device_id)
        self._kick(conn, SlowConsumer())

    def _kick(self, conn: Connection, exc: BridgeError) -> None:
        """Close a socket from synchronous code (revoke, replace, overflow, heartbeat)."""
        if conn.closing:
            return
        conn.closing = True
        self._detach(conn)
        conn.closer = self.tasks.spawn(self._fatal(conn, exc), name="loomi-kick")

    async def _fatal(self, conn: Connection, exc: BridgeError) -> None:
        """Send ``error`` (fatal) and close with its close code."""
        conn.closing = True
        payload = error_payload(exc)
        payload["fatal"] = True
        if not conn.outbox.closed:
            self._send(conn, "error", payload)
            await conn.outbox.flush(1.0 if conn.device is not None else 0.3)
        else:  # overflowed: write the error past the dropped queue (uncompressed frames are atomic)
            try:
                data = await asyncio.wait_for(self._direct_error(conn, exc), 1.0)
                await asyncio.wait_for(conn.ws.send_frame(data, WSMsgType.TEXT), 1.0)
            except Exception:
                pass
        await self._close(conn, close_code(payload["code"]), payload["code"])

    async def _direct_error(self, conn: Connection, exc: BridgeError) -> bytes:
        """A fatal error frame to write past the outbox (dropped or closing). It takes a seq like any
        reply, so it waits for the store as the outbox would (devices.py: a sent seq is reserved)."""
        conn.closing = True
        payload = error_payload(exc)
        payload["fatal"] = True
        d = conn.device
        seq = self.registry.next_seq(d) if d is not None else 0
        await self.bridge.store.synced()
        return codec.frame(seq, "error", payload)

    async def _close(self, conn: Connection, code: int, reason: str) -> None:
        # an unauthenticated peer gets little time to answer the close: it is gone by 10 s
        wait = 2.0 if conn.device is not None else 0.5
        try:
            await asyncio.wait_for(conn.ws.close(code=code, message=reason.encode()[:120]), wait)
        except Exception:
            if conn.transport is not None:
                conn.transport.abort()

    # --- HTTP ------------------------------------------------------------------------------

    async def handle_health(self, request: web.Request) -> web.Response:
        return web.Response(body=b'{"ok":true,"v":1}', content_type="application/json")

    async def _refuse_non_local(self, request: web.Request) -> Optional[web.Response]:
        """The loopback-only endpoints: the shared check (loopback peer and Host, no Origin,
        no forwarding header, the admin key), or its 403."""
        return await require_loopback_admin(request, self.config.admin_key, self.limiter, log)

    async def _json_body(self, request: web.Request) -> dict:
        raw = await request.read()
        if not raw.strip():
            return {}
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise BadRequest("body is not JSON")
        if not isinstance(body, dict):
            raise BadRequest("body must be a JSON object")
        return body

    async def handle_pair_new(self, request: web.Request) -> web.Response:
        refused = await self._refuse_non_local(request)
        if refused is not None:
            return refused
        try:
            body = await self._json_body(request)
            ttl = body.get("ttl", self.pair_ttl)
            if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= 86400:
                raise BadRequest("ttl must be a number of seconds in (0, 86400]")
        except BridgeError as exc:
            return _json({"error": error_payload(exc)}, status=400)
        token, expires = await self.registry.create_token(float(ttl))
        payload = {"v": 1, "url": self.pair_url(), "token": token, "name": self.server_name, "fp": self.fp}
        return _json({"payload": payload, "expires_at": expires, "ttl": ttl})

    async def handle_devices(self, request: web.Request) -> web.Response:
        refused = await self._refuse_non_local(request)
        if refused is not None:
            return refused
        return _json({"devices": self.registry.list()})

    async def handle_revoke(self, request: web.Request) -> web.Response:
        refused = await self._refuse_non_local(request)
        if refused is not None:
            return refused
        try:
            body = await self._json_body(request)
            device_id = body.get("device_id")
            if not isinstance(device_id, str) or not device_id:
                raise BadRequest("device_id required")
        except BridgeError as exc:
            return _json({"error": error_payload(exc)}, status=400)
        d = await self.revoke(device_id)
        return _json({"revoked": d is not None, "device_id": device_id}, status=200 if d else 404)

    async def revoke(self, device_id: str) -> Optional[Device]:
        """Forget a device everywhere, with what push gave it, and close its sockets on every node (revocation.py)."""
        return await self.revocations.revoke(device_id)

    async def handle_attachment(self, request: web.Request) -> web.StreamResponse:
        device_id, _, credential = (bearer_token(request) or "").partition(":")
        d = None
        if device_id and credential:
            d = self.registry.authenticate(device_id, credential)
            if d is None:  # a wrong credential is slowed; none at all is a plain 401
                await self.limiter.wrong(client_address(request))
        if d is None:
            return _json({"error": {"code": "unauthorized", "message": "Unauthorized"}}, status=401,
                         headers={"WWW-Authenticate": 'Bearer realm="loomi"'})
        self.limiter.passed(request)
        found = self.bridge.attachments.get(request.match_info["attachment_id"])
        if found is None:
            return _json({"error": {"code": "not_found", "message": "Attachment not found"}}, status=404)
        return file_response(*found)


def error_from(exc: BaseException) -> BridgeError:
    log.error("loomi request failed", exc_info=exc)
    return as_bridge_error(exc)


def _json(obj: Any, status: int = 200, headers: Optional[dict] = None) -> web.Response:
    h = {"Cache-Control": "no-store"}
    if headers:
        h.update(headers)
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json", headers=h)


__all__ = ["LoomiFrontEnd", "cert_fingerprint", "qr_fingerprint"]
