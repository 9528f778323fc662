"""The plugin socket ``/agent/ws`` (docs/lvmh.md, Transport 1): bytes and timers only.

Each frame goes through the connection's ``protocol.PluginProtocol`` (hello first and its deadline,
the bound session, bad frames answered); a hello binds the connection to its session here (the
claim: protocol.claim; several nodes: the handover from the node it left), an event goes into the
session book (``book.ingest``), and prompts and aborts go out through the session's connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from aiohttp import WSMsgType, web

from bridge_core.kit.frontend import ws_text_sender
from bridge_core.kit.outbox import Outbox
from bridge_core.kit.security import client_address
from bridge_core.model.ids import new_id

from . import codec, cutshort, errors
from .auth import Principal, principal_of
from .book import SOURCE_NAME, display_name
from .errors import error_frame, error_response
from .protocol import HELLO_TIMEOUT, Claim, Event, Hello, PluginProtocol, Reject
from .registry import SessionRecord

if TYPE_CHECKING:
    from .host import Host

log = logging.getLogger("agent_bridge.lvmh")

HEARTBEAT = 30.0
_TEXT, _BINARY = WSMsgType.TEXT, WSMsgType.BINARY
_ENDS = (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR)
_DRAIN = object()  # _frame's answer when the writer is backlogged: wait for it before reading on


class PluginConn:
    __slots__ = ("ws", "outbox", "state", "record", "replaced", "revoked", "peer", "principal")

    def __init__(self, ws: web.WebSocketResponse, outbox: Outbox, peer: str, principal: Principal, now: float):
        self.ws = ws
        self.outbox = outbox
        self.state = PluginProtocol(now, HELLO_TIMEOUT)
        self.record: Optional[SessionRecord] = None
        self.replaced = False
        self.revoked = False  # its credential was revoked: frames are dropped until the close completes
        self.peer = peer
        self.principal = principal  # the credential it opened with (lvmh_adapter/auth.py)


def close_later(fe: "Host", ws: web.WebSocketResponse, reason: bytes, code: int = errors.CLOSE_SLOW,
                flush: Optional[Outbox] = None) -> None:
    """Close ``ws`` from a task of its own (an outbox overflowed: never wait for the peer; a
    credential was revoked: after what ``flush`` still holds, at most a second)."""
    async def close() -> None:
        if flush is not None:
            await flush.flush(1.0)
        await ws.close(code=code, message=reason)

    fe.tasks.spawn(close(), name="lvmh-close")


class PluginSockets:
    def __init__(self, fe: "Host", sockets: set):
        self.fe = fe
        self.book = fe.book
        self.sockets = sockets  # the front end's open sockets (closed at stop)
        self.conns: set[PluginConn] = set()
        self.quota_mb = float(fe.config.frontend("lvmh").worker_quota_mb)
        self.quota = int(self.quota_mb * 1024 * 1024)  # what each plugin session may store (docs/security.md)

    # --- daemon -> plugin ------------------------------------------------------------------------------

    def send_prompt(self, sid: str, text: str) -> str:
        rec = self.book.records.get(sid)
        if rec is None or rec.conn is None:
            raise errors.Offline()
        prompt_id = new_id()
        rec.conn.outbox.put(codec.prompt(sid, prompt_id, text))
        return prompt_id

    def send_abort(self, sid: str) -> None:
        rec = self.book.records.get(sid)
        if rec is None or rec.conn is None:
            raise errors.Offline()
        rec.conn.outbox.put(codec.abort(sid))

    # --- the socket ------------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        if principal is None:  # the middleware always sets it; never serve a socket without one
            return error_response("Unauthorized", 401, "unauthorized")
        ws = web.WebSocketResponse(max_msg_size=principal.max_frame, heartbeat=HEARTBEAT, compress=False)
        await ws.prepare(request)
        outbox = Outbox(ws_text_sender(ws, request), max_items=4096,
                        on_overflow=lambda: close_later(self.fe, ws, b"slow peer"))
        loop = asyncio.get_running_loop()
        conn = PluginConn(ws, outbox, client_address(request), principal, loop.time())
        writer = self.fe.tasks.spawn(conn.outbox.run(), name="lvmh-plugin-writer")
        self.sockets.add(ws)
        self.conns.add(conn)
        try:
            await self._read(conn, loop)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.sockets.discard(ws)
            self.conns.discard(conn)
            self._gone(conn)
            if not ws.closed:
                await conn.outbox.flush(1.0)
            conn.outbox.close()
            writer.cancel()
            if not ws.closed:
                await ws.close()
        return ws

    async def _read(self, conn: PluginConn, loop: asyncio.AbstractEventLoop) -> None:
        ws = conn.ws
        while not conn.replaced:
            deadline = conn.state.deadline  # the hello's (protocol.py)
            if deadline is not None:
                timeout = conn.state.tick(loop.time())
                if timeout is not None:
                    await self._answer(conn, timeout)
                    return
                try:
                    msg = await ws.receive(timeout=deadline - loop.time())
                except asyncio.TimeoutError:
                    continue
            else:
                msg = await ws.receive()
            t = msg.type
            if t is not _TEXT and t is not _BINARY:  # identity first: the hot path reads one enum member
                if t in _ENDS:
                    return
                continue
            if conn.replaced or conn.revoked:
                continue
            try:
                action = self._frame(conn, msg.data)
                if action is not None:
                    await self._act(conn, action)
            except (asyncio.CancelledError, ConnectionResetError):
                raise
            except Exception:  # a bug on one frame never ends the session
                log.exception("lvmh: handling a plugin frame failed")
                conn.outbox.put(error_frame("Internal error", "internal_error", session_id=conn.state.session_id))

    def _frame(self, conn: PluginConn, data: Any) -> Any:
        """One frame: an event of the bound session stored and shown here, without a coroutine (the
        hot path); anything else returned for ``_act`` (a hello, a refusal, the writer's back-pressure)."""
        action = conn.state.receive(data)
        if type(action) is Event:
            rec = conn.record
            if rec is None or rec.conn is not conn:
                return None
            frame = action.frame
            size = codec.stored_size(frame.raw) if frame.persisted else 0
            if not size or rec.charge(size, self.quota):
                self.book.ingest(rec, frame, size)
                return _DRAIN if self.book.log.backlogged else None
            action = conn.state.refuse_over_quota(frame, self.quota_mb)  # nothing stored; others unaffected
            if conn.state.over_quota == 1:
                log.warning("lvmh: plugin session %s has stored its quota of %g MB; refusing its events",
                            rec.id, self.quota_mb)
        return action

    async def _act(self, conn: PluginConn, action: Any) -> None:
        if action is _DRAIN:
            await self.book.log.drain()
        elif type(action) is Hello:
            await self._hello(conn, action.frame, action.rebind)
        else:
            await self._answer(conn, action)

    async def _answer(self, conn: PluginConn, action: Reject) -> None:
        """A refused frame's error frame; a fatal one closes the socket (errors.FATAL_CLOSE)."""
        if action.answer:
            conn.outbox.put(error_frame(action.message, action.code, session_id=conn.state.session_id,
                                        ref_seq=action.ref_seq))
        if action.fatal:
            await conn.outbox.flush(1.0)
            code, reason = errors.FATAL_CLOSE.get(action.code, errors.FATAL_CLOSE_DEFAULT)
            await conn.ws.close(code=code, message=reason)

    async def _refuse(self, conn: PluginConn, message: str, code: str, close_code: int, reason: bytes) -> None:
        conn.outbox.put(error_frame(message, code, session_id=conn.state.session_id))
        await conn.outbox.flush(1.0)
        await conn.ws.close(code=close_code, message=reason)

    # --- hello -----------------------------------------------------------------------------------------

    async def _hello(self, conn: PluginConn, frame: codec.PluginFrame, rebind: bool) -> None:
        rec = await self._bind(conn, frame)
        if rec is None:
            return
        sid = rec.id
        if conn.replaced or conn.ws.closed:
            if rec.conn is None:
                self._offline(rec)
            return
        if not self._take_over(rec, conn):  # a concurrent hello of the same credential: the last one wins
            await self._refuse_takeover(conn)
            return
        last = self.book.log.welcome_seq(sid)
        rec.welcomed(last)
        conn.outbox.put(codec.welcome(sid, last))
        conn.record = rec
        conn.state.welcomed()
        if rec.conn is not conn:
            rec.conn = conn
            cutshort.returned(rec)
            self.book.log.set_online(sid, True)
            self.fe.source.connected(sid)
            self.fe.relay.online(rec)
            self.fe.stream.list_changed(sid)
            if not rebind:
                log.info("lvmh: plugin session %s connected from %s (lastSeq %d)", sid, conn.peer, last)

    async def _bind(self, conn: PluginConn, frame: codec.PluginFrame) -> Optional[SessionRecord]:
        """The checks of a hello, and the session's record ready for it (None: refused and closing)."""
        sid = frame.session_id
        book = self.book
        rec = book.records.get(sid)
        if not conn.principal.may_hello(sid):
            log.info("lvmh: refused a worker's hello for another session from %s", conn.peer)
            await self._refuse(conn, "This credential may only say hello for the session it was spawned for",
                               "forbidden", errors.CLOSE_FORBIDDEN, b"not this credential's session")
            return None
        if book.is_bridge_session(sid) or (rec is not None and rec.source != "plugin"):
            await self._refuse(conn, "sessionId belongs to a bridge conversation", "conflict",
                               errors.CLOSE_CONFLICT, b"session id taken")
            return None
        if rec is None:
            rec = book.registry.add(sid, "plugin", {}, book.log.committed.get(sid, 0))
        await self.fe.relay.arriving(rec)  # several nodes: from the node it left (relay.py)
        if not self._take_over(rec, conn):
            await self._refuse_takeover(conn)
            return None
        book.apply_info(rec, frame.obj.get("session"))
        if sid not in self.fe.bridge.conversations:
            self.fe.bridge.create_conversation(display_name(rec.info), source=SOURCE_NAME, conversation_id=sid)
        await book.log.settle(sid)  # everything received for this session is committed (or failed)
        await self.fe.relay.follow_run(sid)  # several nodes: a run it left open elsewhere follows it here
        return rec

    def _take_over(self, rec: SessionRecord, conn: PluginConn) -> bool:
        """Make ``conn`` the session's connection, closing an older one of the same credential
        (a reconnect, or a new socket while the old is half-open). False when the session is
        held by a live connection under another credential: no takeover (docs/security.md)."""
        claim, old = rec.claim(conn)
        if claim is not Claim.REPLACE:
            return claim is Claim.OURS
        log.info("lvmh: plugin session %s reconnected; closing its previous socket", rec.id)
        self.fe.tasks.spawn(old.ws.close(code=errors.CLOSE_REPLACED, message=b"replaced by a newer connection"))
        return True

    async def _refuse_takeover(self, conn: PluginConn) -> None:
        log.info("lvmh: refused a hello from %s for a session held under another credential", conn.peer)
        await self._refuse(conn, "This session is connected under another credential", "session_taken",
                           errors.CLOSE_CONFLICT, b"session held by another credential")

    # --- going away ------------------------------------------------------------------------------------

    def worker_revoked(self, session_id: str) -> None:
        """A worker's token was revoked (its container deleted): close what it holds open, now."""
        for conn in list(self.conns):
            p = conn.principal
            if p.kind == "worker" and p.session_id == session_id and not conn.ws.closed:
                conn.revoked = True  # its frames are dropped from now on
                conn.outbox.put(error_frame("The worker credential was revoked", "revoked", session_id=session_id))
                close_later(self.fe, conn.ws, b"credential revoked", errors.CLOSE_REVOKED, conn.outbox)

    def _offline(self, rec: SessionRecord) -> None:
        self.book.log.set_online(rec.id, False)
        self.fe.relay.offline(rec.id)
        self.fe.source.disconnected(rec.id)
        cutshort.watch_abandoned(self.fe, rec)
        self.fe.stream.list_changed(rec.id)

    def _gone(self, conn: PluginConn) -> None:
        conn.state.close()
        rec = conn.record
        if rec is None or rec.conn is not conn:
            return
        rec.conn = None
        self._offline(rec)
        log.info("lvmh: plugin session %s disconnected", rec.id)
