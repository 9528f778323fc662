"""lvmh's push routes (docs/push.md): the VAPID key, Web Push subscriptions, answers from a
notification, and the web UI's service worker.

- ``GET /api/push/vapid`` → ``{publicKey}`` (bearer)
- ``POST /api/push/subscriptions`` ``{endpoint, keys: {p256dh, auth}}`` → ``{id}`` (bearer)
- ``DELETE /api/push/subscriptions/{id}`` → ``{ok: true}`` (bearer)
- ``POST /api/push/decide/{token}`` → ``{ok: true}``, or 410 for a used, expired or unknown
  token (no bearer: the token is the credential, and it can do nothing else)
- ``GET /sw.js``: the service worker, served from the root so its scope is the whole page

The rules live in ``bridge_core/push``; here only HTTP. The front end also tells the notifier
where the web UI is reached (``public_url``, else its bound address), for message and action URLs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from aiohttp import web

from bridge_core.model.errors import BadRequest, Unavailable
from bridge_core.push import RegisterPush, UnregisterPush
from bridge_core.kit.security import client_address

from .request import public_url
from .errors import error_response, json_response
from .request import command_origin, read_json  # one Origin and one body reader for every lvmh route

if TYPE_CHECKING:
    from .host import Host

PUSH_DECIDE = "/api/push/decide/"
GONE = "This notification's answer is no longer valid (used, expired, or the decision was settled)"


def base_url(fe: "Host") -> Optional[str]:
    """Where a browser reaches this web UI: the lvmh public URL, else the bound address."""
    public = public_url(fe.config)
    if public:
        return public
    if fe.port is None:
        return None
    scheme = "https" if fe.config.tls else "http"
    host = fe.config.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{fe.port}"


def push_routes(fe: "Host") -> list[web.RouteDef]:
    routes = PushRoutes(fe)
    notifier = fe.bridge.push
    if notifier is not None:
        notifier.base_url = lambda: base_url(fe)
    return routes.routes()


class PushRoutes:
    def __init__(self, fe: "Host"):
        self.fe = fe

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/api/push/vapid", self.vapid),
            web.post("/api/push/subscriptions", self.subscribe),
            web.delete("/api/push/subscriptions/{id}", self.unsubscribe),
            web.post(PUSH_DECIDE + "{token}", self.decide),
            web.get("/sw.js", service_worker),
        ]

    def _notifier(self) -> Any:
        notifier = self.fe.bridge.push
        if notifier is None:
            raise Unavailable("Push is not running on this bridge")
        return notifier

    async def vapid(self, request: web.Request) -> web.Response:
        return json_response({"publicKey": self._notifier().public_key})

    async def subscribe(self, request: web.Request) -> web.Response:
        self._notifier()
        body = await read_json(request)
        endpoint, keys = body.get("endpoint"), body.get("keys")
        if not isinstance(endpoint, str) or not isinstance(keys, dict):
            raise BadRequest("expected {endpoint, keys: {p256dh, auth}}")
        p256dh, auth = keys.get("p256dh"), keys.get("auth")
        if not isinstance(p256dh, str) or not isinstance(auth, str):
            raise BadRequest("keys.p256dh and keys.auth must be strings")
        result = await self.fe.bridge.execute(RegisterPush(endpoint=endpoint, p256dh=p256dh, auth=auth),
                                              command_origin(request))  # fmt: skip
        return json_response({"id": result.subscription_id})

    async def unsubscribe(self, request: web.Request) -> web.Response:
        self._notifier()
        await self.fe.bridge.execute(UnregisterPush(subscription_id=request.match_info["id"]), command_origin(request))
        return json_response({"ok": True})

    async def decide(self, request: web.Request) -> web.Response:
        notifier = self._notifier()
        if await notifier.decide(request.match_info["token"]):
            self.fe.limiter.passed(request)  # a valid credential: no longer an unauthenticated connection
            return json_response({"ok": True})
        await self.fe.limiter.wrong(client_address(request))  # guessing is slowed like any wrong credential
        return error_response(GONE, 410, "gone")


async def service_worker(request: web.Request) -> web.StreamResponse:
    """``web/sw.js`` at the root, with the page's headers (CSP included) and its scope: ``/``."""
    from .web import WEB_DIR, _file_response

    response = _file_response(WEB_DIR / "sw.js", request)
    response.headers["Service-Worker-Allowed"] = "/"
    return response
