"""The Pheby front end: WS ``/ws`` and ``GET /attachments/{id}`` (thin aiohttp layer).

Every protocol rule is in ``protocol.py``, without I/O. This module accepts
the socket, feeds what arrives to the connection's ``PhebyProtocol`` with
the clock, runs the commands it returns through ``Bridge.execute``, writes
the frames it gives (the handshake's directly, then through the
connection's ``Outbox``), and runs the timers: the hello's deadline, and
the draft pushes ``protocol.Broadcast`` paces.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional, Sequence

from aiohttp import WSMsgType, web

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.kit.downloads import file_response
from bridge_core.model.errors import BridgeError
from bridge_core.kit.frontend import FrontEnd, ws_text_sender
from bridge_core.kit.outbox import Outbox
from bridge_core.kit.security import HelloLockout, bearer_token, client_address, same_secret

from . import codec, pacing
from .protocol import (
    AUTH_FAILED,
    CLOSE_TOO_BIG,
    CLOSE_TRY_AGAIN,
    Broadcast,
    Close,
    PhebyProtocol,
    State,
    too_large_frame,
)

log = logging.getLogger("agent_bridge.pheby")

NOT_FOUND_BODY = {"error": {"code": "not_found", "message": "Attachment unavailable"}}
UNAUTHORIZED_BODY = {"error": {"code": "unauthorized", "message": "Unauthorized"}}
LOCKED_BODY = {"error": {"code": "rate_limited", "message": "Too many failed attempts; try again later"}}
_GONE = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)


class Connection:
    __slots__ = ("ws", "outbox", "protocol", "peer", "id", "transport")

    def __init__(self, ws: web.WebSocketResponse, protocol: PhebyProtocol, peer: str, conn_id: str,
                 transport: Any = None):
        self.ws = ws
        self.transport = transport  # the request's, to abort a peer that does not take the close frame
        self.protocol = protocol
        self.peer = peer
        self.id = conn_id
        self.outbox: Optional[Outbox] = None


class PhebySocket(web.WebSocketResponse):
    """A WebSocket that tells the client ``too_large`` before aiohttp's own 1009 close.

    aiohttp refuses a message over ``max_msg_size`` from its frame header
    (nothing of it is buffered) and closes the socket with 1009 from inside
    ``receive``, before the handler sees anything. The spec wants every
    oversized frame answered with a ``too_large`` error first, so that close
    (1009 without a reason: only aiohttp's reader closes so) sends it.
    """

    async def close(self, *, code: int = 1000, message: bytes = b"", drain: bool = True) -> bool:
        if code == CLOSE_TOO_BIG and not message and not self.closed:
            try:
                await self.send_frame(too_large_frame(time.time()), WSMsgType.TEXT)
            except Exception:  # the peer is gone: nothing to tell
                pass
            message = b"too_large"
        return await super().close(code=code, message=message, drain=drain)


class PhebyFrontEnd(FrontEnd):
    name = "pheby"

    def __init__(self, bridge, config):
        super().__init__(bridge, config)
        opts = config.section("pheby")
        self.hello_timeout = float(opts.get("hello_timeout", codec.HELLO_DEADLINE))
        self.heartbeat = float(opts.get("heartbeat", 30.0))
        self.rate = float(opts.get("rate", 100.0))
        self.burst = float(opts.get("burst", 200.0))
        self.outbox_items = int(opts.get("outbox_items", 2048))
        # the spec's lockout counts failed hellos only; wrong secrets (hello or download) are also
        # slowed per address by self.limiter (FrontEnd), which never refuses the right secret
        self.lockout = HelloLockout(codec.LOCKOUT_FAILS, codec.LOCKOUT_WINDOW)
        self.conns: dict[str, Connection] = {}
        self.pacer = pacing.from_options(opts)  # when drafts go out (pacing.py)
        self.broadcast = Broadcast(self.pacer)  # what every connection is sent (protocol.py)
        self._draft_timers: dict[str, asyncio.TimerHandle] = {}  # the pacer's due pushes
        self._next_id = 0
        self.stats = {"connections": 0, "slow_disconnects": 0, "rate_limited": 0, "auth_failures": 0}

    async def prepare(self) -> None:
        codec.prepare()

    @property
    def draft_interval(self) -> float:
        return self.pacer.interval

    @draft_interval.setter
    def draft_interval(self, value: float) -> None:
        self.pacer.interval = value

    @property
    def secret(self) -> str:
        return self.config.secret("pheby")

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/ws", self.handle_ws)
        app.router.add_get("/attachments/{attachment_id}", self.handle_attachment)
        app.router.add_get("/attachments/{attachment_id}/{tail:.*}", self.handle_attachment)
        return app

    def watching(self, conversation_id: str) -> bool:
        """Whether a client would see ``conversation_id`` now (push: docs/push.md); every Pheby client sees all."""
        return bool(self.conns)

    def connections(self) -> int:
        return len(self.conns)  # the sockets past their hello (metrics)

    # --- fan-out ----------------------------------------------------------------

    def on_event(self, seq: int, event: Any) -> None:
        broadcast = self.broadcast
        if type(event) is ev.TextDelta:
            loop = asyncio.get_running_loop()
            pace = broadcast.offer(event, loop.time())
            if pace.now:
                self._push_draft(event.message_id)
            elif pace.at is not None:
                self._draft_timers[event.message_id] = loop.call_at(pace.at, self._push_draft, event.message_id)
            return
        ended = broadcast.end(event)
        stale = None
        if ended is not None:
            stale = ended.stale
            timer = self._draft_timers.pop(ended.message_id, None)
            if timer is not None:
                timer.cancel()
        if not broadcast.render(event) and stale is None:
            return
        for conn in tuple(self.conns.values()):  # an overflowing outbox removes its conn (_slow)
            box = conn.outbox
            if box is not None:
                if stale is not None:
                    box.drop(stale)  # an unsent later draft: message.complete follows
                for data in conn.protocol.send(event):
                    box.put(data)

    def _push_draft(self, mid: str) -> None:
        """Queue the due push of ``mid`` to every client (protocol.Broadcast, pacing.DraftPacer: what and when)."""
        self._draft_timers.pop(mid, None)
        loop = asyncio.get_running_loop()
        push = self.broadcast.push_due(mid, loop.time())
        if push is None:
            return
        if push.at is not None:  # the newest draft is longer than the one the push was due for
            self._draft_timers[mid] = loop.call_at(push.at, self._push_draft, mid)
            return
        for conn in tuple(self.conns.values()):  # an overflowing outbox removes its conn (_slow)
            if conn.outbox is not None:
                conn.outbox.put(push.data, push.key)

    # --- WebSocket ----------------------------------------------------------------

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        peer = client_address(request)
        if self.lockout.locked(peer):
            return web.json_response(LOCKED_BODY, status=429)
        # a frame over the spec's 2 MiB and up to twice that is read, then refused by the protocol (the
        # client has sent it all, so it reads the error and the close); a larger one is refused from its
        # header by aiohttp, never read nor buffered, and PhebySocket says too_large before the close
        ws = PhebySocket(heartbeat=self.heartbeat, max_msg_size=2 * codec.MAX_FRAME, autoping=True)
        await ws.prepare(request)
        self._next_id += 1
        secret = self.secret
        protocol = PhebyProtocol(lambda given: same_secret(given, secret), time.time(), broadcast=self.broadcast,
                                 rate=self.rate, burst=self.burst, hello_timeout=self.hello_timeout)
        conn = Connection(ws, protocol, peer, f"p{self._next_id}", request.transport)
        self.sockets.add(ws)
        writer = None
        try:
            if not await self._handshake(conn):
                return ws
            self.limiter.passed(request)  # authenticated: no longer counted as unauthenticated
            conn.outbox = Outbox(
                ws_text_sender(ws, request), max_items=self.outbox_items, on_overflow=lambda: self._slow(conn)
            )
            writer = self.tasks.spawn(conn.outbox.run(), name=f"pheby-writer-{conn.id}")
            self.conns[conn.id] = conn
            self.stats["connections"] += 1
            await self._serve(conn)
        finally:
            self.conns.pop(conn.id, None)
            self.sockets.discard(ws)
            if conn.outbox is not None:
                conn.outbox.close()
            if writer is not None:
                writer.cancel()
            if not ws.closed:
                await ws.close()
        return ws

    async def _handshake(self, conn: Connection) -> bool:
        """Until the protocol is open (True) or closed (False): frames and the hello's deadline."""
        ws, protocol = conn.ws, conn.protocol
        while True:
            remaining = (protocol.deadline or 0.0) - time.time()
            msg = None
            if remaining > 0:
                try:
                    msg = await ws.receive(timeout=remaining)
                except asyncio.TimeoutError:
                    pass
            if msg is None:
                actions = protocol.tick(time.time())
            elif msg.type in _GONE:
                return False
            else:
                locked = self.lockout.locked(conn.peer)  # tripped while this socket waited: its hello is not judged
                if msg.type == WSMsgType.TEXT:
                    actions = protocol.receive(msg.data, time.time(), locked=locked)
                else:
                    actions = protocol.receive_binary(time.time(), locked=locked)
            if not await self._handshake_step(conn, actions):
                return False
            if protocol.state is State.OPEN:
                return True

    async def _handshake_step(self, conn: Connection, actions: Sequence[Any]) -> bool:
        """Take a handshake frame's actions and send its frames; False once the socket is closed."""
        if AUTH_FAILED in actions:
            self.lockout.fail(conn.peer)
            self.stats["auth_failures"] += 1
            log.info("pheby: failed hello from %s", conn.peer)
            await self.limiter.wrong(conn.peer)  # the answer waits for the address's next slot
        await self._send_direct(conn.ws, conn.protocol.frames_to_send())
        for action in actions:
            if type(action) is Close:
                await conn.ws.close(code=action.code, message=action.reason)
                return False
        return True

    async def _send_direct(self, ws: web.WebSocketResponse, frames: list) -> None:
        for data in frames:
            try:
                await ws.send_frame(data, WSMsgType.TEXT)
            except (ConnectionError, RuntimeError):
                return

    async def _serve(self, conn: Connection) -> None:
        ws, protocol = conn.ws, conn.protocol
        box = conn.outbox
        assert box is not None
        origin = cmd.Origin(surface="pheby", connection=conn.id, decided_by="remote")
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                actions = protocol.receive(msg.data, time.time())
            elif msg.type == WSMsgType.BINARY:
                protocol.receive_binary(time.time())
                for data in protocol.frames_to_send():
                    box.put(data)
                continue
            else:
                break
            for data in protocol.frames_to_send():
                box.put(data)
            if len(box) > self.outbox_items // 2:
                await box.wait_room(self.outbox_items // 4)  # a burst is answered as fast as it is read
            for action in actions:
                if type(action) is Close:
                    await box.flush(1.0)
                    await ws.close(code=action.code, message=action.reason)
                    return
                await self._execute(conn, action, origin)
                await asyncio.sleep(0)  # one request per turn of the loop (docs/architecture.md)
            if protocol.rate_limited:
                self.stats["rate_limited"] += protocol.rate_limited
                protocol.rate_limited = 0

    async def _execute(self, conn: Connection, command: Any, origin: cmd.Origin) -> None:
        """Run one request; its reply goes out before the broadcasts it causes.

        The reply's place in the outbox is reserved before the bridge runs the
        command (whose events are broadcast synchronously as they happen), and
        filled once the reply is known: the spec's order, reply first.
        """
        box = conn.outbox
        protocol = conn.protocol
        slot = box.reserve() if box is not None else None
        protocol.execute(command)
        data: Optional[bytes] = None
        try:
            result = await self.bridge.execute(command, origin)
            data = protocol.reply(result, time.time())
        except BridgeError as err:
            data = protocol.fail(err, time.time())
        except Exception as exc:
            log.exception("pheby: %s failed", type(command).__name__)
            data = protocol.fail(exc, time.time())
        finally:
            protocol.done()
            if box is not None:
                box.fill(slot, data)

    def _slow(self, conn: Connection) -> None:
        self.conns.pop(conn.id, None)  # no more fan-out to it, at once
        self.stats["slow_disconnects"] += 1
        log.warning("pheby: connection %s could not keep up; disconnecting", conn.id)
        self.tasks.spawn(_close_slow(conn.ws, conn.transport), name=f"pheby-slow-{conn.id}")

    # --- attachments --------------------------------------------------------------

    def _request_secret(self, request: web.Request) -> Optional[str]:
        given = bearer_token(request, ("bearer", "apikey"))
        if given is not None:
            return given
        header = request.headers.get("X-Pheby-Secret")
        return header.strip() or None if header else None

    async def handle_attachment(self, request: web.Request) -> web.StreamResponse:
        # downloads never feed the hello lockout; a wrong secret is slowed, none is a plain 401
        given = self._request_secret(request)
        if given is None:
            return web.json_response(UNAUTHORIZED_BODY, status=401)
        if not same_secret(given, self.secret):
            await self.limiter.wrong(client_address(request))
            return web.json_response(UNAUTHORIZED_BODY, status=401)
        self.limiter.passed(request)
        found = None
        if "tail" not in request.match_info:
            found = self.bridge.attachments.get(request.match_info["attachment_id"])
        if found is None:
            return web.json_response(NOT_FOUND_BODY, status=404)
        return file_response(*found)


async def _close_slow(ws: web.WebSocketResponse, transport: Any) -> None:
    """Close with 1013 slow_consumer; a peer that does not even take the close frame is aborted."""
    try:
        await asyncio.wait_for(ws.close(code=CLOSE_TRY_AGAIN, message=b"slow_consumer"), 2.0)
    except Exception:
        if transport is not None:
            transport.abort()

