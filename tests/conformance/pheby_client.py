"""A Pheby app, written from the Pheby protocol v1 specification alone.

It imports nothing from the project: plain aiohttp and the spec's frames. It
behaves as a careful app developer's client would:

- ``hello`` first, then requests with a ``request_id`` each; the direct reply
  echoes it (or is an ``error`` with it).
- It keeps a local view per conversation (transcript, the draft of the active
  run, pending approvals and clarifications) built from the live events, and
  it checks the per-turn state machine the spec gives
  (``run.accepted → message.start → (message.delta)* → message.complete →
  run.finished``): what breaks it is recorded in ``violations``.
- Reconnect ("Unsolicited messages & reconnect behavior"): reconnect, redo
  ``hello``, re-``conversation.open`` every conversation it shows and replace
  its local history, run and pending decisions with the snapshot, then
  consume live events from there.

Its questions are the user's: what does the screen show, is anything
missing, is anything there twice, is anything stuck.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any, Callable, Optional

import aiohttp

TERMINAL = ("completed", "cancelled", "failed")


class ConversationView:
    """What the app shows for one conversation."""

    def __init__(self, conversation_id: str):
        self.conversation_id = conversation_id
        self.name: Optional[str] = None
        self.messages: dict[str, dict] = {}  # message_id -> {role, text, done}, in display order
        self.run: Optional[dict] = None  # {run_id, message_id}
        self.finished: dict[str, dict] = {}  # run_id -> run.finished frame
        self.approvals: dict[str, dict] = {}  # pending: approval_id -> approval.request
        self.clarifications: dict[str, dict] = {}
        self.resolved: list[dict] = []  # approval.resolved / clarify.resolved as they arrived
        self.notices: list[dict] = []  # message.complete kind "notice" (may be ignored: not content)
        self.deleted = False

    def transcript(self) -> list[tuple[str, str]]:
        """(role, text) of every bubble on screen, in order."""
        return [(m["role"], m["text"]) for m in self.messages.values()]

    def open_bubbles(self) -> list[str]:
        return [mid for mid, m in self.messages.items() if not m["done"]]


class PhebyApp:
    def __init__(self, url: str, secret: str):
        self.url = url
        self.secret = secret
        self.http: Optional[aiohttp.ClientSession] = None
        self.ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self.frames: list[dict] = []  # every frame received (all connections), in order
        self.conn_frames: list[dict] = []  # frames of the current connection
        self.conversations: dict[str, ConversationView] = {}
        self.violations: list[str] = []
        self.close_code: Optional[int] = None
        self._ids = itertools.count(1)
        self._reader: Optional[asyncio.Task] = None
        self._changed = asyncio.Condition()
        self._turn_states: dict[str, str] = {}  # run_id -> last state of the spec's state machine
        self._sent_texts: dict[str, str] = {}  # chat.send request_id -> text
        self.on_frame: Optional[Callable[[dict], None]] = None  # sees every frame received (a test's recorder)

    # --- connection -----------------------------------------------------------------

    async def connect(self) -> dict:
        """Connect and authenticate; returns the ``ready`` frame."""
        if self.http is None:
            self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(self.url, max_msg_size=64 * 1024 * 1024, autoping=True)
        self.conn_frames = []
        self.close_code = None
        self._reader = asyncio.ensure_future(self._read(self.ws))
        await self.send({"type": "hello", "secret": self.secret, "protocol_version": 1})
        ready = await self.wait_frame(lambda f: f["type"] in ("ready", "error"))
        if ready["type"] != "ready":
            raise AssertionError(f"hello refused: {ready}")
        return ready

    async def disconnect(self) -> None:
        """The socket goes away (an app sent to the background, a lost network)."""
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await asyncio.wait([self._reader], timeout=5)

    async def close(self) -> None:
        await self.disconnect()
        if self.http is not None:
            await self.http.close()
            self.http = None

    async def reconnect(self, conversation_ids: Optional[list[str]] = None, url: Optional[str] = None) -> None:
        """The spec's reconnection procedure: reconnect, hello, re-open what is shown, replace local state."""
        await self.disconnect()
        if url is not None:
            self.url = url  # the server came back elsewhere (a test server restarts on a new port)
        await self.connect()
        listing = await self.request("conversation.list")
        known = {c["conversation_id"] for c in listing["conversations"]}
        for cid in conversation_ids if conversation_ids is not None else list(self.conversations):
            if cid in known:
                await self.open(cid)
            else:
                self.view(cid).deleted = True

    async def _read(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        while True:
            msg = await ws.receive()  # (not ``async for``: it hides the server's CLOSE frame and its code)
            if msg.type == aiohttp.WSMsgType.TEXT:
                frame = json.loads(msg.data)
                if self.on_frame is not None:
                    self.on_frame(frame)
                self.frames.append(frame)
                self.conn_frames.append(frame)
                self._apply(frame)
                async with self._changed:
                    self._changed.notify_all()
            elif msg.type == aiohttp.WSMsgType.CLOSE:
                self.close_code = msg.data  # the server's close code (the socket may be reset after it)
                break
            elif msg.type in (aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR):
                break
        if self.close_code is None:
            self.close_code = ws.close_code
        async with self._changed:
            self._changed.notify_all()

    async def send(self, frame: dict) -> None:
        assert self.ws is not None
        await self.ws.send_str(json.dumps(frame))

    async def send_raw(self, data: Any) -> None:
        assert self.ws is not None
        if isinstance(data, bytes):
            await self.ws.send_bytes(data)
        else:
            await self.ws.send_str(data)

    # --- waiting (for a state, with a deadline) -----------------------------------------

    async def wait_until(self, predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
        async def check():
            async with self._changed:
                while True:
                    value = predicate()
                    if value:
                        return value
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(check(), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"timed out waiting; last frames: {self.conn_frames[-8:]}") from None

    async def wait_frame(self, match: Callable[[dict], bool], timeout: float = 10.0, since: int = 0) -> dict:
        """The first frame of the current connection (from index ``since``) that matches."""

        def found():
            for f in self.conn_frames[since:]:
                if match(f):
                    return f
            return None

        return await self.wait_until(found, timeout)

    async def wait_closed(self, timeout: float = 10.0) -> int:
        await self.wait_until(lambda: self._reader is not None and self._reader.done(), timeout)
        return self.close_code

    # --- requests -------------------------------------------------------------------

    async def request(self, type_: str, timeout: float = 10.0, **fields: Any) -> dict:
        """Send a request with a fresh request_id; its direct reply (or error)."""
        rid = f"req-{next(self._ids)}"
        since = len(self.conn_frames)
        await self.send({"type": type_, "request_id": rid, **fields})
        return await self.wait_frame(lambda f: f.get("request_id") == rid, timeout, since)

    async def create(self, name: str = "Chat") -> str:
        reply = await self.request("conversation.create", name=name)
        assert reply["type"] == "conversation.created", reply
        self.view(reply["conversation_id"]).name = reply["name"]
        return reply["conversation_id"]

    async def open(self, conversation_id: str, limit: int = 200) -> dict:
        reply = await self.request("conversation.open", conversation_id=conversation_id, limit=limit)
        if reply["type"] == "conversation.history":
            self._replace(reply)
        return reply

    async def chat(self, conversation_id: str, text: str) -> dict:
        """Send a message; the run.accepted (or error) that answers it."""
        rid = f"req-{next(self._ids)}"
        self._sent_texts[rid] = text  # shown as the user's bubble once accepted (in event order)
        since = len(self.conn_frames)
        await self.send({"type": "chat.send", "request_id": rid, "conversation_id": conversation_id, "text": text})
        return await self.wait_frame(lambda f: f.get("request_id") == rid, since=since)

    # --- the local view -----------------------------------------------------------------

    def view(self, conversation_id: str) -> ConversationView:
        if conversation_id not in self.conversations:
            self.conversations[conversation_id] = ConversationView(conversation_id)
        return self.conversations[conversation_id]

    def _replace(self, h: dict) -> None:
        """Replace local history, run and pending decisions with the authoritative snapshot."""
        view = self.view(h["conversation_id"])
        view.messages = {}
        for m in h["messages"]:
            if m["message_id"] in view.messages:
                self.violations.append(f"snapshot lists message {m['message_id']} twice")
            view.messages[m["message_id"]] = {"role": m["role"], "text": m["text"], "done": True}
        run = h["run"]
        view.run = None
        if run is not None:
            view.run = {"run_id": run["run_id"], "message_id": run["message_id"]}
            if run["message_id"] in view.messages:  # in the transcript: its message completed, the run goes on
                self._turn_states[run["run_id"]] = "completed"
            else:
                view.messages[run["message_id"]] = {"role": "assistant", "text": run["text"], "done": False}
                self._turn_states[run["run_id"]] = "streaming"
        view.approvals = {a["approval_id"]: a for a in h["approvals"]}
        view.clarifications = {c["clarify_id"]: c for c in h["clarifications"]}

    def _turn(self, run_id: Optional[str], new: str, allowed_from: tuple) -> None:
        if run_id is None:
            return
        old = self._turn_states.get(run_id)
        if old not in allowed_from:
            self.violations.append(f"run {run_id}: {new} after {old}")
        self._turn_states[run_id] = new

    def _apply(self, f: dict) -> None:
        t = f.get("type")
        cid = f.get("conversation_id")
        if t == "conversation.history":
            return  # applied by open(), which asked for it
        if t in ("conversation.created", "conversation.updated", "conversation.renamed"):
            self.view(cid).name = f.get("name")
        elif t == "conversation.deleted":
            self.view(cid).deleted = True
        elif t == "run.accepted":
            text = self._sent_texts.pop(f.get("request_id"), None)
            if text is not None:
                self.view(cid).messages[f"local-{f['run_id']}"] = {"role": "user", "text": text, "done": True}
            self.view(cid).run = {"run_id": f["run_id"], "message_id": None}
            self._turn(f["run_id"], "accepted", (None,))
        elif t == "message.start":
            view = self.view(cid)
            mid = f["message_id"]
            if mid in view.messages and view.messages[mid]["done"]:
                self.violations.append(f"message {mid} started again after it completed")
            view.messages[mid] = {"role": "assistant", "text": "", "done": False}
            if f.get("run_id") is not None:
                if view.run is not None and view.run["run_id"] == f["run_id"]:
                    view.run["message_id"] = mid
                self._turn(f["run_id"], "started", ("accepted",))
        elif t == "message.delta":
            view = self.view(cid)
            m = view.messages.setdefault(f["message_id"], {"role": "assistant", "text": "", "done": False})
            if m["done"]:
                self.violations.append(f"delta for completed message {f['message_id']}")
            m["text"] = f["text"]  # cumulative: replace the bubble's text
        elif t == "message.complete":
            view = self.view(cid)
            if f.get("kind") == "notice":
                view.notices.append(f)
                return
            mid = f["message_id"]
            view.messages[mid] = {"role": "assistant", "text": f["text"], "done": True}
            if view.run is not None and view.run.get("message_id") == mid:
                self._turn(view.run["run_id"], "completed", ("started", "streaming"))
        elif t == "run.finished":
            view = self.view(cid)
            open_ = view.open_bubbles()
            if open_:
                self.violations.append(f"run.finished {f['run_id']} with message(s) never completed: {open_}")
            if f["status"] not in TERMINAL:
                self.violations.append(f"run.finished status {f['status']!r} outside the spec's set")
            if f["run_id"] in view.finished:
                self.violations.append(f"run {f['run_id']} finished twice")
            view.finished[f["run_id"]] = f
            if view.run is not None and view.run["run_id"] == f["run_id"]:
                view.run = None
            self._turn(f["run_id"], "finished", ("completed", None))
        elif t == "approval.request":
            self.view(cid).approvals[f["approval_id"]] = f
        elif t == "approval.resolved":
            self._resolved(f, "approvals", f["approval_id"])
        elif t == "clarify.request":
            self.view(cid).clarifications[f["clarify_id"]] = f
        elif t == "clarify.resolved":
            self._resolved(f, "clarifications", f["clarify_id"])

    def _resolved(self, f: dict, table: str, key: str) -> None:
        for view in self.conversations.values():
            pending = getattr(view, table)
            if key in pending:
                del pending[key]
                view.resolved.append(f)
                return
        # a resolution for something this app never saw pending (it was offline): nothing to update


def count(frames: list[dict], **match: Any) -> int:
    return sum(1 for f in frames if all(f.get(k) == v for k, v in match.items()))
