"""An impostor on the public URLs: a server that answers like the bridge (WebSocket upgrades, a
``ready`` to any hello, the bridge's JSON 404 for attachments, a web UI page) and records everything
it is sent: each request's line and headers and every WebSocket frame. What ``agent-bridge doctor``
hands it is then in ``Impostor.record``.

Each front end gets its own listening socket (``listen``), over TLS with the impostor's own
certificate or plain. Every request ``doctor`` makes waits for the impostor's answer, which comes
after the recording, so once doctor has exited the record holds whatever it sent.
"""

from __future__ import annotations

import json
import socket
import ssl
from typing import Optional

from aiohttp import WSMsgType, web

PAGE = '<!doctype html><html><head><script src="/static/app.js"></script></head><body></body></html>'


class Impostor:
    def __init__(self) -> None:
        self.record: list[str] = []
        self.runner: Optional[web.AppRunner] = None
        self.redirect = ""  # a base URL: answer every request with a 302 to the same path there

    def dump(self) -> str:
        return json.dumps(self.record)

    def saw(self, text: str) -> bool:
        return text in self.dump()

    @web.middleware
    async def _record(self, request: web.Request, handler):
        self.record.append(f"{request.method} {request.path_qs} {json.dumps(dict(request.headers))}")
        if self.redirect:
            raise web.HTTPFound(self.redirect + request.path_qs)
        return await handler(request)

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type in (WSMsgType.TEXT, WSMsgType.BINARY):
                self.record.append(f"frame {request.path} {msg.data!r}")
                await ws.send_str(json.dumps({"type": "ready"}))
        return ws

    async def _not_found(self, request: web.Request) -> web.Response:
        return web.json_response({"error": {"code": "not_found", "message": "no such attachment"}}, status=404)

    async def _internal(self, request: web.Request) -> web.Response:
        return web.json_response({"error": {"code": "forbidden", "message": "loopback only"}}, status=403)

    async def _page(self, request: web.Request) -> web.Response:
        return web.Response(text=PAGE, content_type="text/html")

    async def _script(self, request: web.Request) -> web.Response:
        return web.Response(text="//", content_type="text/javascript")

    async def start(self) -> None:
        app = web.Application(middlewares=[self._record])
        app.router.add_get("/ws", self._ws)
        app.router.add_get("/agent/ws", self._ws)
        app.router.add_get("/attachments/{id}", self._not_found)
        app.router.add_get("/api/attachments/{id}", self._not_found)
        app.router.add_get("/internal/devices", self._internal)
        app.router.add_get("/", self._page)
        app.router.add_get("/static/app.js", self._script)
        self.runner = web.AppRunner(app)
        await self.runner.setup()

    async def listen(self, host: str, cert: Optional[str] = None, key: Optional[str] = None) -> int:
        """One more listening socket on ``host`` (TLS with ``cert``/``key``, else plain); its port."""
        assert self.runner is not None
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, 0))
        ctx = None
        if cert:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(cert, key)
        await web.SockSite(self.runner, sock, ssl_context=ctx).start()
        return sock.getsockname()[1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
