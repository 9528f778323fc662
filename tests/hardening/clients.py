"""Clients of the three front ends over real sockets (aiohttp), for a bridge in another process.

The connection helpers are bench's (``bench.load``); the lvmh plugin, browser and
REST clients are the lvmh tests' (``tests.lvmh.helpers``) with this suite's token.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

import aiohttp
import orjson

from bench.load import connect_loomi, connect_pheby, pair_loomi_devices
from tests.lvmh.helpers import Api, Browser, FakePlugin, message, session_snapshot

from .proc import LVMH_TOKEN, PHEBY_SECRET, admin_headers_for

__all__ = [
    "Api", "Browser", "FakePlugin", "all_events", "LoomiClient", "PhebyClient", "lvmh_api", "lvmh_browser", "lvmh_plugin",
    "message", "pair_token", "session_snapshot",
]


class Closed(Exception):
    def __init__(self, code: Any, data: Any = None):
        super().__init__(f"socket closed: {code} {data!r}")
        self.code = code
        self.data = data


class _Frames:
    """``until``, for any client with ``recv``."""

    async def until(self, pred: Callable[[dict], bool], timeout: float = 10.0) -> list[dict]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out = []
        while True:
            f = await self.recv(max(0.01, deadline - loop.time()))
            out.append(f)
            if pred(f):
                return out


class PhebyClient(_Frames):
    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse, own_http: bool = False):
        self.http = http
        self.ws = ws
        self.own_http = own_http
        self.frames: list[dict] = []

    @classmethod
    async def connect(cls, port: int, http: Optional[aiohttp.ClientSession] = None) -> "PhebyClient":
        own = http is None
        http = http or aiohttp.ClientSession()
        ws = await connect_pheby(http, port, PHEBY_SECRET)
        return cls(http, ws, own)

    async def send(self, frame: dict) -> None:
        await self.ws.send_str(orjson.dumps(frame).decode())

    async def recv(self, timeout: float = 10.0) -> dict:
        msg = await self.ws.receive(timeout=timeout)
        if msg.type is not aiohttp.WSMsgType.TEXT:
            raise Closed(self.ws.close_code, msg.data)
        f = orjson.loads(msg.data)
        self.frames.append(f)
        return f


    async def request(self, frame: dict, reply_type: Optional[str] = None, timeout: float = 10.0) -> dict:
        rid = frame.setdefault("request_id", f"r{time.monotonic_ns()}")
        await self.send(frame)
        frames = await self.until(lambda f: f.get("request_id") == rid and (reply_type is None or f["type"] in (reply_type, "error")), timeout)
        return frames[-1]

    async def create(self, name: str = "hardening") -> str:
        f = await self.request({"type": "conversation.create", "name": name}, "conversation.created")
        assert f["type"] == "conversation.created", f
        return f["conversation_id"]

    async def run(self, cid: str, text: str, timeout: float = 30.0) -> list[dict]:
        """chat.send and read to its run.finished; the frames of that conversation."""
        await self.send({"type": "chat.send", "conversation_id": cid, "text": text, "request_id": f"s{time.monotonic_ns()}"})
        frames = await self.until(lambda f: f.get("type") == "run.finished" and f.get("conversation_id") == cid, timeout)
        return [f for f in frames if f.get("conversation_id") == cid]

    async def open(self, cid: str, limit: int = 200) -> dict:
        return await self.request({"type": "conversation.open", "conversation_id": cid, "limit": limit},
                                  "conversation.history")

    async def close(self) -> None:
        await self.ws.close()
        if self.own_http:
            await self.http.close()


async def create_conversations(port: int, n: int, prefix: str = "c") -> list[str]:
    """``n`` conversations through Pheby, at most 150 per connection (its rate limit allows bursts of 200)."""
    out: list[str] = []
    per = 150
    clients = [await PhebyClient.connect(port) for _ in range((n + per - 1) // per)]
    try:
        async def make(c: PhebyClient, start: int, count: int) -> list[str]:
            rids = [f"{prefix}{start + j}" for j in range(count)]
            for j, rid in enumerate(rids):
                await c.send({"type": "conversation.create", "name": f"{prefix}{start + j}", "request_id": rid})
            got: dict[str, str] = {}
            while len(got) < count:
                f = await c.recv(30)
                if f.get("type") == "conversation.created" and f.get("request_id") in rids:
                    got[f["request_id"]] = f["conversation_id"]
                elif f.get("type") == "error":
                    raise AssertionError(f)
            return [got[r] for r in rids]

        parts = await asyncio.gather(*(make(c, i * per, min(per, n - i * per)) for i, c in enumerate(clients)))
        for part in parts:
            out += part
    finally:
        for c in clients:
            await c.close()
    return out


async def pair_token(port: int, http: aiohttp.ClientSession, ttl: Optional[float] = None) -> str:
    body = {} if ttl is None else {"ttl": ttl}
    async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json=body, headers=admin_headers_for(port)) as r:
        assert r.status == 200, await r.text()
        return (await r.json())["payload"]["token"]


class LoomiClient(_Frames):
    """One Loomi device socket: records every frame's seq, answers server pings."""

    def __init__(self, http, ws, hello_ok: dict, own_http: bool = False):
        self.http = http
        self.ws = ws
        self.hello_ok = hello_ok
        self.own_http = own_http
        self.frames: list[dict] = [hello_ok]
        self.backlog: list[dict] = []

    @classmethod
    async def connect(cls, port: int, device: tuple, last_seq: Optional[int] = None,
                      http: Optional[aiohttp.ClientSession] = None) -> "LoomiClient":
        own = http is None
        http = http or aiohttp.ClientSession()
        ws, ok = await connect_loomi(http, port, device, last_seq)
        return cls(http, ws, ok, own)

    @classmethod
    async def pair(cls, port: int, http: Optional[aiohttp.ClientSession] = None) -> tuple[tuple, "LoomiClient"]:
        own = http is None
        http = http or aiohttp.ClientSession()
        device = (await pair_loomi_devices(http, port, 1))[0]
        client = await cls.connect(port, device, http=http)
        client.own_http = own
        return device, client

    async def send(self, type_: str, payload: Optional[dict] = None) -> None:
        await self.ws.send_str(orjson.dumps({"v": 1, "type": type_, "payload": payload or {}}).decode())

    async def recv(self, timeout: float = 10.0) -> dict:
        while True:
            msg = await self.ws.receive(timeout=timeout)
            if msg.type is not aiohttp.WSMsgType.TEXT:
                raise Closed(self.ws.close_code, msg.data)
            f = orjson.loads(msg.data)
            self.frames.append(f)
            if f.get("type") == "ping":
                await self.send("pong")
            return f


    async def request(self, type_: str, payload: dict, timeout: float = 10.0) -> dict:
        rid = payload.setdefault("request_id", f"r{time.monotonic_ns()}")
        await self.send(type_, payload)
        frames = await self.until(lambda f: f.get("payload", {}).get("request_id") == rid, timeout)
        return frames[-1]

    @property
    def last_seq(self) -> int:
        return max((f.get("seq") or 0) for f in self.frames)

    async def close(self) -> None:
        await self.ws.close()
        if self.own_http:
            await self.http.close()


async def all_events(api: Api, sid: str) -> list[dict]:
    """Every persisted event of a session, page by page (the server caps a page at 1000)."""
    out: list[dict] = []
    while True:
        page = await api.events(sid, out[-1]["seq"] if out else 0, 1000)
        if not page:
            return out
        out += page


def lvmh_plugin(port: int, sid: str, **kw: Any) -> FakePlugin:
    return FakePlugin(port, sid, token=LVMH_TOKEN, **kw)


def lvmh_browser(port: int) -> Browser:
    return Browser(port, token=LVMH_TOKEN)


def lvmh_api(port: int) -> Api:
    return Api(port, token=LVMH_TOKEN)
