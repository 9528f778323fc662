"""The Loomi front end: WS ``/ws`` and the HTTP routes (routes.py). A thin aiohttp layer: it accepts
sockets, feeds each one's protocol object (protocol.py: every rule of a connection), executes the
commands it hands out through ``Bridge.execute``, writes its frames and runs its timers. The event
fan-out renders each event once (codec.py), numbers it for every device at once (the registry,
through replay.Numbering) and puts each connected device's frames into its outbox.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import logging
import os
import socket
import ssl
from typing import Any, Awaitable, Callable, Optional

import orjson
from aiohttp import WSCloseCode, WSMsgType, web

from bridge_core.model import events as ev
from bridge_core.model.commands import Origin
from bridge_core.model.errors import BridgeError, SlowConsumer, TooLarge, Unauthorized, Unavailable, as_bridge_error
from bridge_core.kit.remote import bound_url, served_directly
from bridge_core.kit.frontend import FrontEnd, ws_text_sender
from bridge_core.kit.tls import cert_fingerprint, chains_to_public_ca
from bridge_core.kit.security import client_address
from bridge_core.kit.outbox import Outbox
from bridge_core.bridge.private import write_private
from bridge_core.model.redact import fingerprint

from . import codec, routes
from .cluster import ClusterRegistry
from .config import PART
from .devices import Device, Registry
from .errors import Replaced
from .journal import sent_text, stored_rows, stored_run_end, stored_run_text
from .protocol import CHECK, REQUEST, Authenticate, Close, Job, LoomiProtocol, PairHello, Settings
from .revocation import Revocations
from .runtexts import RunTexts

log = logging.getLogger("agent_bridge.loomi")

MAX_FRAME = 2 * 1024 * 1024


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
_RENDERERS = codec.RENDERERS  # an event type's renderer (none: not shown)
_TEXT_DELTA = ev.TextDelta


class LoomiWS(web.WebSocketResponse):
    """The protocol socket, with one addition: a frame over ``MAX_FRAME`` is answered with a fatal
    ``too_large`` error before the close (aiohttp's reader refuses it from its header and closes
    with 1009 by itself, so the error goes out from the close: ``on_too_large`` writes it)."""

    on_too_large: Optional[Callable[[], Awaitable[None]]] = None

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        hook, self.on_too_large = self.on_too_large, None
        if hook is not None and code == WSCloseCode.MESSAGE_TOO_BIG and not self.closed:
            try:
                await asyncio.wait_for(hook(), 2.0)
            except Exception:
                pass
        return await super().close(code=code, message=message, drain=drain)


class Connection:
    """One socket: its protocol object, outbox, device (once authenticated) and tasks."""

    def __init__(self, ws: web.WebSocketResponse, addr: str, transport: Any = None):
        self.ws = ws
        self.transport = transport
        self.addr = addr
        self.outbox: Outbox = None  # type: ignore[assignment]
        self.proto: LoomiProtocol = None  # type: ignore[assignment]
        self.device: Optional[Device] = None
        self.ready = asyncio.Event()  # a request was queued (the protocol holds the queue)
        self.tasks: list[asyncio.Task] = []
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
        self.texts = RunTexts()  # a run's final text, and what its deltas here fell short of (runtexts.py)
        self._stopped = False
        self.revocations = Revocations(self)

    def settings(self) -> Settings:
        return Settings(hello_timeout=self.hello_timeout, ping_interval=self.ping_interval,
                        pong_timeout=self.pong_timeout, max_missed=self.max_missed, rate=self.rate,
                        burst=self.burst, server_name=self.server_name, server_version=self.server_version)

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
            gaps = getattr(cluster, "gaps", None)  # its rows are this node's life's (bridge_core/scale/gone.py)
            self.registry = ClusterRegistry(self.bridge.store, cluster.node_id, getattr(gaps, "life", None))
            self.registry.on_lost = self._fenced_out
            self.registry.marking = self.texts.marks  # stored at each prune of its rows (runtexts.py)
            self._loop = asyncio.get_running_loop()
            if gaps is not None:  # events the stream lost: the phones here told
                gaps.hooks.append(self._gone)
            self._unsubscribe = self.bridge.hub.subscribe(self.on_event)  # its join's are its rows (scale-out.md)
        await self.registry.prepare()
        await self.revocations.prepare()
        # after a crash, a run's message is completed with what its replay rows hold (journal.py)
        self.bridge.add_durable_text(functools.partial(stored_run_text, self.bridge.store,
                                                       drafts_from=getattr(self.registry, "drafts_from", None)))
        self.bridge.add_durable_end(functools.partial(stored_run_end, self.bridge.store))  # an end a phone may have
        store = self.bridge.store  # what went out of a run whose deltas were not rendered here (runtexts.py)
        self.texts.sent = functools.partial(sent_text, store)  # (its failure: no filler, journal.py)
        if cluster is None:  # one node: the journal's exchange the core's store may lack (journal.py stored_rows)
            self.bridge.add_durable_rows(functools.partial(stored_rows, self.bridge.store))
            self.registry.before_move = self.bridge.drafts.save  # journal.py ``Journal.drafts_from``

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
        routes.add_routes(app, self)
        return app

    def pair_url(self) -> str:
        """The QR's URL: the loomi public URL, else the bound address (a wildcard made dialable)."""
        return self.config.public_urls.get("loomi") or bound_url(PART.public, self.config.host, self.port or 0,
                                                                 self.config.tls)

    async def revoke(self, device_id: str) -> Optional[Device]:
        """Forget a device everywhere, with what push gave it, and close its sockets on every node (revocation.py)."""
        return await self.revocations.revoke(device_id)

    # --- the event fan-out ----------------------------------------------------------

    def on_event(self, seq: int, event: Any) -> None:
        """Every event of the hub, ``seq`` its number (cluster-wide with several nodes): rendered once,
        numbered for every device the registry numbers, and put into each connected device's outbox.
        The registry stores the event's rows before it returns (the durability barrier: docs/loomi.md),
        so once one device has the event it is durable for all of them."""
        # the hot path, once per streamed delta: no layer but the render and the registry's record
        t = type(event)
        fill = self.texts.completed(event) if t is ev.MessageCompleted else None
        reg = self.registry
        if not reg.wants(seq):
            return
        # the bodies without their ``{`` (each device's seq is spliced in front)
        if t is _TEXT_DELTA:
            fill = self.texts.streamed(event)  # (deltas lost before it: runtexts.py)
            tails = [codec.delta_tail(event)] if fill is None else [fill[1:], codec.delta_tail(event)]
        else:
            render = _RENDERERS.get(t)
            if render is None:
                return  # an event Loomi does not show
            bodies = render(event, self._extra(t, event) if t in _NEEDS_EXTRA else _NO_EXTRA)
            if fill:  # the text the deltas rendered here fell short of, before the run.completed
                bodies = fill + bodies
            if not bodies:
                return
            tails = [b[1:] for b in bodies]
        for d, frame in reg.record(tails, seq):
            conn = d.conn
            if conn is not None:
                conn.outbox.put(frame)

    def _extra(self, t: type, event: Any) -> codec.Extra:
        """What the render of an event of type ``t`` in ``_NEEDS_EXTRA`` needs beyond it."""
        extra = codec.Extra(conv=self.bridge.conversations.get(event.conversation_id))
        if t is ev.RunFinished:
            extra.final_text = self.texts.final(event.run_id)
        return extra

    # --- a socket ----------------------------------------------------------------------

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        ws = LoomiWS(max_msg_size=MAX_FRAME, heartbeat=None, autoping=True, compress=False)
        await ws.prepare(request)
        conn = Connection(ws, client_address(request), request.transport)
        conn.outbox = Outbox(ws_text_sender(ws, request), max_items=self.outbox_items,
                             on_overflow=lambda: self._overflow(conn))
        conn.proto = LoomiProtocol(self.settings(), now=asyncio.get_running_loop().time(), out=conn.outbox)
        ws.on_too_large = lambda: self._too_large(conn)
        self.sockets.add(ws)
        writer = self.tasks.spawn(self._write(conn), name="loomi-writer")
        try:
            if await self._handshake(conn):
                self.limiter.passed(request)  # authenticated: no longer counted as unauthenticated
                await self._serve(conn)
        finally:
            self._detach(conn)
            conn.proto.closed()
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
        """The hello: the protocol checks it, the registry looks its token or credential up."""
        p = conn.proto
        loop = asyncio.get_running_loop()
        try:
            msg = await conn.ws.receive(timeout=max(0.0, p.hello_deadline - loop.time()))
        except asyncio.TimeoutError:
            cmds = p.tick(p.hello_deadline)
        else:
            if msg.type is WSMsgType.TEXT:
                cmds = p.receive(msg.data, loop.time())
            elif msg.type is WSMsgType.BINARY:
                cmds = p.receive_binary(loop.time())
            else:
                return False
        cmd = cmds[0]
        if isinstance(cmd, Close):
            if cmd.reason == "unauthorized" and msg.type is WSMsgType.TEXT:
                log.warning("loomi: refused hello from %s: %s", conn.addr, cmd.payload["message"])
            await self._fatal(conn, cmd)
            return False
        assert isinstance(cmd, Authenticate)
        found = await self._authenticate(conn, cmd)
        if found is None or conn.ws.closed:
            return False
        device, credential, last_seq = found
        if isinstance(self.registry, ClusterRegistry):
            claim = await self._claim(device, last_seq)
            if claim is None:
                await self._fatal(conn, p.fail(Unavailable("The device is being connected elsewhere; try again")))
                return False
            if conn.ws.closed:
                return False
            res = self.registry.attach(device, claim, last_seq)
        else:
            res = self.registry.resume(device, last_seq)
        self._open(conn, device, credential, res, cmd.hello.info)
        return True

    async def _authenticate(self, conn: Connection, cmd: Authenticate) -> Optional[tuple]:
        """The registry's answer to a hello: (device, its new credential or None, last_seq), or None
        once the refusal was sent. A wrong token or credential waits for a slot of its address."""
        hs = cmd.hello
        token_fp = None
        guessed = False  # a token or credential was checked against the registry, and was wrong
        try:
            if isinstance(hs, PairHello):
                token_fp = fingerprint(hs.token)
                if not await self.registry.take_token(hs.token):
                    guessed = True
                    raise Unauthorized("Invalid or expired pairing token")
                device, credential = await self.registry.pair(hs.info)
                log.info("loomi: paired device %s (%s), pairing token fingerprint %s", device.device_id,
                         device.model or "unknown model", token_fp)
                return device, credential, None
            found = self.registry.authenticate(hs.device_id, hs.credential)
            if found is None:
                guessed = True
                raise Unauthorized("Unknown device or wrong credential")
            return found, None, hs.last_seq
        except BridgeError as exc:
            if guessed:  # never a lockout (a valid credential always passes): the answer waits for a slot
                await self.limiter.wrong(conn.addr)
            if exc.code == "unauthorized":
                log.warning("loomi: refused hello from %s%s: %s", conn.addr,
                            f" (token {token_fp})" if token_fp else "", exc.message)
            await self._fatal(conn, conn.proto.refuse(exc))
            return None

    async def _claim(self, d: Device, last_seq: Optional[int]):
        """Several nodes: take the device from wherever it was numbered (cluster.py). Its older
        socket on this node is closed first, so nothing numbers it while the store is read."""
        old = d.conn
        if old is not None:
            self._apply(old, old.proto.replaced())
        for _ in range(3):
            try:
                claim = await self.registry.claim(d, last_seq)
            except Unavailable:  # the device's row stayed locked (its owner stopped mid-batch): the phone retries
                return None
            if claim is not None:
                return claim
        return None

    def _open(self, conn: Connection, d: Device, credential: Optional[str], res, info) -> None:
        """Synchronous: hello.ok, then the replayed gap, then live frames, in this order."""
        old = d.conn if d.conn is not conn else None
        conn.device = d
        cmds = conn.proto.open(d.device_id, res, next_seq=lambda: self.registry.next_seq(d), requests=d.requests,
                               now=asyncio.get_running_loop().time(), credential=credential,
                               previous=old.proto if old is not None else None)
        if old is not None:
            self._apply(old, cmds)
        self.registry.seen(d, info)
        self.counts.replay_events += len(res.frames)  # the replay open() wrote (metrics)
        d.conn = conn
        conn.tasks.append(self.tasks.spawn(self._worker(conn), name="loomi-worker"))
        conn.tasks.append(self.tasks.spawn(self._heartbeat(conn), name="loomi-heartbeat"))
        log.info("loomi: device %s connected from %s (replayed %d, truncated %s)", d.device_id, conn.addr,
                 len(res.frames), res.truncated)

    async def _serve(self, conn: Connection) -> None:
        ws = conn.ws
        p = conn.proto
        loop = asyncio.get_running_loop()
        while not p.closing:
            msg = await ws.receive()
            if msg.type is WSMsgType.TEXT:
                self._on_text(conn, msg.data, loop.time())
                if len(conn.outbox) > self.outbox_items // 2:
                    await conn.outbox.wait_room(self.outbox_items // 4)  # a burst is answered as fast as it is read
            elif msg.type is WSMsgType.BINARY:
                p.receive_binary(loop.time())
            else:
                return  # closed, or an error (too_large included, see LoomiWS) was sent and the socket is closed

    def _on_text(self, conn: Connection, data: str, now: float) -> None:
        if REQUEST in conn.proto.receive(data, now):  # its worker takes it
            conn.ready.set()

    async def _worker(self, conn: Connection) -> None:
        p = conn.proto
        while True:
            job = p.next_request()
            if job is None:
                conn.ready.clear()
                await conn.ready.wait()
                continue
            try:
                await self._run(conn, job)
            except Exception as exc:  # never let one request end the socket
                p.failed(job, _bridge_error(exc))
            # a queue of requests read in one go (a burst of new tasks) would run back to back without the
            # loop turning: every other connection's frames wait for all of them (docs/architecture.md)
            await asyncio.sleep(0)

    async def _run(self, conn: Connection, job: Job) -> None:
        """Execute one request's command (or wait for the same request running elsewhere)."""
        p = conn.proto
        if job.joined is not None:
            fut = asyncio.get_running_loop().create_future()
            job.joined.then(lambda ok, value: fut.done() or fut.set_result((ok, value)))
            ok, value = await fut
            p.joined(job, ok, value)
            return
        if job.command is None:
            return  # answered already
        origin = Origin(surface="loomi", connection=p.device_id, decided_by="remote")
        try:
            result = await self.bridge.execute(job.command, origin)
        except Exception as exc:
            p.failed(job, _bridge_error(exc))  # a failed request did nothing: a retry may run it
            return
        except BaseException:
            p.interrupted(job)
            raise
        p.done(job, result)

    async def _heartbeat(self, conn: Connection) -> None:
        """The protocol's timers: a ping every ``ping_interval``, each pong deadline checked when it passes."""
        loop = asyncio.get_running_loop()
        p = conn.proto
        while not p.closing:
            wake = p.next_tick()
            if wake is None:
                return
            await asyncio.sleep(max(0.0, wake - loop.time()))
            if p.closing:
                return
            now = loop.time()
            cmds = p.tick(now)
            if CHECK in cmds:
                gone = self.registry.check(conn.device) if conn.device is not None else None
                if gone is not None:  # revoked, or connected to another node since (several nodes)
                    log.info("loomi: device %s is %s elsewhere; closing this socket", p.device_id, gone)
                cmds = p.checked(now, gone)
            elif cmds:
                log.info("loomi: device %s missed %d pings in a row; disconnecting", p.device_id,
                         p.heartbeat.missed)
            if cmds:
                self._apply(conn, cmds)
                return

    def _gone(self, lost: list) -> None:
        """Events gone for good passed over by this node (bridge_core/scale/gone.py), before what follows
        is numbered: every phone connected here is closed (``unavailable``), so that its next hello, which
        finds its numbering crossed them, is answered ``truncated`` (the spec's word for events gone)."""
        closing = [d for d in self.registry.devices.values() if d.conn is not None]
        self.registry.passed_gone(lost, closing)  # their seqs after them skip the window (cluster.py)
        for d in closing:
            self._kick(d.conn, Unavailable("Events were lost in the cluster; connect again to resync"))

    def _fenced_out(self, d: Device) -> None:
        """In the store's writer thread: another node claimed ``d`` (its epoch moved on: cluster.py), found
        by a write not yet counted as processed. Nothing queued for its socket here may leave (those frames'
        seqs are the new owner's now): the outbox stops at once, the socket closes on the loop."""
        conn = d.conn
        if conn is None:
            return
        conn.outbox.closed = True  # one attribute: the loop's next look at this outbox sends nothing
        self._loop.call_soon_threadsafe(self._close_fenced, conn)

    def _close_fenced(self, conn: Connection) -> None:
        """Close a socket whose device another node owns now: ``replaced`` (4000), without the error frame
        (it would take a seq of the new owner's)."""
        conn.outbox.close()
        if conn.proto.closing:
            return
        log.info("loomi: device %s was claimed by another node; closing this socket", conn.proto.device_id)
        close = conn.proto.fail(Replaced(), farewell=False)
        self._detach(conn)
        conn.closer = self.tasks.spawn(self._close(conn, close.code, close.reason), name="loomi-fenced")

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
        log.warning("loomi: device %s could not keep up; disconnected (it recovers by replay)", conn.proto.device_id)
        self._kick(conn, SlowConsumer())

    def _kick(self, conn: Connection, exc: BridgeError) -> None:
        """Close a socket from synchronous code (revoke, overflow)."""
        if not conn.proto.closing:
            self._apply(conn, [conn.proto.fail(exc)])

    def _apply(self, conn: Connection, cmds: list) -> None:
        """A fatal error the protocol decided for ``conn`` (a takeover, the heartbeat, a kick): its error
        frame numbered and queued by the protocol as it decided (``LoomiProtocol.fail``), detach it at once,
        flush the error and close in a task of its own.

        The error's seq was taken before the detach: numbered later (in the task), it was a seq this node's
        rows had given already in the store's view of the device, which goes on numbering it over the rows
        stored after the detach (history.py), so the replay at its next hello held two frames of the same
        seq and the phone dropped the second (issue 41: a run's completion after ``truncated``). And it was
        queued then: put from the task, a request's answer due meanwhile went out first with the next seq
        and the phone dropped the error (issue 41, chaos seed 2003: ``task.list.result`` 5589 before
        ``error`` 5588); now such an answer follows the error."""
        for cmd in cmds:
            if isinstance(cmd, Close):
                self._detach(conn)
                conn.closer = self.tasks.spawn(self._fatal(conn, cmd), name="loomi-kick")

    async def _fatal(self, conn: Connection, close: Close) -> None:
        """Send the fatal ``error`` (numbered, maybe queued, by the protocol) and close with its close code."""
        await self._farewell(conn, close)
        await self._close(conn, close.code, close.reason)

    async def _farewell(self, conn: Connection, close: Close) -> None:
        """Write the fatal error's frame: flush the outbox it was queued into behind the frames numbered
        before it; past the queue when the outbox overflowed (once the store has its seq: devices.py, a
        sent seq is reserved), or before authentication (seq 0, nothing stored behind it: at once, for
        queued it waited for this node's writes and its writer task, and under load the close came first)."""
        frame = close.frame
        if frame is None:
            return
        if close.queued and not conn.outbox.closed:
            await conn.outbox.flush(1.0)
            return
        try:
            if close.queued:
                await asyncio.wait_for(self.bridge.store.synced(), 1.0)
            await asyncio.wait_for(conn.ws.send_frame(frame, WSMsgType.TEXT), 1.0)
        except Exception:
            pass

    async def _too_large(self, conn: Connection) -> None:
        """The fatal ``too_large`` error, written from the socket's close (LoomiWS)."""
        await self._farewell(conn, conn.proto.fail(TooLarge(f"Frame larger than {MAX_FRAME} bytes")))

    async def _close(self, conn: Connection, code: int, reason: str) -> None:
        # an unauthenticated peer gets little time to answer the close: it is gone by 10 s
        wait = 2.0 if conn.device is not None else 0.5
        try:
            await asyncio.wait_for(conn.ws.close(code=code, message=reason.encode()[:120]), wait)
        except Exception:
            if conn.transport is not None:
                conn.transport.abort()


def _bridge_error(exc: BaseException) -> BridgeError:
    if not isinstance(exc, BridgeError):
        log.error("loomi request failed", exc_info=exc)
    return as_bridge_error(exc)


__all__ = ["LoomiFrontEnd", "cert_fingerprint", "qr_fingerprint"]
