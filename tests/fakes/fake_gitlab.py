"""A fake GitLab REST API (the two calls lvmh needs), recording every request.

``GET /api/v4/user`` answers 200 ``{id, username, ...}`` for a token in ``users``
(``PRIVATE-TOKEN`` or ``Authorization: Bearer``), 401 ``{"message": "401 Unauthorized"}``
otherwise. ``GET /api/v4/projects`` pages ``projects`` with GitLab's offset paging
headers (``X-Page``, ``X-Next-Page``, ``X-Total-Pages``), honouring ``per_page``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import attrs
from aiohttp import web


@attrs.define
class Recorded:
    method: str
    path: str
    query: dict
    token: Optional[str]  # what the client sent in PRIVATE-TOKEN (tests check it, never print it)


def project(path: str, last_activity: str, *, default_branch: str = "main", **extra: Any) -> dict:
    """A project as GitLab's ``simple=true`` list returns it."""
    namespace, _, name = path.rpartition("/")
    out = {
        "id": abs(hash(path)) % 100000,
        "name": name.replace("-", " ").title(),
        "path": name,
        "path_with_namespace": path,
        "namespace": {"id": 1, "name": namespace, "path": namespace.rsplit("/", 1)[-1], "kind": "group", "full_path": namespace},
        "default_branch": default_branch,
        "web_url": f"https://gitlab.example/{path}",
        "last_activity_at": last_activity,
    }
    out.update(extra)
    return out


class FakeGitLab:
    def __init__(self) -> None:
        self.users: dict[str, dict] = {}  # token -> user object
        self.projects: list[dict] = []  # in the order GitLab would return them
        self.requests: list[Recorded] = []
        self.projects_status: Optional[int] = None  # force a status for /projects
        self.hang = False  # never answer (timeout tests)
        self.max_per_page = 100
        self._runner: Optional[web.AppRunner] = None
        self._release: Optional[asyncio.Event] = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add_user(self, token: str, username: str) -> None:
        self.users[token] = {"id": len(self.users) + 1, "username": username, "name": username.title(),
                             "state": "active", "web_url": f"https://gitlab.example/{username}"}

    async def start(self) -> "FakeGitLab":
        self._release = asyncio.Event()
        app = web.Application()
        app.router.add_get("/api/v4/user", self._user)
        app.router.add_get("/api/v4/projects", self._projects)
        app.router.add_route("*", "/{tail:.*}", self._other)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._release is not None:
            self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _record(self, request: web.Request) -> Optional[str]:
        token = request.headers.get("PRIVATE-TOKEN")
        if token is None and request.headers.get("Authorization", "").startswith("Bearer "):
            token = request.headers["Authorization"][7:]
        self.requests.append(Recorded(request.method, request.path, dict(request.query), token))
        return token

    async def _user(self, request: web.Request) -> web.Response:
        token = self._record(request)
        if self.hang and self._release is not None:
            await self._release.wait()
            return web.json_response({"message": "too late"}, status=503)
        user = self.users.get(token or "")
        if user is None:
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        return web.json_response(user)

    async def _projects(self, request: web.Request) -> web.Response:
        token = self._record(request)
        if self.hang and self._release is not None:
            await self._release.wait()
            return web.json_response({"message": "too late"}, status=503)
        if self.projects_status is not None:
            return web.json_response({"message": "forced"}, status=self.projects_status)
        if (token or "") not in self.users:
            return web.json_response({"message": "401 Unauthorized"}, status=401)
        try:
            per_page = min(int(request.query.get("per_page", "20")), self.max_per_page)
            page = max(int(request.query.get("page", "1")), 1)
        except ValueError:
            return web.json_response({"error": "bad paging"}, status=400)
        total_pages = max(1, -(-len(self.projects) // per_page))
        chunk = self.projects[(page - 1) * per_page: page * per_page]
        headers = {"X-Page": str(page), "X-Per-Page": str(per_page), "X-Total": str(len(self.projects)),
                   "X-Total-Pages": str(total_pages), "X-Next-Page": str(page + 1) if page < total_pages else ""}
        return web.json_response(chunk, headers=headers)

    async def _other(self, request: web.Request) -> web.Response:
        self._record(request)
        return web.json_response({"message": "404 Not Found"}, status=404)
