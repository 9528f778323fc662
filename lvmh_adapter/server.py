"""The lvmh front end: plugin socket ``/agent/ws``, REST ``/api``, browser ``/ws``, web UI ``/``.

Thin aiohttp layer over the pure pieces: ``codec`` (frames), ``session``
(per-connection state), ``persistence`` (batched ``events``/``sessions``
writes), ``stream`` (browser fan-out), ``render`` (the bridge's own
conversations as lvmh events) and ``plugin_source`` (plugin sessions as a
bridge agent source). REST handlers live in ``rest``.

Every lvmh session is a record here: plugin sessions (their seq comes from
the plugin) and the bridge's own conversations (their seq is assigned here).
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

from aiohttp import WSMsgType, web

from bridge_core.model import events as ev
from bridge_core.model.errors import BridgeError
from bridge_core.kit.frontend import FrontEnd, ws_text_sender
from bridge_core.kit.security import bearer_token, client_address
from bridge_core.kit.outbox import Outbox
from bridge_core.model.ids import new_id

from . import codec, cutshort, errors
from .auth import PRINCIPAL_KEY as PRINCIPAL
from .auth import Authenticator, Principal, WorkerCredentials, principal_of
from .errors import error_frame, error_response
from .request import check_origin, public_url
from .inflight import InFlight
from .listing import EXT_LIST_DELTAS, Listing
from .persistence import EventLog
from .plugin_source import SOURCE_NAME, PluginSource
from .push import PUSH_DECIDE, push_routes
from .registry import SEQ_STRIDE, Claim, SessionRecord, SessionRegistry, cluster_seq
from .relay import PluginRelay
from .render import Renderer
from .protocol import HELLO_TIMEOUT, Event, Hello, PluginProtocol, Reject
from .stream import BrowserConn, EventStream

log = logging.getLogger("agent_bridge.lvmh")

HEARTBEAT = 30.0
MAX_BODY = codec.MAX_BODY
LIST_EVENTS = (ev.ConversationCreated, ev.ConversationRenamed, ev.ConversationUpdated)
PLUGIN_RETURN = 60.0  # s a plugin has to come back before the daemon closes its open run (twice its backoff cap)


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


def display_name(info: dict) -> str:
    name = info.get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()[:200]
    cwd = info.get("cwd") or ""
    base = os.path.basename(cwd.rstrip("/")) if isinstance(cwd, str) else ""
    return f"pi: {base}" if base else "pi session"


class LvmhFrontEnd(FrontEnd):
    name = "lvmh"

    def __init__(self, bridge, config):
        super().__init__(bridge, config)
        self.workers = WorkerCredentials(bridge.store)
        self.workers.on_revoke(self._worker_revoked)
        self.auth = Authenticator(config.secret("lvmh"), self.workers)
        self.public_url = public_url(config)
        self.plugin_conns: set[PluginConn] = set()
        self.log = EventLog(bridge.store)
        self.registry = SessionRegistry()  # the seq books and ownership of every session (registry.py)
        self.records = self.registry.records
        self.listing = Listing(self)  # entries, the full list, the list in pages (listing.py)
        self.stream = EventStream(self.listing, self.spawn_jobs)
        self.renderer = Renderer(self.bridge_info)
        self.inflight = InFlight()  # open messages' text for browsers subscribing mid-stream
        self.source = PluginSource(self)
        self.relay = PluginRelay(self)  # pi sessions on every node (relay.py)
        self.spawn: Any = None
        self.gitlab: Any = None
        self._models: dict[str, tuple] = {}
        sec = config.section("lvmh") if hasattr(config, "section") else {}
        self.plugin_return = float(sec.get("plugin_return_seconds") or PLUGIN_RETURN)
        # what each plugin session may store ([lvmh] worker_quota_mb; docs/security.md "What a worker may store")
        self.quota_mb = float(config.frontend("lvmh").worker_quota_mb)
        self.quota = int(self.quota_mb * 1024 * 1024)
        self.cluster: Any = None  # several nodes (docs/scale-out.md): set in prepare
        self.seq_base = 0  # several nodes: where bridge sessions' derived seqs start (registry.cluster_seq)

    def watching(self, conversation_id: str) -> bool:
        """Whether a browser has ``conversation_id`` open now (push: docs/push.md)."""
        return self.stream.subscribed(conversation_id)

    # --- lifecycle ---------------------------------------------------------------------------------

    async def prepare(self) -> None:
        await self.log.amigrate()
        self.workers.migrated()
        self.cluster = getattr(self.bridge, "cluster", None)
        if self.cluster is not None:
            self.seq_base = await self.log.cluster_base()
        self.registry.restore(self.log.load(shared=self.cluster is not None), codec.session_info)
        self.bridge.add_source(self.source)
        self.relay.attach()
        self._load_extensions()

    def _load_extensions(self) -> None:
        try:
            from .gitlab import GitLabClient
        except ImportError:
            GitLabClient = None  # type: ignore[assignment]
        if GitLabClient is not None:
            self.gitlab = GitLabClient(self.bridge.store, self.config.frontend("lvmh").gitlab_url)
        try:
            from .spawn import SpawnManager
        except ImportError:
            SpawnManager = None  # type: ignore[assignment]
        if SpawnManager is not None:
            self.spawn = SpawnManager(self.config, self.bridge.store, on_change=self.spawn_changed,
                                      credentials=self.workers)

    async def start(self, host: str, port: int, ssl_context=None) -> int:
        bound = await super().start(host, port, ssl_context)
        # the bridge has loaded its conversations: drop sessions of conversations deleted meanwhile
        for sid, rec in list(self.records.items()):
            if rec.source == "bridge" and sid not in self.bridge.conversations:
                self._forget(sid, store=self.cluster is None)  # several nodes: another may have created it
        cutshort.restore_open_runs(self)  # runs the previous process left open
        self.relay.start()
        if self.spawn is not None and getattr(self.spawn, "daemon_url", None) is None:
            scheme = "https" if ssl_context is not None else "http"
            shown = f"[{host}]" if ":" in host else host
            self.spawn.daemon_url = f"{scheme}://{shown}:{bound}"
        return bound

    async def stop(self) -> None:
        held = []
        for rec in self.records.values():
            if rec.abandon is not None:
                rec.abandon.cancel()
                rec.abandon = None
            conn = rec.conn
            if conn is not None:
                rec.conn = None
                self.log.set_online(rec.id, False)
                held.append(rec.id)
        await super().stop()
        self.log.flush()
        await self.relay.stopped(held)
        for ext in (self.spawn, self.gitlab):
            close = getattr(ext, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:
                    log.exception("lvmh: closing %s failed", type(ext).__name__)
        await self.source.stop()

    def build_app(self) -> web.Application:
        from .conversations import Conversations
        from .rest import Rest

        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=MAX_BODY)
        rest = Rest(self)
        app.add_routes(rest.routes())
        app.add_routes(Conversations(self).routes())  # the bridge's own conversations (new, rename, delete, search)
        app.add_routes([web.get("/agent/ws", self._agent_ws), web.get("/ws", self._browser_ws)])
        app.add_routes(push_routes(self))  # /api/push/* and the service worker (lvmh_adapter/push.py)
        for ext in (self.spawn, self.gitlab):
            if ext is not None:
                app.add_routes(ext.routes())
        try:
            from .web import static_routes
        except ImportError:
            static_routes = None  # type: ignore[assignment]
        if static_routes is not None:
            app.add_routes(static_routes())
        app.router.add_route("*", "/api/{tail:.*}", rest.not_found)
        return app

    # --- auth and errors ---------------------------------------------------------------------------

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        """Origin, then credential -> principal, then the principal's scope (lvmh_adapter/auth.py)."""
        path = request.path
        if path == "/ws":
            presented = bearer_token(request) or request.query.get("token")
        elif path.startswith(PUSH_DECIDE):  # the decision token in the path is the credential (push.py)
            refused = check_origin(request, self.public_url)
            return error_response(refused, 403, "forbidden_origin") if refused else await handler(request)
        elif path.startswith("/api/") or path == "/api" or path == "/agent/ws":
            presented = bearer_token(request)
        else:
            return await handler(request)
        refused = check_origin(request, self.public_url)
        if refused is not None:
            log.info("lvmh: refused a request to %s with a foreign Origin from %s", path, client_address(request))
            return error_response(refused, 403, "forbidden_origin")
        principal = self.auth.resolve(presented)
        if principal is not None:
            if not principal.may_open(path):
                return error_response("Forbidden: a worker credential may only open /agent/ws for its own session",
                                      403, "forbidden")
            request[PRINCIPAL] = principal
            self.limiter.passed(request)
            return await handler(request)
        # The right token always passes at once; a wrong one is answered at the address's next slot
        # (security.AuthLimiter, at most 20 per second), none at all is a plain 401.
        addr = client_address(request)
        if presented:
            await self.limiter.wrong(addr)
        log.info("lvmh: refused an unauthenticated request to %s from %s", path, addr)
        return error_response("Unauthorized: Authorization: Bearer <LVMH_TOKEN> required", 401, "unauthorized")

    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.content_type == "application/json" or not request.path.startswith("/api"):
                raise
            return error_response(exc.reason or "Error", exc.status)
        except BridgeError as exc:
            return errors.rest_error(exc)
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            return errors.rest_error(exc)

    # --- sessions ------------------------------------------------------------------------------------

    def plugin_record(self, sid: str) -> Optional[SessionRecord]:
        rec = self.records.get(sid)
        conv = self.bridge.conversations.get(sid) if rec is None and self.cluster is not None else None
        if conv is not None and conv.source == SOURCE_NAME:  # a pi session another node holds: from the store
            rec = self.registry.restore_one(self.log.load_one(sid), codec.session_info)
        return rec if rec is not None and rec.source == "plugin" else None

    def plugin_online(self, sid: str) -> bool:
        rec = self.records.get(sid)
        return rec is not None and rec.conn is not None

    def plugin_info(self, sid: str) -> Optional[dict]:
        rec = self.plugin_record(sid)
        return rec.info if rec is not None else None

    def is_bridge_session(self, sid: str) -> bool:
        conv = self.bridge.conversations.get(sid)
        return conv is not None and conv.source != SOURCE_NAME

    def _model_of(self, cid: str) -> tuple:
        cached = self._models.get(cid)
        if cached is None:
            conv = self.bridge.conversations.get(cid)
            try:
                cur = self.bridge.source_for(conv).current_model(cid)
                cached = (cur.model, cur.provider)
            except BridgeError:
                cached = (None, None)
            except Exception:
                log.exception("lvmh: current model of a conversation")
                cached = (None, None)
            self._models[cid] = cached
        return cached

    def bridge_info(self, cid: str) -> dict:
        conv = self.bridge.conversations.get(cid)
        rec = self.records.get(cid)
        if conv is None:
            return dict(rec.info) if rec is not None and rec.info else {"id": cid}
        model, provider = self._model_of(cid)
        return {
            "id": cid,
            "name": conv.name,
            "cwd": "",
            "model": model,
            "provider": provider,
            "agent": False,
            "repo": None,
            "startedAt": int(conv.created_at * 1000),
        }

    def spawn_jobs(self) -> Optional[list]:
        if self.spawn is None:
            return None
        try:
            return list(self.spawn.jobs())
        except Exception:
            log.exception("lvmh: spawn job list failed")
            return None

    def spawn_changed(self, jobs: Any = None) -> None:
        """``on_change`` callback of the spawner: ``spawn_status`` to every browser (coalesced per tick)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self.stream.spawn_changed()

    # --- events the daemon writes -----------------------------------------------------------------

    def _store_event(self, rec: SessionRecord, seq: int, etype: str, payload: dict, ts_ms: int,
                     persist: bool = True) -> None:
        """One event the daemon writes into a session: persisted (unless a delta, or not ``persist``) and streamed."""
        raw = codec.event_raw(rec.id, seq, ts_ms, etype, payload)
        if etype != "message_update" and persist:
            self.log.append(rec.id, seq, ts_ms, etype, raw)
        self.show_event(rec, seq, etype, payload, ts_ms, raw)

    def show_event(self, rec: SessionRecord, seq: int, etype: str, payload: dict, ts_ms: int, raw: str) -> None:
        """An event the daemon wrote into a session, to the browsers (a plugin session's: every node's)."""
        if etype != "message_update":
            rec.last_event_at = ts_ms
        self.inflight.feed(rec.id, etype, seq, payload)
        self.stream.push(rec.id, seq, raw)
        if rec.source == "plugin":  # a run its plugin left open, closed here (cutshort.py)
            self.relay.frame(rec.id, etype, seq, ts_ms, raw)

    # --- daemon -> plugin ------------------------------------------------------------------------------

    def send_prompt(self, sid: str, text: str) -> str:
        rec = self.records.get(sid)
        if rec is None or rec.conn is None:
            raise errors.Offline()
        prompt_id = new_id()
        rec.conn.outbox.put(codec.prompt(sid, prompt_id, text))
        return prompt_id

    def send_abort(self, sid: str) -> None:
        rec = self.records.get(sid)
        if rec is None or rec.conn is None:
            raise errors.Offline()
        rec.conn.outbox.put(codec.abort(sid))

    # --- plugin socket -------------------------------------------------------------------------------

    async def _agent_ws(self, request: web.Request) -> web.StreamResponse:
        principal = principal_of(request)
        if principal is None:  # the middleware always sets it; never serve a socket without one
            return error_response("Unauthorized", 401, "unauthorized")
        ws = web.WebSocketResponse(max_msg_size=principal.max_frame, heartbeat=HEARTBEAT, compress=False)
        await ws.prepare(request)
        outbox = Outbox(ws_text_sender(ws, request), max_items=4096, on_overflow=lambda: self._close_later(ws, b"slow peer"))
        loop = asyncio.get_running_loop()
        conn = PluginConn(ws, outbox, client_address(request), principal, loop.time())
        writer = self.tasks.spawn(conn.outbox.run(), name="lvmh-plugin-writer")
        self.sockets.add(ws)
        self.plugin_conns.add(conn)
        try:
            while not conn.replaced:
                deadline = conn.state.deadline  # the hello's (protocol.py)
                if deadline is not None:
                    timeout = conn.state.tick(loop.time())
                    if timeout is not None:
                        await self._answer(conn, timeout)
                        break
                    try:
                        msg = await ws.receive(timeout=deadline - loop.time())
                    except asyncio.TimeoutError:
                        continue
                else:
                    msg = await ws.receive()
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    break
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY) or conn.replaced or conn.revoked:
                    continue
                try:
                    await self._plugin_frame(conn, msg.data)
                except (asyncio.CancelledError, ConnectionResetError):
                    raise
                except Exception:  # a bug on one frame never ends the session
                    log.exception("lvmh: handling a plugin frame failed")
                    conn.outbox.put(error_frame("Internal error", "internal_error", session_id=conn.state.session_id))
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.sockets.discard(ws)
            self.plugin_conns.discard(conn)
            self._plugin_gone(conn)
            if not ws.closed:
                await conn.outbox.flush(1.0)
            conn.outbox.close()
            writer.cancel()
            if not ws.closed:
                await ws.close()
        return ws

    async def _plugin_frame(self, conn: PluginConn, data: Any) -> None:
        action = conn.state.receive(data)
        if type(action) is Event:
            rec = conn.record
            if rec is None or rec.conn is not conn:
                return
            frame = action.frame
            size = codec.stored_size(frame.raw) if frame.persisted else 0
            if not size or rec.charge(size, self.quota):
                self._ingest(rec, frame, size)
                if self.log.backlogged:
                    await self.log.drain()
                return
            action = conn.state.refuse_over_quota(frame, self.quota_mb)  # nothing stored; others unaffected
            if conn.state.over_quota == 1:
                log.warning("lvmh: plugin session %s has stored its quota of %g MB; refusing its events",
                            rec.id, self.quota_mb)
        if type(action) is Hello:
            await self._hello(conn, action.frame, action.rebind)
            return
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

    async def _hello(self, conn: PluginConn, frame: codec.PluginFrame, rebind: bool) -> None:
        sid = frame.session_id
        rec = self.records.get(sid)
        if not conn.principal.may_hello(sid):
            log.info("lvmh: refused a worker's hello for another session from %s", conn.peer)
            await self._refuse(conn, "This credential may only say hello for the session it was spawned for",
                               "forbidden", errors.CLOSE_FORBIDDEN, b"not this credential's session")
            return
        if self.is_bridge_session(sid) or (rec is not None and rec.source != "plugin"):
            await self._refuse(conn, "sessionId belongs to a bridge conversation", "conflict",
                               errors.CLOSE_CONFLICT, b"session id taken")
            return
        if rec is None:
            rec = self.registry.add(sid, "plugin", {}, self.log.committed.get(sid, 0))
        if self.cluster is not None and rec.conn is None:
            await self.relay.handover(sid)  # the node it was connected to has stored what it got
            await self.cluster.holds.hold(cutshort.HOLD, sid)  # this node answers for its open run from now
            self._refresh_plugin(rec)  # its plugin may have been connected to another node meanwhile
        if not self._take_over(rec, conn):
            await self._refuse_takeover(conn)
            return
        self._apply_info(rec, frame.obj.get("session"))
        if sid not in self.bridge.conversations:
            self.bridge.create_conversation(display_name(rec.info), source=SOURCE_NAME, conversation_id=sid)
        await self.log.settle(sid)  # everything received for this session is committed (or failed)
        if self.cluster is not None:  # a run it left open on another node follows it here
            await self.source.take_over(sid, self.relay.carried.pop(sid, None))
        if conn.replaced or conn.ws.closed:
            if rec.conn is None:
                self.log.set_online(sid, False)
                self.relay.offline(sid)
                self.source.disconnected(sid)
                cutshort.watch_abandoned(self, rec)
                self.stream.list_changed(sid)
            return
        if not self._take_over(rec, conn):  # a concurrent hello of the same credential: the last one wins
            await self._refuse_takeover(conn)
            return
        last = self.log.welcome_seq(sid)
        rec.welcomed(last)
        conn.outbox.put(codec.welcome(sid, last))
        conn.record = rec
        conn.state.welcomed()
        if rec.conn is not conn:
            rec.conn = conn
            cutshort.returned(rec)
            self.log.set_online(sid, True)
            self.source.connected(sid)
            self.relay.online(rec)
            self.stream.list_changed(sid)
            if not rebind:
                log.info("lvmh: plugin session %s connected from %s (lastSeq %d)", sid, conn.peer, last)

    def _refresh_plugin(self, rec: SessionRecord) -> None:
        """Several nodes: the session's seqs and open run as stored by whichever node held it last."""
        got = self.log.refresh(rec.id)
        if got is not None:
            rec.refreshed(*got)
        rec.run = self.log.open_run(rec.id)

    def _close_later(self, ws: web.WebSocketResponse, reason: bytes, code: int = errors.CLOSE_SLOW,
                     flush: Optional[Outbox] = None) -> None:
        """Close ``ws`` from a task of its own (an outbox overflowed: never wait for the peer; a
        credential was revoked: after what ``flush`` still holds, at most a second)."""
        async def close() -> None:
            if flush is not None:
                await flush.flush(1.0)
            await ws.close(code=code, message=reason)

        self.tasks.spawn(close(), name="lvmh-close")

    def _take_over(self, rec: SessionRecord, conn: PluginConn) -> bool:
        """Make ``conn`` the session's connection, closing an older one of the same credential
        (a reconnect, or a new socket while the old is half-open). False when the session is
        held by a live connection under another credential: no takeover (docs/security.md)."""
        claim, old = rec.claim(conn)
        if claim is not Claim.REPLACE:
            return claim is Claim.OURS
        log.info("lvmh: plugin session %s reconnected; closing its previous socket", rec.id)
        self.tasks.spawn(old.ws.close(code=errors.CLOSE_REPLACED, message=b"replaced by a newer connection"))
        return True

    async def _refuse_takeover(self, conn: PluginConn) -> None:
        log.info("lvmh: refused a hello from %s for a session held under another credential", conn.peer)
        await self._refuse(conn, "This session is connected under another credential", "session_taken",
                           errors.CLOSE_CONFLICT, b"session held by another credential")

    def _worker_revoked(self, session_id: str) -> None:
        """A worker's token was revoked (its container deleted): close what it holds open, now."""
        for conn in list(self.plugin_conns):
            p = conn.principal
            if p.kind == "worker" and p.session_id == session_id and not conn.ws.closed:
                conn.revoked = True  # its frames are dropped from now on
                conn.outbox.put(error_frame("The worker credential was revoked", "revoked", session_id=session_id))
                self._close_later(conn.ws, b"credential revoked", errors.CLOSE_REVOKED, conn.outbox)

    def _apply_info(self, rec: SessionRecord, raw: Any) -> None:
        before = rec.info
        info = codec.session_info(raw, rec.id, before)
        if info == before:
            return
        rec.info = info
        self.log.upsert_session(rec.id, info, "plugin")
        self.source.info_changed(rec.id, display_name(info), before, info)  # the shared events come from the source
        self.stream.list_changed(rec.id)

    def _ingest(self, rec: SessionRecord, frame: codec.PluginFrame, charged: int = 0) -> None:
        etype = frame.type
        if etype == "message_update":
            fresh, reserve = rec.plugin_delta(frame.seq)
            if reserve is not None:  # recorded ahead, so a closing event never reuses a delta's seq
                self.log.reserve(rec.id, reserve)
            if fresh:
                self.inflight.feed(rec.id, etype, frame.seq, frame.obj)
                self.stream.push(rec.id, frame.seq, frame.raw)
                self.relay.frame(rec.id, etype, frame.seq, frame.ts, frame.raw)
                self.source.translate(rec.id, etype, frame.obj)
            return
        self.log.append(rec.id, frame.seq, frame.ts, etype, frame.raw, charged)
        if not rec.plugin_event(frame.seq, frame.ts):
            return  # a resend: stored once (INSERT OR IGNORE), not shown or translated twice
        rec.run.feed(etype, frame.obj)
        self.inflight.feed(rec.id, etype, frame.seq, frame.obj)
        self.stream.push(rec.id, frame.seq, frame.raw)
        self.relay.frame(rec.id, etype, frame.seq, frame.ts, frame.raw)
        try:
            if etype == "session_info":
                self._apply_info(rec, frame.obj.get("session"))
            self.source.translate(rec.id, etype, frame.obj)
        except Exception:  # the event is stored and shown; only its shared-event form is lost
            log.exception("lvmh: translating a %s event of a plugin session failed", etype)

    def _plugin_gone(self, conn: PluginConn) -> None:
        conn.state.close()
        rec = conn.record
        if rec is None or rec.conn is not conn:
            return
        rec.conn = None
        self.log.set_online(rec.id, False)
        self.relay.offline(rec.id)
        self.source.disconnected(rec.id)
        cutshort.watch_abandoned(self, rec)
        self.stream.list_changed(rec.id)
        log.info("lvmh: plugin session %s disconnected", rec.id)

    # --- browser socket ------------------------------------------------------------------------------

    async def _browser_ws(self, request: web.Request) -> web.StreamResponse:
        from .protocol import BrowserProtocol, Subscribe

        ws = web.WebSocketResponse(max_msg_size=codec.MAX_BROWSER_FRAME, heartbeat=HEARTBEAT, compress=False)
        await ws.prepare(request)
        conn = BrowserConn(
            ws, Outbox(ws_text_sender(ws, request), on_overflow=lambda: self._close_later(ws, b"slow consumer; reconnect")),
            deltas=EXT_LIST_DELTAS in request.query.get("ext", "").split(","),
        )
        writer = self.tasks.spawn(conn.outbox.run(), name="lvmh-browser-writer")
        state = BrowserProtocol()
        self.sockets.add(ws)
        self.stream.add(conn)
        conn.outbox.put(self.listing.first_frame(conn.deltas), key="session_list")
        jobs = self.spawn_jobs()
        if jobs is not None:
            conn.outbox.put(codec.spawn_status_frame(jobs), key="spawn_status")
        try:
            async for msg in ws:
                if msg.type not in (WSMsgType.TEXT, WSMsgType.BINARY):
                    continue
                action = state.receive(msg.data)
                if type(action) is Subscribe:
                    self.stream.subscribe(conn, action.session_id)
                    inflight = self.inflight.frame(action.session_id)
                    if inflight is not None:
                        conn.outbox.put(inflight)
                elif type(action) is Reject:
                    if action.answer:
                        conn.outbox.put(error_frame(action.message, action.code))
                else:
                    self.stream.unsubscribe(conn, action.session_id)
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.stream.remove(conn)
            self.sockets.discard(ws)
            conn.outbox.close()
            writer.cancel()
        return ws

    # --- the bridge's own conversations --------------------------------------------------------------

    def _bridge_record(self, cid: str) -> SessionRecord:
        rec = self.records.get(cid)
        if rec is None:
            info = self.bridge_info(cid)
            rec = self.registry.add(cid, "bridge", info, self.log.committed.get(cid, 0))
            if self._writes():
                self.log.upsert_session(cid, info, "bridge", online=True)
        return rec

    def _writes(self) -> bool:
        """Whether this node stores what it renders now: with several nodes, only the event's origin does."""
        c = self.cluster
        return c is None or c.delivering_own

    def _emit(self, cid: str, etype: str, payload: dict, ts: float) -> None:
        rec = self._bridge_record(cid)
        seq, reserve = rec.next_bridge_seq()
        if reserve is not None:  # reserve ahead, so a restart never reuses a seq
            self.log.reserve(cid, reserve)
        self._store_event(rec, seq, etype, payload, int(ts * 1000))

    def _emit_all(self, cid: str, rendered: list, ts: float, n: int) -> None:
        """Events rendered from event ``n``: on several nodes numbered from ``n`` (registry.cluster_seq)."""
        if self.cluster is None:
            for etype, payload in rendered:
                self._emit(cid, etype, payload, ts)
            return
        rec = self._bridge_record(cid)
        persist = self._writes()
        if len(rendered) > SEQ_STRIDE:
            log.error("lvmh: %d events rendered from one; those past %d dropped", len(rendered), SEQ_STRIDE)
        for i, (etype, payload) in enumerate(rendered[:SEQ_STRIDE]):
            seq = cluster_seq(self.seq_base, n, i)
            if seq > rec.high:
                rec.high = seq
            self._store_event(rec, seq, etype, payload, int(ts * 1000), persist)

    def on_event(self, seq: int, e: Any) -> None:
        t = type(e)
        if t is ev.TextDelta:  # the hot path: only rendered for a browser that watches
            cid = e.conversation_id
            if e.kind != "text":
                return
            if cid not in self.stream.subs and self.renderer.open_message(cid) is not None:
                if self.cluster is not None:
                    at = cluster_seq(self.seq_base, seq, 0)  # the seq its message_update would have had
                else:
                    at = self.records[cid].high if cid in self.records else 0
                self.inflight.append(cid, e.delta, at)
                return
            conv = self.bridge.conversations.get(cid)
            if conv is None or conv.source == SOURCE_NAME:
                return
            self._emit_all(cid, self.renderer.render(e), e.ts, seq)
            return
        if t in LIST_EVENTS:
            self._models.pop(e.conversation_id, None)
            cid = e.conversation_id
            if self.is_bridge_session(cid):
                rec = self.records.get(cid)
                if rec is None:
                    self._bridge_record(cid)
                else:
                    rec.info = self.bridge_info(cid)
                    if self._writes():
                        self.log.upsert_session(cid, rec.info, "bridge")
            elif self.cluster is not None and not self._writes():
                self.plugin_record(cid)  # a pi session connected to another node: listed here too
            self.stream.list_changed(cid, "added" if t is ev.ConversationCreated else "changed")
            return
        if t is ev.ConversationDeleted:
            self._forget(e.conversation_id, store=self._writes())  # several nodes: by the deletion's node
            return
        if t is ev.ModelChanged:
            if e.conversation_id is None:
                self._models.clear()
            else:
                self._models.pop(e.conversation_id, None)
            self.stream.list_changed(e.conversation_id)  # None: every conversation's model
        cid = getattr(e, "conversation_id", None)
        if cid is None:
            return
        self.stream.entry_changed(cid)  # its entry's time, status, preview, waiting decisions (activity.py)
        conv = self.bridge.conversations.get(cid)
        if conv is None or conv.source == SOURCE_NAME:
            return  # plugin sessions are stored as their plugin sent them, never re-rendered
        self._emit_all(cid, self.renderer.render(e), e.ts, seq)

    def _forget(self, sid: str, store: bool = True) -> None:
        rec = self.registry.pop(sid)
        if rec is not None and rec.abandon is not None:
            rec.abandon.cancel()
        self._models.pop(sid, None)
        self.renderer.forget(sid)
        self.inflight.forget(sid)
        self.stream.forget(sid)
        if rec is not None and store:
            self.log.delete_session(sid)
        self.stream.list_changed(sid, "removed")
