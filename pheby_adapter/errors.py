"""Core error codes -> Pheby error codes (the spec's closed set)."""

from __future__ import annotations

from typing import Any

from bridge_core.model import commands as cmd
from bridge_core.model.errors import (
    ApprovalNotFound,
    BridgeError,
    ClarifyNotFound,
    InternalError,
    NotFound,
)


class IllegalTransition(InternalError):
    """A connection asked to go where its state does not lead (``protocol.State``): a bug, never a client's doing."""


PHEBY_CODES = frozenset(
    {
        "unauthorized", "auth_timeout", "version_mismatch", "bad_request", "invalid_json",
        "unknown_type", "not_found", "conversation_not_found", "approval_not_found",
        "clarify_not_found", "too_large", "rate_limited", "run_active", "internal_error",
        "not_implemented",
    }
)  # fmt: skip


def to_pheby_error(exc: BaseException, command: Any = None) -> BridgeError:
    """A BridgeError whose code is one of Pheby's; never leaks internal detail."""
    if not isinstance(exc, BridgeError):
        return InternalError()
    if exc.code in PHEBY_CODES:
        return exc
    if exc.code == "already_resolved":  # Pheby: a stale id is "not found"
        if isinstance(command, cmd.AnswerClarify):
            return ClarifyNotFound("Clarification already answered")
        return ApprovalNotFound("Approval already resolved")
    if exc.code in ("conflict", "unavailable"):
        return NotFound(exc.message)
    return BridgeError(exc.message, code="bad_request")
