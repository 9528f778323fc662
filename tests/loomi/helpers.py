"""Helpers for Loomi tests: a real client over real sockets."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Optional

import aiohttp
import orjson

from bridge_core.model import events as ev

TIMEOUT = 10.0


def admin(svc) -> dict:
    """The admin key of an in-process Service, for the loopback-only endpoints."""
    return {"Authorization": f"Bearer {svc.cfg.admin_key}"}


def base(svc) -> str:
    return f"http://127.0.0.1:{svc.ports['loomi']}"


async def new_token(svc, ttl: Optional[float] = None) -> dict:
    """The QR payload from the loopback-only pairing endpoint."""
    async with aiohttp.ClientSession() as http:
        body = {} if ttl is None else {"ttl": ttl}
        async with http.post(base(svc) + "/internal/pair/new", json=body, headers=admin(svc)) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["payload"]


class Client:
    """One Loomi socket."""

    def __init__(self, http: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self.http = http
        self.ws = ws
        self.frames: list[dict] = []  # every frame received, in order
        self.backlog: list[dict] = []  # frames skipped while waiting for an answer, read next

    @classmethod
    async def connect(cls, svc) -> "Client":
        http = aiohttp.ClientSession()
        ws = await http.ws_connect(base(svc).replace("http", "ws") + "/ws", autoping=True)
        return cls(http, ws)

    async def send(self, type_: str, payload: Optional[dict] = None, **env: Any) -> None:
        frame = {"v": 1, "type": type_, "payload": payload or {}}
        frame.update(env)
        await self.ws.send_str(orjson.dumps(frame).decode())

    async def recv(self, timeout: float = TIMEOUT) -> dict:
        if self.backlog:
            return self.backlog.pop(0)
        msg = await self.ws.receive(timeout=timeout)
        if msg.type is not aiohttp.WSMsgType.TEXT:
            raise ConnectionError(f"socket ended: {msg.type} {msg.data!r} {msg.extra!r}")
        frame = orjson.loads(msg.data)
        self.frames.append(frame)
        return frame

    async def recv_type(self, *types: str, timeout: float = TIMEOUT) -> dict:
        """Next frame of one of ``types`` (skipping others, which stay in self.frames)."""
        while True:
            f = await self.recv(timeout)
            if f["type"] in types:
                return f

    async def recv_until(self, pred: Callable[[dict], bool], timeout: float = TIMEOUT) -> list[dict]:
        out = []
        while True:
            f = await self.recv(timeout)
            out.append(f)
            if pred(f):
                return out

    async def closed(self, timeout: float = TIMEOUT) -> tuple[list[dict], Any]:
        """Read until the socket closes: (frames before it, the server's close code)."""
        frames = self.backlog
        self.backlog = []
        while True:
            msg = await self.ws.receive(timeout=timeout)
            if msg.type is aiohttp.WSMsgType.TEXT:
                frames.append(orjson.loads(msg.data))
                continue
            return frames, (msg.data if msg.type is aiohttp.WSMsgType.CLOSE else self.ws.close_code)

    async def hello(self, **payload: Any) -> dict:
        p = {"protocol_version": 1, "device_info": {"model": "Pixel 9", "os": "Android 16", "app_version": "1.0"}}
        p.update(payload)
        await self.send("hello", p)
        return await self.recv()

    async def request(self, type_: str, payload: dict, answer: str = "ack") -> dict:
        """Send a request and return its answer (ack, error or task.list.result) for its request_id."""
        await self.send(type_, payload)
        rid = payload.get("request_id")
        return await self.answer(rid, answer)

    async def answer(self, rid: str, answer: str = "ack") -> dict:
        """The answer to request ``rid``; other frames stay in the backlog, in order."""
        for i, f in enumerate(self.backlog):
            if f["type"] in (answer, "error") and f["payload"].get("request_id") == rid:
                return self.backlog.pop(i)
        skipped = []
        try:
            while True:
                msg = await self.ws.receive(timeout=TIMEOUT)
                if msg.type is not aiohttp.WSMsgType.TEXT:
                    raise ConnectionError(f"socket ended: {msg.type} {msg.data!r} {msg.extra!r}")
                f = orjson.loads(msg.data)
                self.frames.append(f)
                if f["type"] in (answer, "error") and f["payload"].get("request_id") == rid:
                    return f
                skipped.append(f)
        finally:
            self.backlog.extend(skipped)

    async def close(self) -> None:
        await self.ws.close()
        await self.http.close()


async def pair(svc, name: str = "Pixel 9") -> tuple[Client, dict]:
    """A freshly paired device: its open client and its hello.ok payload."""
    qr = await new_token(svc)
    c = await Client.connect(svc)
    ok = await c.hello(token=qr["token"], device_info={"model": name, "os": "Android 16", "app_version": "1.0"})
    assert ok["type"] == "hello.ok", ok
    return c, ok["payload"]


async def resume(svc, creds: dict, last_seq: Optional[int] = None) -> tuple[Client, dict]:
    c = await Client.connect(svc)
    p = {"device_id": creds["device_id"], "credential": creds["credential"]}
    if last_seq is not None:
        p["last_seq"] = last_seq
    ok = await c.hello(**p)
    return c, ok


async def wait_for(pred: Callable[[], bool], timeout: float = TIMEOUT) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        if loop.time() > end:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)


def notify(svc, n: int, text: str = "n") -> None:
    """n notifications published synchronously (a fake agent source)."""
    for i in range(n):
        svc.bridge.publish(ev.Notification(conversation_id=None, message_id=f"m{i}", text=f"{text}{i}"))
