"""A fake lvmh plugin, a browser client and a REST helper, all over real sockets."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any, Callable, Optional

import aiohttp
from aiohttp import web

from tests.conftest import LVMH_TOKEN
from tests.waiting import until

AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}


def bearer_app(routes) -> web.Application:
    """A bare aiohttp app serving ``routes`` behind the lvmh bearer check (spawn / GitLab route tests)."""

    @web.middleware
    async def auth(request, handler):
        if request.headers.get("Authorization") != f"Bearer {LVMH_TOKEN}":
            return web.json_response({"error": "unauthorized"}, status=401)
        return await handler(request)

    app = web.Application(middlewares=[auth])
    app.add_routes(routes)
    return app


def session_snapshot(sid: str, **over: Any) -> dict:
    snap = {
        "id": sid,
        "name": None,
        "cwd": "/work/project",
        "model": "glm-5.3",
        "provider": "zai-renaud",
        "agent": False,
        "repo": "group/project",
        "startedAt": 1_700_000_000_000,
    }
    snap.update(over)
    return snap


class FakePlugin:
    """Speaks the plugin side of /agent/ws: hello, numbered events, reads prompts/aborts."""

    def __init__(self, port: int, sid: str, *, token: str = LVMH_TOKEN, session: Optional[dict] = None):
        self.port = port
        self.sid = sid
        self.token = token
        self.session = session or session_snapshot(sid)
        self.seq = 0
        self.http: Optional[aiohttp.ClientSession] = None
        self.ws: Optional[aiohttp.ClientWebSocketResponse] = None
        self.welcome: Optional[dict] = None

    async def open(self) -> "FakePlugin":
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(
            f"http://127.0.0.1:{self.port}/agent/ws", headers={"Authorization": f"Bearer {self.token}"}
        )
        return self

    async def connect(self) -> dict:
        """Open, say hello, return the welcome; the next seq follows welcome.lastSeq when ahead."""
        if self.ws is None or self.ws.closed:
            await self.open()
        await self.send_raw({"v": 1, "type": "hello", "sessionId": self.sid, "seq": 0, "ts": _ms(),
                             "session": self.session})
        self.welcome = await self.recv_type("welcome")
        return self.welcome

    async def send_raw(self, frame: Any) -> None:
        assert self.ws is not None
        await self.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))

    async def event(self, etype: str, seq: Optional[int] = None, **payload: Any) -> int:
        if seq is None:
            self.seq += 1
            seq = self.seq
        frame = {"v": 1, "sessionId": self.sid, "seq": seq, "ts": _ms(), "type": etype}
        frame.update(payload)
        await self.send_raw(frame)
        return seq

    async def recv(self, timeout: float = 5.0) -> dict:
        assert self.ws is not None
        msg = await self.ws.receive(timeout=timeout)
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"expected a text frame, got {msg.type} {msg.data!r} {msg.extra!r}")
        return json.loads(msg.data)

    async def recv_type(self, *types: str, timeout: float = 5.0) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = await self.recv(max(0.01, deadline - loop.time()))
            if frame.get("type") in types:
                return frame

    async def run(self, text: str = "Hello", reply: str = "Hi there") -> None:
        """One pi turn as the real plugin sends it (the lvmh protocol v1, as recorded from a real pi run)."""
        await self.event("agent_start")
        await self.event("message_start", message={"role": "user", "id": f"u{self.seq}"})
        await self.event("message_end", message=_msg("user", f"u{self.seq - 1}", text))
        await self.event("message_start", message={"role": "assistant", "id": f"a{self.seq}"})
        aid = f"a{self.seq - 1}"
        words = reply.split(" ")
        for i, w in enumerate(words):
            await self.event("message_update", delta=w if i == 0 else " " + w)
        await self.event("message_end", message=_msg("assistant", aid, reply))
        await self.event("agent_end", usage={"inputTokens": 42, "outputTokens": 7, "totalCost": 0})
        await self.event("agent_settled", aborted=False)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self.http is not None:
            await self.http.close()


def _msg(role: str, mid: str, text: str, **extra: Any) -> dict:
    m = {"role": role, "id": mid, "text": text, "thinking": None, "toolCalls": [], "toolCallId": None}
    m.update(extra)
    return m


message = _msg


def _ms() -> int:
    return int(time.time() * 1000)


# No frame acknowledges a browser's subscribe, but a socket's frames are handled in order: once the
# error answering this frame (an unknown type) is back, everything sent before it has been taken.
BROWSER_SYNC = '{"type":"sync"}'
BROWSER_SYNC_ANSWER = b'"code":"unknown_type"'


class Browser:
    """The web UI's /ws: session_list, events, spawn_status frames."""

    def __init__(self, port: int, token: str = LVMH_TOKEN, ext: str = ""):
        self.port = port
        self.token = token
        self.ext = ext  # extensions named on /ws (``list-deltas``: the web UI's list; docs/lvmh.md)
        self.frames: list[dict] = []

    async def open(self) -> "Browser":
        self.http = aiohttp.ClientSession()
        ext = f"&ext={self.ext}" if self.ext else ""
        self.ws = await self.http.ws_connect(f"http://127.0.0.1:{self.port}/ws?token={self.token}{ext}")
        return self

    async def send(self, frame: Any) -> None:
        await self.ws.send_str(frame if isinstance(frame, str) else json.dumps(frame))

    async def recv(self, timeout: float = 5.0) -> dict:
        msg = await self.ws.receive(timeout=timeout)
        if msg.type != aiohttp.WSMsgType.TEXT:
            raise AssertionError(f"expected a text frame, got {msg.type} {msg.data!r}")
        frame = json.loads(msg.data)
        self.frames.append(frame)
        return frame

    async def recv_until(self, pred: Callable[[dict], bool], timeout: float = 5.0) -> dict:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            frame = await self.recv(max(0.01, deadline - loop.time()))
            if pred(frame):
                return frame

    async def subscribe(self, sid: str, timeout: float = 5.0) -> None:
        """Subscribe to ``sid`` and wait until the server has taken it (see BROWSER_SYNC)."""
        await self.send({"type": "subscribe", "sessionId": sid})
        await self.send(BROWSER_SYNC)
        await self.recv_until(lambda f: f["type"] == "error" and f.get("code") == "unknown_type", timeout)

    async def session_list(self, pred: Callable[[list], bool] = lambda s: True, timeout: float = 5.0) -> list:
        frame = await self.recv_until(lambda f: f["type"] == "session_list" and pred(f["sessions"]), timeout)
        return frame["sessions"]

    async def events_until(self, sid: str, pred: Callable[[dict], bool], timeout: float = 5.0) -> list[dict]:
        """Events of ``sid`` received (across frames) up to and including the first matching one."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out: list[dict] = []
        while True:
            frame = await self.recv(max(0.01, deadline - loop.time()))
            if frame["type"] != "events" or frame["sessionId"] != sid:
                continue
            for e in frame["events"]:
                out.append(e)
                if pred(e):
                    return out

    async def close(self) -> None:
        await self.ws.close()
        await self.http.close()


class Api:
    def __init__(self, port: int, token: str = LVMH_TOKEN):
        self.base = f"http://127.0.0.1:{port}"
        self.headers = {"Authorization": f"Bearer {token}"}
        self.http = aiohttp.ClientSession()

    async def call(self, method: str, path: str, *, json_body: Any = None, data: Any = None,
                   headers: Optional[dict] = None) -> tuple[int, Any]:
        h = dict(self.headers if headers is None else headers)
        kw: dict = {}
        if json_body is not None:
            kw["data"] = json.dumps(json_body)
            h["Content-Type"] = "application/json"
        elif data is not None:
            kw["data"] = data
        async with self.http.request(method, self.base + path, headers=h, **kw) as resp:
            body = await resp.read()
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = body
            return resp.status, parsed

    async def get(self, path: str, **kw: Any) -> tuple[int, Any]:
        return await self.call("GET", path, **kw)

    async def post(self, path: str, body: Any = None, **kw: Any) -> tuple[int, Any]:
        return await self.call("POST", path, json_body=body, **kw)

    async def events(self, sid: str, after: int = 0, limit: Optional[int] = None) -> list[dict]:
        q = f"?after={after}" + (f"&limit={limit}" if limit is not None else "")
        status, body = await self.get(f"/api/sessions/{sid}/events{q}")
        assert status == 200, (status, body)
        return body

    async def wait_events(self, sid: str, pred: Callable[[list], bool], timeout: float = 5.0) -> list[dict]:
        last: list[dict] = []

        async def matched() -> Optional[tuple[list[dict]]]:
            status, evs = await self.get(f"/api/sessions/{sid}/events")
            assert status in (200, 404), (status, evs)
            last[:] = evs if status == 200 else []  # 404: not connected yet
            return (list(last),) if pred(last) else None

        try:
            (evs,) = await until(matched, timeout, what=f"events of {sid}")
        except AssertionError:
            raise AssertionError(f"events never matched: {[(e['seq'], e['type']) for e in last]}") from None
        return evs

    async def close(self) -> None:
        await self.http.close()


async def subscribed(svc, sid: str, yes: bool = True) -> None:
    """Until a browser is (``yes``) or no longer is subscribed to ``sid`` (no frame acknowledges it)."""
    stream = svc.frontends["lvmh"].stream
    await until(lambda: stream.subscribed(sid) == yes, what=f"the browser's {'' if yes else 'un'}subscribe of {sid}")


async def db_rows(svc, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of the bridge database once everything the lvmh front end queued has committed."""
    await svc.frontends["lvmh"].log.aflush()
    return svc.bridge.store.query(sql, params)
