"""An lvmh client written from the protocol specification alone (the lvmh protocol, version 1).

Three parts, as an app developer would build them from the spec's three transports:

- ``Rest``: Transport 2, ``/api`` with ``Authorization: Bearer $LVMH_TOKEN``; errors are
  ``{"error": "message"}`` with a status.
- ``Browser``: Transport 3, ``GET /ws?token=``: ``session_list``, ``events`` (batched, with
  ``after``), ``spawn_status``; it sends ``subscribe``/``unsubscribe``. On reconnect it
  re-subscribes and refetches ``GET /api/sessions/:id/events`` from the last seq it saw
  ("UI tracks seq per session"), so it keeps one ordered, duplicate-free list of events
  per session.
- ``Plugin``: Transport 1, ``GET /agent/ws``: ``hello`` then ``welcome {lastSeq}``; events
  carry a plugin-assigned ``seq`` per session, from 1; on reconnect it resends what it
  buffered with ``seq > lastSeq``.

Nothing here comes from the project: only the stdlib and aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Optional

import aiohttp

V = 1


def now_ms() -> int:
    return int(time.time() * 1000)


async def until(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``predicate`` until it returns something truthy (the deadline fails the test)."""
    deadline = time.monotonic() + timeout
    while True:
        got = predicate()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def eventually(check: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Like ``until`` for an async check (e.g. a REST read): awaited until truthy."""
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


# --- Transport 2: REST -------------------------------------------------------------------------


class Rest:
    def __init__(self, base: str, token: str):
        self.base = base.rstrip("/")
        self.token = token
        self.http = aiohttp.ClientSession()

    async def close(self) -> None:
        await self.http.close()

    async def call(self, method: str, path: str, body: Any = None, *, data: Any = None,
                   headers: Optional[dict] = None, token: Optional[str] = None) -> tuple[int, Any]:
        h = {"Authorization": f"Bearer {self.token if token is None else token}"}
        kw: dict = {}
        if body is not None:
            kw["data"] = json.dumps(body)
            h["Content-Type"] = "application/json"
        elif data is not None:
            kw["data"] = data
        h.update(headers or {})
        async with self.http.request(method, self.base + path, headers=h, **kw) as resp:
            raw = await resp.read()
            try:
                parsed = json.loads(raw) if raw else None
            except ValueError:
                parsed = raw
            return resp.status, parsed

    async def sessions(self) -> list:
        status, body = await self.call("GET", "/api/sessions")
        assert status == 200, (status, body)
        return body

    async def session(self, sid: str) -> Optional[dict]:
        for s in await self.sessions():
            if s["id"] == sid:
                return s
        return None

    async def events(self, sid: str, after: int = 0, limit: int = 1000) -> list:
        """Every persisted event after ``after``, paging by seq (seq ascending)."""
        out: list = []
        while True:
            status, page = await self.call("GET", f"/api/sessions/{sid}/events?after={after}&limit={limit}")
            assert status == 200, (status, page)
            if not page:
                return out
            out.extend(page)
            after = page[-1]["seq"]

    async def prompt(self, sid: str, message: str) -> tuple[int, Any]:
        return await self.call("POST", f"/api/sessions/{sid}/prompt", {"message": message})

    async def abort(self, sid: str) -> tuple[int, Any]:
        return await self.call("POST", f"/api/sessions/{sid}/abort")

    async def settled(self, sid: str, runs: int = 1, timeout: float = 15.0) -> list:
        """The session's events once ``runs`` runs have settled (``agent_settled``)."""
        async def check() -> Optional[list]:
            evs = await self.events(sid)
            return evs if sum(1 for e in evs if e["type"] == "agent_settled") >= runs else None

        return await eventually(check, timeout, f"{runs} settled run(s)")


# --- a session as a UI sees it ----------------------------------------------------------------


class SessionView:
    """The events of one session as the web UI keeps them: by seq, each once, in order.

    ``message_update`` deltas are live only; the text of a message is its ``message_end``.
    """

    def __init__(self) -> None:
        self.seq = 0  # the highest seq seen (the UI's "last seen seq" for refetching)
        self.events: list[dict] = []  # seq ascending
        self.seen: set[int] = set()

    def add(self, event: dict) -> None:
        """Keep an event once, in seq order (a REST page and the live stream may overlap)."""
        seq = event["seq"]
        if seq in self.seen:
            return
        self.seen.add(seq)
        if seq > self.seq:
            self.seq = seq
            self.events.append(event)
        else:
            i = len(self.events)
            while i > 0 and self.events[i - 1]["seq"] > seq:
                i -= 1
            self.events.insert(i, event)

    def persisted(self) -> list[dict]:
        return [e for e in self.events if e["type"] != "message_update"]

    def types(self) -> list[str]:
        return [e["type"] for e in self.persisted()]

    def running(self) -> bool:
        """A run began and has not settled (the web shows "done" on ``agent_settled``)."""
        state = False
        for e in self.persisted():
            if e["type"] == "agent_start":
                state = True
            elif e["type"] == "agent_settled":
                state = False
        return state

    def open_messages(self) -> list[str]:
        open_: list[str] = []
        for e in self.persisted():
            msg = e.get("message")
            if not isinstance(msg, dict):
                continue
            if e["type"] == "message_start":
                open_.append(msg["id"])
            elif e["type"] == "message_end" and msg["id"] in open_:
                open_.remove(msg["id"])
        return open_

    def pending_decisions(self) -> list[str]:
        pending: list[str] = []
        for e in self.persisted():
            t = e["type"]
            key = e.get("approvalId") or e.get("clarifyId")
            if t in ("approval_request", "clarify_request"):
                pending.append(key)
            elif t in ("approval_resolved", "clarify_resolved") and key in pending:
                pending.remove(key)
        return pending

    def texts(self, role: str = "assistant") -> list[str]:
        return [e["message"]["text"] for e in self.persisted()
                if e["type"] == "message_end" and e["message"]["role"] == role]


# --- Transport 3: the browser socket ------------------------------------------------------------


class Browser:
    def __init__(self, base: str, token: str):
        self.base = base.rstrip("/")
        self.token = token
        self.rest = Rest(base, token)
        self.http = aiohttp.ClientSession()
        self.ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self.reader: Optional[asyncio.Task] = None
        self.sessions: list = []
        self.session_lists = 0
        self.spawn_jobs: Optional[list] = None
        self.views: dict[str, SessionView] = {}
        self.subscription: Optional[str] = None
        self.frames: list[dict] = []
        self.close_code: Optional[int] = None
        self.twice: list[tuple[str, int]] = []  # (sessionId, seq) the socket delivered more than once
        self.on_frame: Optional[Callable[[dict], None]] = None  # sees every frame received (a test's recorder)

    def view(self, sid: str) -> SessionView:
        v = self.views.get(sid)
        if v is None:
            v = self.views[sid] = SessionView()
        return v

    async def connect(self) -> "Browser":
        ws_url = self.base.replace("http", "ws", 1) + f"/ws?token={self.token}"
        self.ws = await self.http.ws_connect(ws_url)
        self.close_code = None
        self.session_lists = 0
        self.reader = asyncio.ensure_future(self._read(self.ws))
        await until(lambda: self.session_lists, what="the first session_list")
        if self.subscription is not None:  # the spec's reconnect: re-subscribe, then refetch by seq
            await self.subscribe(self.subscription)
        return self

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        delivered: set[tuple[str, int]] = set()  # on this connection
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            if self.on_frame is not None:
                self.on_frame(frame)
            self.frames.append(frame)
            t = frame.get("type")
            if t == "session_list":
                self.sessions = frame["sessions"]
                self.session_lists += 1
            elif t == "events":
                view = self.view(frame["sessionId"])
                if frame["after"] > view.seq:
                    await self._refetch(frame["sessionId"])  # a gap: fill it over REST
                for e in frame["events"]:
                    key = (frame["sessionId"], e["seq"])
                    if key in delivered:
                        self.twice.append(key)
                    delivered.add(key)
                    view.add(e)
            elif t == "spawn_status":
                self.spawn_jobs = frame["jobs"]
            # other types: ignored, as a client must
        self.close_code = ws.close_code

    async def _refetch(self, sid: str) -> None:
        view = self.view(sid)
        for e in await self.rest.events(sid, after=view.seq):
            view.add(e)

    async def subscribe(self, sid: str) -> None:
        assert self.ws is not None
        self.subscription = sid
        await self.ws.send_str(json.dumps({"type": "subscribe", "sessionId": sid}))
        await self._refetch(sid)  # what was persisted before (page load), or while we were away

    async def unsubscribe(self, sid: str) -> None:
        assert self.ws is not None
        await self.ws.send_str(json.dumps({"type": "unsubscribe", "sessionId": sid}))
        if self.subscription == sid:
            self.subscription = None

    async def drop(self) -> None:
        """The network goes away (the socket closes; the UI keeps its state)."""
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.wait([self.reader], timeout=5)
        self.ws = None

    async def close(self) -> None:
        await self.drop()
        await self.http.close()
        await self.rest.close()

    def listed(self, sid: str) -> Optional[dict]:
        for s in self.sessions:
            if s["id"] == sid:
                return s
        return None


# --- Transport 1: the plugin socket -------------------------------------------------------------


class Plugin:
    """A pi plugin: one session, plugin-assigned seqs from 1, a buffer of unpersisted events."""

    def __init__(self, base: str, token: str, session_id: str, session: Optional[dict] = None):
        self.url = base.replace("http", "ws", 1).rstrip("/") + "/agent/ws"
        self.token = token
        self.sid = session_id
        self.session = session or {
            "id": session_id, "name": None, "cwd": "/home/dev/project", "model": "glm-5.3",
            "provider": "zai-renaud", "agent": False, "repo": "group/project", "startedAt": now_ms(),
        }
        self.seq = 0
        self.buffer: list[dict] = []  # events not known persisted (cleared up to welcome.lastSeq)
        self.sent: list[dict] = []  # every event this session produced, in seq order
        self.http = aiohttp.ClientSession()
        self.ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self.received: list[dict] = []
        self.welcomes: list[dict] = []
        self.reader: Optional[asyncio.Task] = None

    def envelope(self, etype: str, seq: int, **payload: Any) -> dict:
        frame = {"v": V, "sessionId": self.sid, "seq": seq, "ts": now_ms(), "type": etype}
        frame.update(payload)
        return frame

    async def connect(self, *, resend: bool = True) -> int:
        """Dial, ``hello``, await ``welcome``; resend buffered events after ``lastSeq``. Returns lastSeq."""
        self.ws = await self.http.ws_connect(self.url, headers={"Authorization": f"Bearer {self.token}"})
        n = len(self.welcomes)
        self.reader = asyncio.ensure_future(self._read(self.ws))
        await self.ws.send_str(json.dumps(self.envelope("hello", 0, session=self.session)))
        await until(lambda: len(self.welcomes) > n, what="welcome")
        last = self.welcomes[-1]["lastSeq"]
        self.buffer = [e for e in self.buffer if e["seq"] > last]
        if resend:
            for e in self.buffer:
                await self.ws.send_str(json.dumps(e))
        return last

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for msg in ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.received.append(frame)
            if frame.get("type") == "welcome":
                self.welcomes.append(frame)

    def prompts(self) -> list[dict]:
        return [f for f in self.received if f.get("type") == "prompt"]

    def next(self, etype: str, **payload: Any) -> dict:
        """The next event of the session (numbered now, buffered until persisted)."""
        self.seq += 1
        e = self.envelope(etype, self.seq, **payload)
        self.sent.append(e)
        if etype != "message_update":
            self.buffer.append(e)
        return e

    async def emit(self, etype: str, **payload: Any) -> dict:
        e = self.next(etype, **payload)
        if self.ws is not None and not self.ws.closed:
            await self.ws.send_str(json.dumps(e))
        return e

    async def send_raw(self, data: Any) -> None:
        assert self.ws is not None
        if isinstance(data, bytes):
            await self.ws.send_bytes(data)
        else:
            await self.ws.send_str(data)

    async def drop(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.wait([self.reader], timeout=5)
        self.ws = None

    async def close(self) -> None:
        await self.drop()
        await self.http.close()

    # a pi run, as the spec's event table describes one
    async def run(self, reply: str, *, prompt: Optional[str] = None, settle: bool = True) -> str:
        mid = f"a{self.seq + 1}"
        if prompt is not None:
            uid = f"u{self.seq + 1}"
            await self.emit("message_start", message={"role": "user", "id": uid})
            await self.emit("message_end", message=user_message(uid, prompt))
        await self.emit("agent_start")
        await self.emit("message_start", message={"role": "assistant", "id": mid})
        for word in reply.split(" "):
            await self.emit("message_update", delta=word + " ")
        if settle:
            await self.finish(mid, reply)
        return mid

    async def finish(self, mid: str, reply: str) -> None:
        await self.emit("message_end", message=assistant_message(mid, reply))
        await self.emit("agent_end", usage={"inputTokens": 3, "outputTokens": 5})
        await self.emit("agent_settled")


def assistant_message(mid: str, text: str) -> dict:
    return {"role": "assistant", "id": mid, "text": text, "thinking": None, "toolCalls": [], "toolCallId": None}


def user_message(mid: str, text: str) -> dict:
    return {"role": "user", "id": mid, "text": text, "thinking": None, "toolCalls": [], "toolCallId": None}


# --- a bridge conversation to watch (the demo agent) -------------------------------------------


async def create_conversation(pheby_ws_url: str, secret: str, name: str) -> str:
    """A conversation of the bridge's own agent, made the way a Pheby client makes one (its spec's
    ``hello`` then ``conversation.create``); as an lvmh session it has the same id."""
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(pheby_ws_url) as ws:
            await ws.send_str(json.dumps({"type": "hello", "secret": secret, "protocol_version": 1}))
            await ws.send_str(json.dumps({"type": "conversation.create", "name": name, "request_id": "c1"}))
            async for msg in ws:
                frame = json.loads(msg.data)
                if frame.get("type") == "conversation.created" and frame.get("request_id") == "c1":
                    return frame["conversation_id"]
                assert frame.get("type") != "error", frame
    raise AssertionError("no conversation.created")
