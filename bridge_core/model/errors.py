"""One error tree with machine-readable codes, shared by every front end.

Adapters map ``BridgeError.code`` to their protocol's error frame; anything
that is not a ``BridgeError`` becomes a detail-free ``internal_error``.
"""

from __future__ import annotations

MAX_MESSAGE = 500


class BridgeError(Exception):
    code = "internal_error"
    default_message = "Internal error"
    fatal = False

    def __init__(self, message: str | None = None, *, code: str | None = None, fatal: bool | None = None):
        if code is not None:
            self.code = code
        if fatal is not None:
            self.fatal = fatal
        self.message = (message or self.default_message)[:MAX_MESSAGE]
        super().__init__(self.message)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class Unauthorized(BridgeError):
    code = "unauthorized"
    default_message = "Unauthorized"
    fatal = True


class AuthTimeout(BridgeError):
    code = "auth_timeout"
    default_message = "No hello within the deadline"
    fatal = True


class VersionMismatch(BridgeError):
    code = "version_mismatch"
    default_message = "Unsupported protocol version"
    fatal = True


class BadRequest(BridgeError):
    code = "bad_request"
    default_message = "Bad request"


class InvalidJson(BridgeError):
    code = "invalid_json"
    default_message = "Frame is not a JSON object with a string type"


class UnknownType(BridgeError):
    code = "unknown_type"
    default_message = "Unknown message type"


class NotFound(BridgeError):
    code = "not_found"
    default_message = "Not found"


class ConversationNotFound(NotFound):
    code = "conversation_not_found"
    default_message = "Conversation not found"


class ApprovalNotFound(NotFound):
    code = "approval_not_found"
    default_message = "Approval not found"


class ClarifyNotFound(NotFound):
    code = "clarify_not_found"
    default_message = "Clarification not found"


class AlreadyResolved(BridgeError):
    code = "already_resolved"
    default_message = "Already resolved"


class TooLarge(BridgeError):
    code = "too_large"
    default_message = "Too large"


class RateLimited(BridgeError):
    code = "rate_limited"
    default_message = "Too many requests"


class RunActive(BridgeError):
    code = "run_active"
    default_message = "A run is already active in this conversation"


class NotImplementedByAgent(BridgeError):
    code = "not_implemented"
    default_message = "Not implemented by this agent"


class Unavailable(BridgeError):
    code = "unavailable"
    default_message = "Service unavailable"


class Conflict(BridgeError):
    code = "conflict"
    default_message = "Conflict"


class SlowConsumer(BridgeError):
    code = "slow_consumer"
    default_message = "Client could not keep up; reconnect to recover"
    fatal = True


class ConfigError(BridgeError):
    """A setting, flag or file the bridge cannot start with (one line saying which, and the fix)."""

    code = "config_error"
    default_message = "Bad configuration"
    fatal = True


class InternalError(BridgeError):
    code = "internal_error"
    default_message = "Internal error"


def as_bridge_error(exc: BaseException) -> BridgeError:
    """Return ``exc`` if it is a BridgeError, else a detail-free internal error."""
    if isinstance(exc, BridgeError):
        return exc
    return InternalError()
