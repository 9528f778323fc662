"""The core's error codes as Loomi ``error`` payloads and WebSocket close codes.

Loomi errors are ``error {code, message, fatal}`` frames (plus ``request_id``
when they answer a request). The codes are the core's machine-readable codes,
except where Loomi has its own name for the thing: a conversation is a task
here. A fatal error is followed by a close with one of the codes below.
"""

from __future__ import annotations

from typing import Any, Optional

from bridge_core.model.errors import BridgeError, as_bridge_error

# Close codes (4000-4999 are free for applications, RFC 6455 §7.4.2).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_POLICY = 1008
CLOSE_TOO_LARGE = 1009
CLOSE_INTERNAL = 1011
CLOSE_REPLACED = 4000  # the same device connected again; the older socket goes
CLOSE_UNAUTHORIZED = 4001  # hello refused (bad token or credential, revoked device)
CLOSE_AUTH_TIMEOUT = 4002  # no hello within the deadline
CLOSE_VERSION = 4003  # unsupported protocol version
CLOSE_REVOKED = 4004  # the device was revoked while connected
CLOSE_RATE_LIMITED = 4029  # too many failed hellos from this address
CLOSE_HEARTBEAT = 4008  # three pings went unanswered
CLOSE_SLOW = 4009  # the device could not keep up; reconnect and replay

# core code -> Loomi code (unlisted codes pass through unchanged)
_RENAMED = {"conversation_not_found": "task_not_found"}

_CLOSE_FOR = {
    "unauthorized": CLOSE_UNAUTHORIZED,
    "auth_timeout": CLOSE_AUTH_TIMEOUT,
    "version_mismatch": CLOSE_VERSION,
    "revoked": CLOSE_REVOKED,
    "rate_limited": CLOSE_RATE_LIMITED,
    "heartbeat_timeout": CLOSE_HEARTBEAT,
    "slow_consumer": CLOSE_SLOW,
    "too_large": CLOSE_TOO_LARGE,
    "replaced": CLOSE_REPLACED,
    "internal_error": CLOSE_INTERNAL,
}


class Revoked(BridgeError):
    code = "revoked"
    default_message = "This device was revoked; pair it again"
    fatal = True


class HeartbeatTimeout(BridgeError):
    code = "heartbeat_timeout"
    default_message = "No pong to 3 pings"
    fatal = True


class Replaced(BridgeError):
    code = "replaced"
    default_message = "This device connected again on another socket"
    fatal = True


def loomi_code(code: str) -> str:
    return _RENAMED.get(code, code)


def error_payload(exc: BaseException, request_id: Optional[str] = None) -> dict[str, Any]:
    """``error`` payload for any exception (non-BridgeErrors become a detail-free internal_error)."""
    err = as_bridge_error(exc)
    payload: dict[str, Any] = {"code": loomi_code(err.code), "message": err.message, "fatal": bool(err.fatal)}
    if request_id is not None:
        payload["request_id"] = request_id
    return payload


def close_code(code: str) -> int:
    """The close code that follows a fatal error with this (Loomi) code."""
    return _CLOSE_FOR.get(code, CLOSE_POLICY)
