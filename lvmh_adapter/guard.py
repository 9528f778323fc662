"""The lvmh HTTP middlewares: who may reach what (origin, then credential, then scope: auth.py and
request.py hold the rules) and the one error shape of ``/api`` (errors.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from aiohttp import web

from bridge_core.kit.security import bearer_token, client_address
from bridge_core.model.errors import BridgeError

from . import errors
from .auth import PRINCIPAL_KEY
from .errors import error_response
from .push import PUSH_DECIDE
from .request import check_origin

if TYPE_CHECKING:
    from .host import Host

log = logging.getLogger("agent_bridge.lvmh")


def middlewares(fe: "Host") -> list:
    """The front end's middlewares, reading its ``auth``, ``limiter`` and ``public_url`` at each request."""

    @web.middleware
    async def guard(request: web.Request, handler):
        """Origin, then credential -> principal, then the principal's scope (lvmh_adapter/auth.py)."""
        path = request.path
        if path == "/ws":
            presented = bearer_token(request) or request.query.get("token")
        elif path.startswith(PUSH_DECIDE):  # the decision token in the path is the credential (push.py)
            refused = check_origin(request, fe.public_url)
            return error_response(refused, 403, "forbidden_origin") if refused else await handler(request)
        elif path.startswith("/api/") or path == "/api" or path == "/agent/ws":
            presented = bearer_token(request)
        else:
            return await handler(request)
        refused = check_origin(request, fe.public_url)
        if refused is not None:
            log.info("lvmh: refused a request to %s with a foreign Origin from %s", path, client_address(request))
            return error_response(refused, 403, "forbidden_origin")
        principal = fe.auth.resolve(presented)
        if principal is not None:
            if not principal.may_open(path):
                return error_response("Forbidden: a worker credential may only open /agent/ws for its own session",
                                      403, "forbidden")
            request[PRINCIPAL_KEY] = principal
            fe.limiter.passed(request)
            return await handler(request)
        # The right token always passes at once; a wrong one is answered at the address's next slot
        # (security.AuthLimiter, at most 20 per second), none at all is a plain 401.
        addr = client_address(request)
        if presented:
            await fe.limiter.wrong(addr)
        log.info("lvmh: refused an unauthenticated request to %s from %s", path, addr)
        return error_response("Unauthorized: Authorization: Bearer <LVMH_TOKEN> required", 401, "unauthorized")

    return [api_errors, guard]


@web.middleware
async def api_errors(request: web.Request, handler):
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.content_type == "application/json" or not request.path.startswith("/api"):
            raise
        return error_response(exc.reason or "Error", exc.status)
    except BridgeError as exc:
        return errors.rest_error(exc)
    except (asyncio.CancelledError, ConnectionResetError):
        raise
    except Exception as exc:
        return errors.rest_error(exc)
