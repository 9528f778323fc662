"""The Loomi front end's HTTP routes: ``GET /health``, pairing and devices (loopback only), authenticated
attachment downloads (docs/loomi.md, "Endpoints"). Thin handlers over the registry and the bridge."""

from __future__ import annotations

import functools
import logging
from typing import Any, Optional, Protocol

import orjson
from aiohttp import web

from bridge_core.kit.downloads import file_response
from bridge_core.model.errors import BadRequest, BridgeError
from bridge_core.kit.security import bearer_token, client_address, require_loopback_admin

from .errors import error_payload

class RoutesHost(Protocol):
    """What the routes use of the Loomi front end (``server.LoomiFrontEnd``): named here so this
    module imports nothing above it (no import cycle, docs/architecture.md, Layers)."""

    bridge: Any
    config: Any
    registry: Any
    limiter: Any
    fp: str
    pair_ttl: float
    server_name: str

    def pair_url(self) -> str: ...

    async def revoke(self, device_id: str) -> Any: ...

log = logging.getLogger("agent_bridge.loomi")


def add_routes(app: web.Application, fe: RoutesHost) -> None:
    """Every route but the protocol socket."""
    app.router.add_get("/health", health)
    app.router.add_post("/internal/pair/new", functools.partial(pair_new, fe))
    app.router.add_get("/internal/devices", functools.partial(devices, fe))
    app.router.add_post("/internal/devices/revoke", functools.partial(revoke, fe))
    app.router.add_get("/attachments/{attachment_id}", functools.partial(attachment, fe))


async def health(request: web.Request) -> web.Response:
    return web.Response(body=b'{"ok":true,"v":1}', content_type="application/json")


async def _refuse_non_local(fe: RoutesHost, request: web.Request) -> Optional[web.Response]:
    """The loopback-only endpoints: the shared check (loopback peer and Host, no Origin,
    no forwarding header, the admin key), or its 403."""
    return await require_loopback_admin(request, fe.config.admin_key, fe.limiter, log)


async def _json_body(request: web.Request) -> dict:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise BadRequest("body is not JSON")
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    return body


async def pair_new(fe: RoutesHost, request: web.Request) -> web.Response:
    refused = await _refuse_non_local(fe, request)
    if refused is not None:
        return refused
    try:
        body = await _json_body(request)
        ttl = body.get("ttl", fe.pair_ttl)
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= 86400:
            raise BadRequest("ttl must be a number of seconds in (0, 86400]")
    except BridgeError as exc:
        return _json({"error": error_payload(exc)}, status=400)
    token, expires = await fe.registry.create_token(float(ttl))
    payload = {"v": 1, "url": fe.pair_url(), "token": token, "name": fe.server_name, "fp": fe.fp}
    return _json({"payload": payload, "expires_at": expires, "ttl": ttl})


async def devices(fe: RoutesHost, request: web.Request) -> web.Response:
    refused = await _refuse_non_local(fe, request)
    if refused is not None:
        return refused
    return _json({"devices": fe.registry.list()})


async def revoke(fe: RoutesHost, request: web.Request) -> web.Response:
    refused = await _refuse_non_local(fe, request)
    if refused is not None:
        return refused
    try:
        body = await _json_body(request)
        device_id = body.get("device_id")
        if not isinstance(device_id, str) or not device_id:
            raise BadRequest("device_id required")
    except BridgeError as exc:
        return _json({"error": error_payload(exc)}, status=400)
    d = await fe.revoke(device_id)
    return _json({"revoked": d is not None, "device_id": device_id}, status=200 if d else 404)


async def attachment(fe: RoutesHost, request: web.Request) -> web.StreamResponse:
    device_id, _, credential = (bearer_token(request) or "").partition(":")
    d = None
    if device_id and credential:
        d = fe.registry.authenticate(device_id, credential)
        if d is None:  # a wrong credential is slowed; none at all is a plain 401
            await fe.limiter.wrong(client_address(request))
    if d is None:
        return _json({"error": {"code": "unauthorized", "message": "Unauthorized"}}, status=401,
                     headers={"WWW-Authenticate": 'Bearer realm="loomi"'})
    fe.limiter.passed(request)
    found = fe.bridge.attachments.get(request.match_info["attachment_id"])
    if found is None:
        return _json({"error": {"code": "not_found", "message": "Attachment not found"}}, status=404)
    return file_response(*found)


def _json(obj: Any, status: int = 200, headers: Optional[dict] = None) -> web.Response:
    h = {"Cache-Control": "no-store"}
    if headers:
        h.update(headers)
    return web.Response(body=orjson.dumps(obj), status=status, content_type="application/json", headers=h)
