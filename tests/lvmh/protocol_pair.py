"""An lvmh daemon without sockets or a loop, for driving ``lvmh_adapter.protocol`` and the session book
(``lvmh_adapter.book``) with frames and a fake clock.

``Daemon`` holds what the server holds around each connection's protocol object: a ``SessionBook``
on an in-memory event log (every append committed at once), a bridge of conversations, and what the
book notifies (the browsers, the link to other nodes, the plugin source) recorded for the test to
read. ``Plugin`` is one ``/agent/ws`` socket: it sends frames into its ``PluginProtocol`` and reads
what came out, parsed, and how it was closed; ``Browser`` is one ``/ws`` socket's protocol. The glue
is the server's (lvmh_adapter/plugin_ws.py), line for line, without its awaits: a hello is bound
(``_bind``: scope, a bridge conversation's id refused, the claim), welcomed with the log's
``welcome_seq``; a refused frame is answered and a fatal one closes with ``errors.FATAL_CLOSE``.
Nothing here sleeps: time is ``Daemon.now``.
"""

from __future__ import annotations

from typing import Any, Optional

import orjson

from lvmh_adapter import codec, errors
from lvmh_adapter.auth import Principal
from lvmh_adapter.book import SOURCE_NAME, SessionBook, display_name
from lvmh_adapter.protocol import (BrowserProtocol, Claim, Event, Hello, PluginProtocol, Reject, Subscribe,
                                   Unsubscribe)

USER = Principal("user")
TS = 1759123456000


class Log:
    """persistence.EventLog's face to the book: rows by (session, seq), stored once (INSERT OR IGNORE)."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, tuple[str, str]]] = {}
        self.committed: dict[str, int] = {}
        self.reserved: dict[str, int] = {}
        self.online: dict[str, bool] = {}
        self.sessions: dict[str, dict] = {}
        self.backlogged = False

    def append(self, sid: str, seq: int, ts: int, etype: str, raw: str, charged: int = 0) -> None:
        self.rows.setdefault(sid, {}).setdefault(seq, (etype, raw))
        self.committed[sid] = max(self.committed.get(sid, 0), seq)

    def reserve(self, sid: str, upto: int) -> None:
        self.reserved[sid] = max(self.reserved.get(sid, 0), upto)

    def welcome_seq(self, sid: str) -> int:
        return self.committed.get(sid, 0)

    def set_online(self, sid: str, online: bool) -> None:
        self.online[sid] = online

    def upsert_session(self, sid: str, info: dict, source: str, online: bool = False) -> None:
        self.sessions[sid] = dict(info, source=source)

    def delete_session(self, sid: str) -> None:
        self.rows.pop(sid, None)
        self.sessions.pop(sid, None)

    def later(self, sid: str, fn, a, b, c) -> None:  # what is appended here is stored at once
        fn(a, b, c)

    def stored(self, sid: str) -> list[tuple[int, str]]:
        return [(seq, etype) for seq, (etype, _) in sorted(self.rows.get(sid, {}).items())]


class Browsers:
    """stream.EventStream's face to the book: what each session showed, in order."""

    def __init__(self) -> None:
        self.shown: dict[str, list[tuple[int, str]]] = {}
        self.subs: dict[str, set] = {}
        self.list_changes: list[tuple[Optional[str], str]] = []
        self.entries: list[str] = []

    def push(self, sid: str, seq: int, raw: str) -> None:
        self.shown.setdefault(sid, []).append((seq, orjson.loads(raw)["type"]))

    show = push  # (an event stored already)

    def list_changed(self, sid: Optional[str], change: str = "changed") -> None:
        self.list_changes.append((sid, change))

    def entry_changed(self, sid: str) -> None:
        self.entries.append(sid)

    def forget(self, sid: str) -> None:
        self.shown.pop(sid, None)


class Link:
    """relay.PluginRelay's face to the book: one node (``shared`` False), the frames it would relay."""

    shared = False

    def __init__(self) -> None:
        self.frames: list[tuple[str, str, int]] = []

    def writes(self) -> bool:
        return True

    def frame(self, sid: str, etype: str, seq: int, ts: int, raw: str) -> None:
        self.frames.append((sid, etype, seq))

    stored_frame = frame  # (an event stored already)


class Source:
    """plugin_source.PluginSource's face to the book: the plugin events it would translate."""

    def __init__(self) -> None:
        self.translated: list[tuple[str, str]] = []
        self.infos: list[tuple[str, str]] = []

    def translate(self, sid: str, etype: str, obj: dict) -> None:
        self.translated.append((sid, etype))

    def info_changed(self, sid: str, name: str, before: dict, info: dict) -> None:
        self.infos.append((sid, name))


class Conversation:
    def __init__(self, cid: str, name: str, source: str):
        self.conversation_id = cid
        self.name = name
        self.source = source
        self.created_at = TS / 1000
        self.messages: list = []
        self.run = None


class Bridge:
    def __init__(self) -> None:
        self.conversations: dict[str, Conversation] = {}

    def create_conversation(self, name: str, source: str = "demo", conversation_id: str = "") -> Conversation:
        conv = self.conversations[conversation_id] = Conversation(conversation_id, name, source)
        return conv

    def source_for(self, conv: Any) -> Any:
        raise LookupError("no agent source here")


class Daemon:
    def __init__(self, hello_timeout: float = 10.0, quota: int = 0):
        self.now = 0.0
        self.hello_timeout = hello_timeout
        self.quota = quota
        self.bridge = Bridge()
        self.book = SessionBook(self.bridge, Log())
        self.browsers = self.book.browsers = Browsers()
        self.link = self.book.link = Link()
        self.source = self.book.source = Source()
        self.plugins: list[Plugin] = []

    @property
    def log(self) -> Log:
        return self.book.log

    def plugin(self, principal: Principal = USER) -> "Plugin":
        p = Plugin(self, principal)
        self.plugins.append(p)
        return p

    def advance(self, seconds: float) -> None:
        """Time passes: each open socket's hello deadline is checked (the server's receive timeout)."""
        self.now += seconds
        for p in self.plugins:
            if p.closed is None:
                rejected = p.state.tick(self.now)
                if rejected is not None:
                    p.answer(rejected)


class Ws:
    def __init__(self) -> None:
        self.closed = False


class Plugin:
    """One plugin socket: its protocol object, what it was sent (``out``) and its close (code, reason)."""

    def __init__(self, daemon: Daemon, principal: Principal):
        self.daemon = daemon
        self.book = daemon.book
        self.principal = principal
        self.state = PluginProtocol(daemon.now, daemon.hello_timeout)
        self.ws = Ws()
        self.replaced = False
        self.record: Any = None
        self.out: list[dict] = []
        self.closed: Optional[tuple[int, bytes]] = None

    # --- frames in --------------------------------------------------------------------------------

    def send(self, data: Any) -> list[dict]:
        """One frame (a dict is encoded); what the daemon sent back for it."""
        before = len(self.out)
        if self.closed is not None or self.replaced:
            return []
        action = self.state.receive(data if isinstance(data, (str, bytes)) else orjson.dumps(data), self.daemon.now)
        if type(action) is Event:
            rec = self.record
            if rec is not None and rec.conn is self:
                frame = action.frame
                size = codec.stored_size(frame.raw) if frame.persisted else 0
                if not size or rec.charge(size, self.daemon.quota):
                    self.book.ingest(rec, frame, size)
                else:
                    self.answer(self.state.refuse_over_quota(frame, self.daemon.quota / 1024 / 1024))
        elif type(action) is Hello:
            self.hello(action.frame, action.rebind)
        else:
            self.answer(action)
        return self.out[before:]

    def hello_frame(self, sid: str, **session: Any) -> dict:
        return {"v": 1, "type": "hello", "sessionId": sid, "seq": 0, "ts": TS, "session": {"id": sid, **session}}

    def connect(self, sid: str, **session: Any) -> dict:
        """Say hello: the welcome (or the error that refused it)."""
        return self.send(self.hello_frame(sid, **session))[-1]

    def event(self, sid: str, etype: str, seq: int, **payload: Any) -> list[dict]:
        return self.send({"v": 1, "type": etype, "sessionId": sid, "seq": seq, "ts": TS + seq, **payload})

    # --- the server's glue (plugin_ws.PluginSockets), without its awaits -----------------------------

    def answer(self, action: Reject) -> None:
        if action.answer:
            self.put(errors.error_frame(action.message, action.code, session_id=self.state.session_id,
                                        ref_seq=action.ref_seq))
        if action.fatal:
            self.close(*errors.FATAL_CLOSE.get(action.code, errors.FATAL_CLOSE_DEFAULT))

    def refuse(self, message: str, code: str, close_code: int, reason: bytes) -> None:
        self.put(errors.error_frame(message, code, session_id=self.state.session_id))
        self.close(close_code, reason)

    def hello(self, frame: codec.PluginFrame, rebind: bool) -> None:
        sid, book = frame.session_id, self.book
        rec = book.records.get(sid)
        if not self.principal.may_hello(sid):
            return self.refuse("not its session", "forbidden", errors.CLOSE_FORBIDDEN, b"not this credential's session")
        if book.is_bridge_session(sid) or (rec is not None and rec.source != "plugin"):
            return self.refuse("sessionId belongs to a bridge conversation", "conflict", errors.CLOSE_CONFLICT,
                               b"session id taken")
        if rec is None:
            rec = book.registry.add(sid, "plugin", {}, book.log.committed.get(sid, 0))
        claim, old = rec.claim(self)
        if claim is Claim.TAKEN:
            return self.refuse("This session is connected under another credential", "session_taken",
                               errors.CLOSE_CONFLICT, b"session held by another credential")
        if old is not None:
            old.close(errors.CLOSE_REPLACED, b"replaced by a newer connection")
        book.apply_info(rec, frame.obj.get("session"))
        if sid not in self.daemon.bridge.conversations:
            self.daemon.bridge.create_conversation(display_name(rec.info), source=SOURCE_NAME, conversation_id=sid)
        last = book.log.welcome_seq(sid)
        rec.welcomed(last)
        self.put(codec.welcome(sid, last))
        self.record = rec
        self.state.welcomed()
        if rec.conn is not self:
            rec.conn = self
            book.log.set_online(sid, True)

    def put(self, frame: bytes) -> None:
        self.out.append(orjson.loads(frame))

    def close(self, code: int, reason: bytes) -> None:
        """The socket closes (the server's ``ws.close``; then its ``_gone``)."""
        if self.closed is not None:
            return
        self.closed = (code, reason)
        self.ws.closed = True
        self.state.close()
        rec = self.record
        if rec is not None and rec.conn is self:
            rec.conn = None
            self.book.log.set_online(rec.id, False)


class Browser:
    """One browser socket's protocol and what the server does with its actions."""

    def __init__(self, daemon: Daemon):
        self.daemon = daemon
        self.state = BrowserProtocol()
        self.subscription: Optional[str] = None
        self.out: list[dict] = []

    def send(self, data: Any) -> None:
        action = self.state.receive(data if isinstance(data, (str, bytes)) else orjson.dumps(data))
        if type(action) is Subscribe:
            self.subscription = action.session_id
            inflight = self.daemon.book.inflight.frame(action.session_id)
            if inflight is not None:
                self.out.append(orjson.loads(inflight))
        elif type(action) is Unsubscribe:
            if action.session_id is None or action.session_id == self.subscription:
                self.subscription = None
        elif action.answer:
            self.out.append(orjson.loads(errors.error_frame(action.message, action.code)))
