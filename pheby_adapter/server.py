"""The Pheby front end: WS ``/ws`` and ``GET /attachments/{id}`` (thin aiohttp layer)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Optional

from aiohttp import WSMsgType, web

from bridge_core import commands as cmd
from bridge_core import events as ev
from bridge_core.attachments import file_response
from bridge_core.errors import BridgeError, InvalidJson, RateLimited, TooLarge
from bridge_core.frontend import FrontEnd, ws_text_sender
from bridge_core.security import HelloLockout, bearer_token, client_address, same_secret
from bridge_core.hub import Outbox
from bridge_core.wire import dumps

from . import codec, pacing
from .errors import to_pheby_error
from .session import CLOSE_POLICY, CLOSE_TOO_BIG, CLOSE_TRY_AGAIN, PhebySession

log = logging.getLogger("agent_bridge.pheby")

NOT_FOUND_BODY = {"error": {"code": "not_found", "message": "Attachment unavailable"}}
UNAUTHORIZED_BODY = {"error": {"code": "unauthorized", "message": "Unauthorized"}}
LOCKED_BODY = {"error": {"code": "rate_limited", "message": "Too many failed attempts; try again later"}}


class Connection:
    __slots__ = ("ws", "outbox", "session", "peer", "id", "executing", "transport")

    def __init__(self, ws: web.WebSocketResponse, session: PhebySession, peer: str, conn_id: str, transport: Any = None):
        self.ws = ws
        self.transport = transport  # the request's, to abort a peer that does not take the close frame
        self.session = session
        self.peer = peer
        self.id = conn_id
        self.outbox: Optional[Outbox] = None
        self.executing: Any = None  # the command whose reply this connection awaits


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
            err = TooLarge(f"Frame larger than {codec.MAX_FRAME // (1024 * 1024)} MiB")
            try:
                await self.send_frame(dumps(codec.error_frame(err, None, time.time())), WSMsgType.TEXT)
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
        return self.config.pheby_secret

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
        t = type(event)
        if t is ev.TextDelta:
            if event.kind != "text":
                return
            loop = asyncio.get_running_loop()
            pace = self.pacer.offer(loop.time(), event)
            if pace.now:
                self._push_draft(event.message_id)
            elif pace.at is not None:
                self._draft_timers[event.message_id] = loop.call_at(pace.at, self._push_draft, event.message_id)
            return
        if t is ev.MessageCompleted or t is ev.RunFinished:
            mid = event.message_id if t is ev.MessageCompleted else f"draft-{event.run_id}"
            self.pacer.end(mid)
            timer = self._draft_timers.pop(mid, None)
            if timer is not None:
                timer.cancel()
        frames = codec.render_event(event)
        if not frames:
            return
        encoded = [dumps(f) for f in frames]
        for conn in tuple(self.conns.values()):  # an overflowing outbox removes its conn (_slow)
            box = conn.outbox
            if box is not None:
                if conn.executing is not None and codec.reply_covers(conn.executing, event):
                    continue  # the requester's reply says it already (conversation.deleted): one frame
                for data in encoded:
                    box.put(data)

    def _push_draft(self, mid: str) -> None:
        """Queue the pacer's push of ``mid`` to every client (pacing.DraftPacer: what and when)."""
        self._draft_timers.pop(mid, None)
        loop = asyncio.get_running_loop()
        now = loop.time()
        later = self.pacer.recheck(mid, now).at  # the newest draft is longer than the one the push was due for
        if later is not None:
            self._draft_timers[mid] = loop.call_at(later, self._push_draft, mid)
            return
        push = self.pacer.push(mid, now)
        if push is None:
            return
        frame, key = push
        for conn in tuple(self.conns.values()):  # an overflowing outbox removes its conn (_slow)
            if conn.outbox is not None:
                conn.outbox.put(frame, key)

    # --- WebSocket ----------------------------------------------------------------

    async def handle_ws(self, request: web.Request) -> web.StreamResponse:
        peer = client_address(request)
        if self.lockout.locked(peer):
            return web.json_response(LOCKED_BODY, status=429)
        # a frame over the spec's 2 MiB and up to twice that is read, then refused by the session (the
        # client has sent it all, so it reads the error and the close); a larger one is refused from its
        # header by aiohttp, never read nor buffered, and PhebySocket says too_large before the close
        ws = PhebySocket(heartbeat=self.heartbeat, max_msg_size=2 * codec.MAX_FRAME, autoping=True)
        await ws.prepare(request)
        self._next_id += 1
        conn = Connection(ws, PhebySession(self.secret, time.time(), rate=self.rate, burst=self.burst), peer,
                          f"p{self._next_id}", request.transport)
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
        ws = conn.ws
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.hello_timeout
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return await self._auth_timeout(conn)
            try:
                msg = await ws.receive(timeout=remaining)
            except asyncio.TimeoutError:
                return await self._auth_timeout(conn)
            if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                return False
            if self.lockout.locked(conn.peer):  # tripped while this socket waited: its hello is not judged
                err = RateLimited("Too many failed attempts; try again later")
                await self._send_direct(ws, [codec.error_frame(err, None, time.time())])
                await ws.close(code=CLOSE_POLICY, message=b"rate_limited")
                return False
            if msg.type != WSMsgType.TEXT:
                step = conn.session.feed(b"\x00", time.time())
            else:
                step = conn.session.feed(msg.data, time.time())
            if step.auth_failed:
                self.lockout.fail(conn.peer)
                self.stats["auth_failures"] += 1
                log.info("pheby: failed hello from %s", conn.peer)
                await self.limiter.wrong(conn.peer)  # the answer waits for the address's next slot
            await self._send_direct(ws, step.frames)
            if step.close is not None:
                await ws.close(code=step.close, message=_reason(step.frames))
                return False
            if step.authenticated:
                return True

    async def _auth_timeout(self, conn: Connection) -> bool:
        from bridge_core.errors import AuthTimeout

        await self._send_direct(conn.ws, [codec.error_frame(AuthTimeout("No hello within 10 seconds"), None, time.time())])
        await conn.ws.close(code=CLOSE_POLICY, message=b"auth_timeout")
        return False

    async def _send_direct(self, ws: web.WebSocketResponse, frames: list) -> None:
        for f in frames:
            try:
                await ws.send_frame(dumps(f), WSMsgType.TEXT)
            except (ConnectionError, RuntimeError):
                return

    async def _serve(self, conn: Connection) -> None:
        ws = conn.ws
        origin = cmd.Origin(surface="pheby", connection=conn.id, decided_by="remote")
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                data = msg.data
            elif msg.type == WSMsgType.BINARY:
                self._queue(conn, codec.error_frame(InvalidJson("Binary frames are not supported"), None, time.time()))
                continue
            else:
                break
            step = conn.session.feed(data, time.time())
            for f in step.frames:
                self._queue(conn, f)
            if conn.outbox is not None and len(conn.outbox) > self.outbox_items // 2:
                await conn.outbox.wait_room(self.outbox_items // 4)  # a burst is answered as fast as it is read
            if step.close is not None:
                if conn.outbox is not None:
                    await conn.outbox.flush(1.0)
                await ws.close(code=step.close, message=_reason(step.frames))
                break
            if step.command is not None:
                await self._execute(conn, step.command, origin)
                await asyncio.sleep(0)  # one request per turn of the loop (docs/architecture.md)
            if conn.session.rate_limited:
                self.stats["rate_limited"] += conn.session.rate_limited
                conn.session.rate_limited = 0

    async def _execute(self, conn: Connection, command: Any, origin: cmd.Origin) -> None:
        """Run one request; its reply goes out before the broadcasts it causes.

        The reply's place in the outbox is reserved before the bridge runs the
        command (whose events are broadcast synchronously as they happen), and
        filled once the reply is known: the spec's order, reply first.
        """
        rid = getattr(command, "request_id", None)
        box = conn.outbox
        slot = box.reserve() if box is not None else None
        conn.executing = command
        frame: Optional[dict] = None
        try:
            result = await self.bridge.execute(command, origin)
            frame = codec.reply(command, result, time.time())
        except BridgeError as err:
            frame = codec.error_frame(to_pheby_error(err, command), rid, time.time())
        except Exception:
            log.exception("pheby: %s failed", type(command).__name__)
            frame = codec.error_frame(to_pheby_error(Exception(), command), rid, time.time())
        finally:
            conn.executing = None
            if box is not None:
                box.fill(slot, dumps(frame) if frame is not None else None)

    def _queue(self, conn: Connection, frame: dict) -> None:
        if conn.outbox is not None:
            conn.outbox.put(dumps(frame))

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


def _reason(frames: list) -> bytes:
    for f in frames:
        if f.get("type") == "error":
            return f["error"]["code"].encode()
    return b""
