"""The core's error codes as lvmh answers: HTTP statuses for REST, error frames for sockets.

REST errors are ``{"error": "message"}`` with a status (the lvmh protocol,
"Transport 2"); socket errors are an ``error`` frame the peer may ignore
(unknown types are ignored by plugins and browsers). Anything that is not a
``BridgeError`` becomes a detail-free internal error, with its traceback in
the log and never on the wire.
"""

from __future__ import annotations

import logging
from typing import Optional

import orjson
from aiohttp import web

from bridge_core.model.errors import BridgeError, as_bridge_error

log = logging.getLogger("agent_bridge.lvmh")

# core error code -> HTTP status
STATUS = {
    "unauthorized": 401,
    "bad_request": 400,
    "invalid_json": 400,
    "unknown_type": 400,
    "not_found": 404,
    "conversation_not_found": 404,
    "approval_not_found": 404,
    "clarify_not_found": 404,
    "already_resolved": 409,
    "run_active": 409,
    "conflict": 409,
    "offline": 409,
    "forbidden": 403,
    "forbidden_origin": 403,
    "too_large": 413,
    "rate_limited": 429,
    "not_implemented": 501,
    "unavailable": 503,
    "internal_error": 500,
}


class HttpError(Exception):
    """An error answered over REST as ``{"error": message}`` with ``status`` (spawn, GitLab)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message

    def response(self) -> web.Response:
        return error_response(self.message, self.status)


class Offline(BridgeError):
    """A known session whose agent is not connected (REST 409)."""

    code = "offline"
    default_message = "Session is offline"


class SessionNotFound(BridgeError):
    code = "not_found"
    default_message = "Unknown session"


def status_for(err: BridgeError) -> int:
    return STATUS.get(err.code, 400 if not err.code.endswith("error") else 500)


def json_response(data, status: int = 200) -> web.Response:
    return web.Response(body=orjson.dumps(data), status=status, content_type="application/json")


def error_response(message: str, status: int, code: Optional[str] = None) -> web.Response:
    body = {"error": message}
    if code:
        body["code"] = code
    return json_response(body, status)


def rest_error(exc: BaseException) -> web.Response:
    """``{"error": ...}`` with the status that fits ``exc`` (never a traceback)."""
    if isinstance(exc, web.HTTPException):  # e.g. 413 from reading a body over client_max_size
        return error_response(exc.reason or "Error", exc.status)
    err = as_bridge_error(exc)
    if err is not exc:
        log.error("lvmh: unexpected error in a REST handler", exc_info=exc)
    return error_response(err.message, status_for(err), err.code)


def error_frame(message: str, code: str = "bad_request", *, session_id: Optional[str] = None,
                ref_seq: Optional[int] = None) -> bytes:
    """An ``error`` frame for a plugin or browser socket."""
    frame: dict = {"type": "error", "code": code, "error": message}
    if session_id is not None:
        frame["sessionId"] = session_id
    if ref_seq is not None:
        frame["refSeq"] = ref_seq
    return orjson.dumps(frame)


# WebSocket close codes
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_HELLO_TIMEOUT = 4001
CLOSE_REPLACED = 4002
CLOSE_FORBIDDEN = 4003  # a worker credential's hello for another session
CLOSE_REVOKED = 4004  # the worker credential was revoked (its container deleted)
CLOSE_CONFLICT = 4009
CLOSE_VERSION = 4010
CLOSE_QUOTA = 4013  # the session stored its quota and the plugin sent another event (docs/security.md)
CLOSE_SLOW = 4029

# a plugin frame refused as fatal (lvmh_adapter/protocol.py Reject.fatal): how its socket is closed
FATAL_CLOSE = {
    "quota_exceeded": (CLOSE_QUOTA, b"storage quota exceeded"),
    "auth_timeout": (CLOSE_HELLO_TIMEOUT, b"no hello"),
}
FATAL_CLOSE_DEFAULT = (CLOSE_VERSION, b"unsupported protocol version")
