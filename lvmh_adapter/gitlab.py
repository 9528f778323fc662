"""GitLab for the lvmh web UI: connect a personal access token, list member projects.

Routes (mounted by the lvmh daemon under its bearer-auth middleware):

- ``GET /api/gitlab/status`` -> ``{connected, baseUrl, username?}`` (no call to GitLab)
- ``POST /api/gitlab/connect {token}`` -> ``{username}``: the PAT is checked with
  ``GET {base}/api/v4/user`` (``PRIVATE-TOKEN`` header), then stored in ``settings``
- ``DELETE /api/gitlab/connect`` -> ``{ok: true}``
- ``GET /api/gitlab/repos`` -> ``[{path, name, namespace, lastActivityAt, webUrl, defaultBranch}]``
  from ``GET {base}/api/v4/projects?membership=true&order_by=last_activity_at&sort=desc``

The PAT never leaves this module except in the ``PRIVATE-TOKEN`` header to GitLab
(and, read by ``spawn.py``, as a clone credential): no route returns it, nothing logs it.
An invalid PAT is answered 400, not 401, so a web UI never mistakes it for a wrong
``LVMH_TOKEN``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any, Optional

import aiohttp
from aiohttp import web

from bridge_core.model.errors import BridgeError
from bridge_core.model.redact import fingerprint

from .errors import HttpError, rest_error
from .request import read_json

log = logging.getLogger("agent_bridge.lvmh.gitlab")

PAT_KEY = "lvmh.gitlab.pat"
USERNAME_KEY = "lvmh.gitlab.username"

PER_PAGE = 100
MAX_PAGES = 3
MAX_TOKEN_LEN = 512
_TOKEN_OK = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no spaces or control characters


class GitLabError(HttpError):
    """An error answered to the web UI as ``{"error": message}`` with ``status``."""


def _map_project(p: dict) -> Optional[dict]:
    path = p.get("path_with_namespace")
    if not isinstance(path, str) or not path:
        return None
    ns = p.get("namespace")
    namespace = ns.get("full_path") if isinstance(ns, dict) else None
    if not isinstance(namespace, str):
        namespace = path.rsplit("/", 1)[0] if "/" in path else ""
    name = p.get("name")
    return {
        "path": path,
        "name": name if isinstance(name, str) else path.rsplit("/", 1)[-1],
        "namespace": namespace,
        "lastActivityAt": p.get("last_activity_at") if isinstance(p.get("last_activity_at"), str) else None,
        "webUrl": p.get("web_url") if isinstance(p.get("web_url"), str) else None,
        "defaultBranch": p.get("default_branch") if isinstance(p.get("default_branch"), str) else None,
    }


class GitLabClient:
    def __init__(self, store: Any, base_url: str, *, timeout: float = 15.0):
        self.store = store
        self.base_url = (base_url or "https://gitlab.com").rstrip("/")
        self.timeout = aiohttp.ClientTimeout(total=timeout, connect=min(timeout, 5.0))
        self._session: Optional[aiohttp.ClientSession] = None

    # --- lifecycle ---------------------------------------------------------

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout, trust_env=False)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    # --- state -------------------------------------------------------------

    def token(self) -> Optional[str]:
        """The stored PAT (for spawn's clone credential); never put it in a response or a log."""
        return self.store.get_setting(PAT_KEY) or None

    def status(self) -> dict:
        out: dict = {"connected": bool(self.token()), "baseUrl": self.base_url}
        if out["connected"]:
            username = self.store.get_setting(USERNAME_KEY)
            if username:
                out["username"] = username
        return out

    # --- GitLab calls --------------------------------------------------------

    async def _get(self, path: str, token: str, params: Optional[dict] = None) -> tuple[int, Any, dict]:
        url = f"{self.base_url}/api/v4/{path}"
        try:
            async with self._http().get(
                url, params=params, headers={"PRIVATE-TOKEN": token, "Accept": "application/json"}, allow_redirects=False
            ) as resp:
                body = await resp.read()
                headers = {k.lower(): v for k, v in resp.headers.items()}
                data: Any = None
                if resp.status < 300:
                    try:
                        data = json.loads(body)
                    except ValueError:
                        raise GitLabError(502, f"GitLab at {self.base_url} answered {path} with something that is not JSON")
                return resp.status, data, headers
        except asyncio.TimeoutError:
            raise GitLabError(504, f"GitLab at {self.base_url} did not answer in time")
        except aiohttp.ClientError as exc:
            log.warning("GitLab request %s failed: %s", path, type(exc).__name__)
            raise GitLabError(502, f"GitLab not reachable at {self.base_url}")

    async def connect(self, token: Any) -> str:
        if not isinstance(token, str) or not token.strip():
            raise GitLabError(400, "token must be a non-empty string")
        token = token.strip()
        if len(token) > MAX_TOKEN_LEN or not _TOKEN_OK.fullmatch(token):
            raise GitLabError(400, "token is not a valid GitLab personal access token")
        status, data, _ = await self._get("user", token)
        if status in (401, 403):
            log.info("GitLab rejected a personal access token (fingerprint %s)", fingerprint(token))
            raise GitLabError(400, f"GitLab rejected the token ({status}): check it and its read_api scope")
        if status != 200:
            raise GitLabError(502, f"GitLab answered {status} to the token check")
        username = data.get("username") if isinstance(data, dict) else None
        if not isinstance(username, str) or not username:
            raise GitLabError(502, "GitLab's /user answer has no username")
        await self.store.set_setting(PAT_KEY, token)
        await self.store.set_setting(USERNAME_KEY, username)
        log.info("GitLab connected as %s at %s (token fingerprint %s)", username, self.base_url, fingerprint(token))
        return username

    async def disconnect(self) -> None:
        await self.store.set_setting(PAT_KEY, None)
        await self.store.set_setting(USERNAME_KEY, None)
        log.info("GitLab disconnected")

    async def repos(self) -> list[dict]:
        token = self.token()
        if not token:
            raise GitLabError(409, "GitLab is not connected: POST /api/gitlab/connect with a token first")
        out: list[dict] = []
        seen: set[str] = set()
        page = 1
        for _ in range(MAX_PAGES):
            status, data, headers = await self._get(
                "projects",
                token,
                {
                    "membership": "true",
                    "order_by": "last_activity_at",
                    "sort": "desc",
                    "archived": "false",
                    "simple": "true",
                    "per_page": str(PER_PAGE),
                    "page": str(page),
                },
            )
            if status in (401, 403):
                raise GitLabError(409, f"GitLab rejected the stored token ({status}); connect again")
            if status != 200:
                raise GitLabError(502, f"GitLab answered {status} to the project list")
            if not isinstance(data, list):
                raise GitLabError(502, "GitLab's project list is not a list")
            for p in data:
                if isinstance(p, dict):
                    m = _map_project(p)
                    if m is not None and m["path"] not in seen:
                        seen.add(m["path"])
                        out.append(m)
            nxt = headers.get("x-next-page", "").strip()
            if not data or not nxt.isdigit() or int(nxt) <= page:
                break
            page = int(nxt)
        # GitLab already orders by activity; sort again (stable) so the contract holds whatever it sends.
        # ISO-8601 UTC strings with the same format sort chronologically.
        out.sort(key=lambda r: r["lastActivityAt"] or "", reverse=True)
        return out

    # --- routes --------------------------------------------------------------

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/gitlab/status", self._h_status),
            web.post("/api/gitlab/connect", self._h_connect),
            web.delete("/api/gitlab/connect", self._h_disconnect),
            web.get("/api/gitlab/repos", self._h_repos),
        ]

    async def _h_status(self, request: web.Request) -> web.Response:
        return web.json_response(self.status())

    async def _h_connect(self, request: web.Request) -> web.Response:
        try:
            body = await read_json(request)
        except BridgeError as exc:  # not a JSON object, too deep, too large: 400/413
            return rest_error(exc)
        try:
            username = await self.connect(body.get("token"))
        except GitLabError as exc:
            return exc.response()
        return web.json_response({"username": username})

    async def _h_disconnect(self, request: web.Request) -> web.Response:
        await self.disconnect()
        return web.json_response({"ok": True})

    async def _h_repos(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(await self.repos())
        except GitLabError as exc:
            return exc.response()
