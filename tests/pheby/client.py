"""A tiny Pheby test client over a real WebSocket (aiohttp)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Optional

import aiohttp

from tests.conftest import PHEBY_SECRET


class PhebyClient:
    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse):
        self.session = session
        self.ws = ws
        self.frames: list[dict] = []  # everything received, in order

    @classmethod
    async def connect(cls, port: int, *, hello: bool = True, secret: str = PHEBY_SECRET) -> "PhebyClient":
        session = aiohttp.ClientSession()
        ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=64 * 1024 * 1024)
        client = cls(session, ws)
        if hello:
            await client.send({"type": "hello", "secret": secret, "protocol_version": 1})
            ready = await client.recv()
            assert ready["type"] == "ready", ready
        return client

    async def send(self, frame: dict) -> None:
        await self.ws.send_str(json.dumps(frame))

    async def recv(self, timeout: float = 5.0) -> dict:
        msg = await self.ws.receive(timeout=timeout)
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"expected a text frame, got {msg.type} {msg.data!r} {msg.extra!r}")
        frame = json.loads(msg.data)
        self.frames.append(frame)
        return frame

    async def recv_type(self, *types: str, timeout: float = 5.0) -> dict:
        """Receive until a frame of one of ``types`` arrives; returns it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = await self.recv(timeout=max(0.01, deadline - loop.time()))
            if frame["type"] in types:
                return frame

    async def collect_until(self, stop_type: str, timeout: float = 10.0, **match: Any) -> list[dict]:
        """All frames up to and including the first ``stop_type`` frame matching ``match``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out = []
        while True:
            frame = await self.recv(timeout=max(0.01, deadline - loop.time()))
            out.append(frame)
            if frame["type"] == stop_type and all(frame.get(k) == v for k, v in match.items()):
                return out

    async def request(self, frame: dict, reply_type: Optional[str] = None, timeout: float = 5.0) -> dict:
        await self.send(frame)
        if reply_type is None:
            return await self.recv(timeout)
        return await self.recv_type(reply_type, "error", timeout=timeout)

    async def create(self, name: str = "Test") -> str:
        reply = await self.request({"type": "conversation.create", "name": name, "request_id": "c"}, "conversation.created")
        if reply["type"] == "conversation.created":  # the reply first, then the broadcast it causes
            await self.recv_type("conversation.updated")
        return reply["conversation_id"]

    async def close(self) -> None:
        await self.ws.close()
        await self.session.close()


def types(frames: list[dict]) -> list[str]:
    return [f["type"] for f in frames]


def strip_ts(frame: dict) -> dict:
    return {k: v for k, v in frame.items() if k != "ts"}
