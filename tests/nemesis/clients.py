"""The nemesis's clients: the spec-built apps of tests/conformance (they import nothing of the
project), each recording into the history every frame it receives (with its connection and
node) and every request it makes (invocation, then ``ok``, ``fail`` with the server's code, or
``info`` when no answer came).

- ``Phone``: a Loomi phone that pairs on one node and reconnects with ``last_seq`` to any other;
  it can drop its socket without a close frame (a reset) or cut it in the middle of a frame.
- ``Chat``: a Pheby client; reconnecting is the spec's procedure (hello, list, re-open).
- ``Watcher``: an lvmh browser subscribed to a session; on reconnect it re-subscribes and
  refetches from the last seq it saw (``after=seq``); it answers approvals over REST.

None of them waits on the clock: a request waits for its answer or for its socket to close,
within ``OP_TIMEOUT`` (a node stopped with SIGSTOP answers once it is continued).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import struct
from typing import Any, Optional

import aiohttp

from tests.conformance.loomi_client import Closed, HelloRefused, LoomiApp
from tests.conformance.lvmh_client import Browser
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET

from .history import History, Op
from .rawsock import transport_of
from .world import World

OP_TIMEOUT = 20.0  # s: longer than any pause the nemesis makes (3 s) plus a node's restart
FAILURES = (asyncio.TimeoutError, TimeoutError, AssertionError, aiohttp.ClientError, OSError, Closed,
            HelloRefused, RuntimeError, KeyError, TypeError, ValueError)  # fmt: skip


async def attempt(h: History, op: Op, coro: Any, timeout: float = OP_TIMEOUT) -> Any:
    """The request's answer; None when it raised or timed out (the op is then ``info``: unknown)."""
    try:
        return await asyncio.wait_for(coro, timeout)
    except FAILURES as e:
        h.info(op, error=f"{type(e).__name__}: {str(e)[:160]}")
        return None


def abort(ws: Any, half_frame: Optional[bytes] = None) -> None:
    """End a client socket with no close frame: a reset, or (``half_frame``) those bytes and a FIN."""
    if ws is None or ws.closed:
        return
    transport = transport_of(ws)
    if transport is None or transport.is_closing():
        return  # the connection is already going: nothing is left to cut
    if half_frame is not None:
        transport.write(half_frame)
        transport.close()  # flushes what was written, then FIN: the server reads a frame cut short
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:  # its descriptor closed under us (the peer's close raced this cut): abort alone
            pass
    transport.abort()


def half_text_frame(text: str) -> bytes:
    """The first half of a masked client text frame carrying ``text`` (RFC 6455 §5.2)."""
    data = text.encode()
    head = bytes([0x81, 0x80 | len(data)]) if len(data) < 126 else bytes([0x81, 0xFE]) + struct.pack("!H", len(data))
    mask = os.urandom(4)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return head + mask + masked[: len(masked) // 2]


class Recorder:
    surface = ""

    def __init__(self, h: History, world: World, name: str):
        self.h, self.world, self.name = h, world, name
        self.conn = -1
        self.node: Optional[str] = None

    def frame(self, frame: dict) -> None:
        self.h.received(self.name, self.surface, self.conn, self.node, frame)

    def new_connection(self, node: str) -> None:
        self.conn += 1
        self.node = node

    def invoke(self, f: str, **value: Any) -> Op:
        return self.h.invoke(self.name, f, self.node, **value)


class Phone(Recorder):
    surface = "loomi"

    def __init__(self, h: History, world: World, name: str):
        super().__init__(h, world, name)
        self.app = LoomiApp(name)
        self.app.on_frame = self.frame

    @property
    def connected(self) -> bool:
        return self.app.connected

    async def pair(self, node: str) -> bool:
        qr = await self.world.pair_token(node)
        self.new_connection(node)
        op = self.invoke("pair", conn=self.conn)
        ok = await attempt(self.h, op, self.app.pair(dict(qr, url=self.world.url(node, "loomi"))))
        if ok is not None:
            self.h.ok(op, device=self.app.device_id)
        return ok is not None

    async def connect(self, node: str, f: str = "connect") -> bool:
        await self.close()  # the app leaves its socket first: what it reports as processed is final
        self.new_connection(node)
        op = self.invoke(f, conn=self.conn, last_seq=self.app.processed)
        try:
            ok = await asyncio.wait_for(self.app.connect(self.world.url(node, "loomi")), OP_TIMEOUT)
        except HelloRefused as e:
            self.h.fail(op, code=(e.frame.get("payload") or {}).get("code"))
            return False
        except FAILURES as e:
            self.h.info(op, error=f"{type(e).__name__}: {str(e)[:160]}")
            return False
        self.h.ok(op, truncated=ok["payload"]["truncated"], seq=ok["seq"])
        return True

    async def request(self, type_: str, payload: dict, answer: str = "ack") -> dict:
        """Its answer, or ``{"type": "closed"}`` when the socket ended first."""
        app = self.app
        rid = payload.setdefault("request_id", app.next_request_id())
        start = len(app.events)
        await app.send(type_, payload)

        def answered() -> Optional[dict]:
            for f in app.events[start:]:
                if f["type"] in (answer, "error") and f["payload"].get("request_id") == rid:
                    return f
            return {"type": "closed"} if app.close_code is not None else None

        return await app.until(answered, OP_TIMEOUT)

    async def send(self, text: str, conversation: Optional[str] = None) -> Optional[dict]:
        payload = {"text": text} if conversation is None else {"text": text, "task_id": conversation}
        op = self.invoke("send", conversation=conversation, text=text)
        ans = await attempt(self.h, op, self.request("session.send", payload))
        return self._answer(op, ans, lambda res: dict(run=res["run_id"], conversation=res["task_id"],
                                                      **({"created": res["task_id"]} if conversation is None else {})))

    async def resolve(self, approval: str, choice: str) -> None:
        op = self.invoke("resolve", approval=approval, choice=choice)
        ans = await attempt(self.h, op, self.request("approval.resolve", {"approval_id": approval, "choice": choice}))
        self._answer(op, ans, lambda res: {"accepted": True})

    def _answer(self, op: Op, ans: Optional[dict], result: Any) -> Optional[dict]:
        if ans is None:
            return None
        if ans["type"] == "closed":
            self.h.info(op, error="the socket closed before the answer")
            return None
        if ans["type"] == "ack" and ans["payload"].get("ok"):
            res = ans["payload"].get("result") or {}
            self.h.ok(op, **result(res))
            return res
        self.h.fail(op, code=ans["payload"].get("code"), message=str(ans["payload"].get("message"))[:160])
        return None

    def pending(self) -> list[str]:
        asked = [f["payload"]["approval_id"] for f in self.app.events if f["type"] == "approval.required"]
        told = {f["payload"]["approval_id"] for f in self.app.events if f["type"] == "approval.resolved"}
        return [a for a in asked if a not in told]

    async def drop(self, cut: bool = False) -> None:
        """The socket ends with no close frame: a reset, or (``cut``) half a frame then nothing."""
        if not self.connected:
            return
        fault = self.h.fault("cut" if cut else "drop", self.name)
        half = half_text_frame(json.dumps({"v": 1, "type": "session.send", "payload": {
            "text": "never whole", "request_id": f"cut-{self.conn}"}})) if cut else None  # fmt: skip
        app = self.app
        if app._reader is not None:  # nothing more is processed: the frames in flight are lost with the socket
            app._reader.cancel()
            await asyncio.wait([app._reader], timeout=OP_TIMEOUT)  # a cancelled reader ends; bounded anyway
            app._reader = None
        abort(app.ws, half)
        await self.close()
        self.h.healed(fault)

    async def final(self, node: str) -> bool:
        """Reconnect and wait for the answer to a ping: every frame replayed before it has arrived."""
        if not await self.connect(node, f="final-connect"):
            return False
        op = self.invoke("final", conn=self.conn)
        ans = await attempt(self.h, op, self._ping())
        if ans is not None:
            self.h.ok(op, processed=self.app.processed)
        return ans is not None

    async def _ping(self) -> int:
        before = len(self.app.pongs)
        await self.app.send("ping")
        await self.app.until(lambda: len(self.app.pongs) > before or self.app.close_code is not None, OP_TIMEOUT)
        if len(self.app.pongs) <= before:
            raise Closed(self.app.close_code)
        return len(self.app.pongs)

    async def close(self) -> None:
        """Leave the socket: no frame is processed after this (a reset when the node does not answer
        the close at once)."""
        app = self.app
        if app._reader is not None:
            app._reader.cancel()
            await asyncio.wait([app._reader], timeout=OP_TIMEOUT)  # a cancelled reader ends; bounded anyway
            app._reader = None
        if app.ws is not None and not app.ws.closed:
            try:
                await asyncio.wait_for(app.ws.close(), 1.0)
            except FAILURES:
                abort(app.ws)
        try:
            await app.disconnect()
        except FAILURES:
            pass


def pheby_error(reply: dict) -> dict:
    """The code and message of a Pheby error frame (``{"type": "error", "error": {"code", "message"}}``)."""
    err = reply.get("error")
    err = err if isinstance(err, dict) else reply
    return {"code": err.get("code"), "message": str(err.get("message"))[:160]}


class Chat(Recorder):
    surface = "pheby"

    def __init__(self, h: History, world: World, name: str):
        super().__init__(h, world, name)
        self.app = PhebyApp("", PHEBY_SECRET)
        self.app.on_frame = self.frame
        self.shown: list[str] = []  # the conversations it shows (re-opened on reconnect)

    @property
    def connected(self) -> bool:
        return self.app.ws is not None and not self.app.ws.closed

    async def connect(self, node: str, f: str = "connect") -> bool:
        """The spec's reconnect: the socket, hello, the conversation list, every shown one re-opened."""
        await self._drop_socket()
        self.new_connection(node)
        self.app.url = self.world.url(node, "pheby")
        op = self.invoke(f, conn=self.conn)
        ok = await attempt(self.h, op, self._hello_and_reopen())
        if ok is not None:
            self.h.ok(op)
        return ok is not None

    async def _hello_and_reopen(self) -> bool:
        await self.app.connect()
        listing = await self.app.request("conversation.list")
        known = {c["conversation_id"] for c in listing.get("conversations", [])}
        for cid in self.shown:
            if cid in known:
                await self.app.open(cid)
        return True

    async def _drop_socket(self) -> None:
        abort(self.app.ws)
        if self.app._reader is not None:
            await asyncio.wait([self.app._reader], timeout=OP_TIMEOUT)

    async def create(self, name: str) -> Optional[str]:
        op = self.invoke("create", name=name)
        reply = await attempt(self.h, op, self.app.request("conversation.create", name=name))
        if reply is None:
            return None
        if reply["type"] != "conversation.created":
            self.h.fail(op, **pheby_error(reply))
            return None
        cid = reply["conversation_id"]
        self.shown.append(cid)
        self.h.ok(op, created=cid, conversation=cid)
        return cid

    async def chat(self, conversation: str, text: str) -> Optional[str]:
        op = self.invoke("chat", conversation=conversation, text=text)
        reply = await attempt(self.h, op, self.app.chat(conversation, text))
        if reply is None:
            return None
        if reply["type"] != "run.accepted":
            self.h.fail(op, **pheby_error(reply))
            return None
        self.h.ok(op, run=reply["run_id"], conversation=conversation)
        return reply["run_id"]

    async def resolve(self, approval: str, choice: str) -> None:
        op = self.invoke("resolve", approval=approval, choice=choice)
        reply = await attempt(self.h, op, self.app.request("approval.respond", approval_id=approval, choice=choice))
        if reply is None:
            return
        if reply["type"] == "approval.resolved":
            self.h.ok(op, accepted=reply.get("accepted"))
        else:
            self.h.fail(op, **pheby_error(reply))

    async def open(self, conversation: str) -> Optional[dict]:
        op = self.invoke("open", conversation=conversation)
        reply = await attempt(self.h, op, self.app.open(conversation))
        if reply is None:
            return None
        if reply["type"] != "conversation.history":
            self.h.fail(op, **pheby_error(reply))
            return None
        self.h.ok(op)
        return reply

    def pending(self) -> list[str]:
        return [aid for view in self.app.conversations.values() for aid in view.approvals]

    async def close(self) -> None:
        await self._drop_socket()
        if self.app.http is not None:
            await self.app.http.close()
            self.app.http = None


class Watcher(Recorder):
    surface = "lvmh"

    def __init__(self, h: History, world: World, name: str):
        super().__init__(h, world, name)
        self.browser = Browser("http://127.0.0.1:9", LVMH_TOKEN)
        self.browser.on_frame = self.frame

    async def connect(self, node: str, f: str = "connect") -> bool:
        """Connect to ``node``; re-subscribe and refetch after the last seq seen (the spec's reconnect)."""
        await self.drop(fault=False)
        self.new_connection(node)
        base = self.world.url(node, "lvmh")
        self.browser.base = self.browser.rest.base = base
        op = self.invoke(f, conn=self.conn, after=self._after())
        ok = await attempt(self.h, op, self.browser.connect())
        if ok is not None:
            self.h.ok(op)
        return ok is not None

    def _after(self) -> Optional[int]:
        sub = self.browser.subscription
        return self.browser.view(sub).seq if sub is not None else None

    async def subscribe(self, session: str) -> bool:
        op = self.invoke("subscribe", conversation=session)
        ok = await attempt(self.h, op, self._subscribe(session))
        if ok is not None:
            self.h.ok(op)
        return ok is not None

    async def _subscribe(self, session: str) -> bool:
        await self.browser.subscribe(session)
        return True

    async def drop(self, fault: bool = True) -> None:
        if self.browser.ws is None or self.browser.ws.closed:
            self.browser.ws = None
            return
        record = self.h.fault("drop", self.name) if fault else None
        abort(self.browser.ws)
        if self.browser.reader is not None:
            await asyncio.wait([self.browser.reader], timeout=OP_TIMEOUT)
        self.browser.ws = None
        if record is not None:
            self.h.healed(record)

    async def resolve(self, approval: str, choice: str) -> None:
        op = self.invoke("resolve", approval=approval, choice=choice)
        answer = self.browser.rest.call("POST", f"/api/approvals/{approval}", {"choice": choice})
        got = await attempt(self.h, op, answer)
        if got is None:
            return
        status, body = got
        if status == 200 and isinstance(body, dict) and body.get("ok"):
            self.h.ok(op, accepted=body.get("accepted"))
        else:
            self.h.fail(op, code=body.get("code") if isinstance(body, dict) else None, status=status)

    def pending(self) -> list[str]:
        sub = self.browser.subscription
        if sub is None:
            return []
        return self.browser.view(sub).pending_decisions()

    async def close(self) -> None:
        await self.drop(fault=False)
        await self.browser.http.close()
        await self.browser.rest.close()
