"""The shared command model: what a front end asks of the bridge.

Adapters decode their frames into these frozen classes and hand them to
``Bridge.execute``. ``origin`` says which front end (and connection) asked:
the bridge puts it on the events the command causes, so a front end knows its
own requests without reading anything into request ids, and a resolution can
report who decided.
"""

from __future__ import annotations

from typing import Optional, Union

import attrs


def _frozen(cls):
    return attrs.frozen(kw_only=True)(cls)


@_frozen
class Origin:
    """Where a command entered the core; the events it causes carry it (``events``: provenance)."""

    surface: str  # pheby | loomi | lvmh | agent | cli
    connection: Optional[str] = None  # connection or device id, for logs only
    decided_by: str = "remote"  # what Loomi's decided_by says for this surface


LOCAL = Origin(surface="cli", decided_by="local")


@_frozen
class CreateConversation:
    name: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class RenameConversation:
    conversation_id: str
    name: str
    request_id: Optional[str] = None


@_frozen
class DeleteConversation:
    conversation_id: str
    request_id: Optional[str] = None


@_frozen
class SendMessage:
    text: str
    conversation_id: Optional[str] = None  # None: a new conversation
    request_id: Optional[str] = None


@_frozen
class CancelRun:
    conversation_id: Optional[str] = None
    run_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class PauseRun:
    """A soft interrupt: the run stops, the conversation stays resumable."""

    run_id: str
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class ResumeRun:
    """Injects "continue" into the run's conversation."""

    run_id: str
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class ResolveApproval:
    approval_id: str
    choice: str
    reason: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class AnswerClarify:
    clarify_id: str
    response: str
    request_id: Optional[str] = None


@_frozen
class SetModel:
    model: str
    provider: Optional[str] = None
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class SetReasoning:
    effort: str
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class SetYolo:
    enabled: bool
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


# --- queries ---------------------------------------------------------------


@_frozen
class ListConversations:
    request_id: Optional[str] = None


@_frozen
class OpenConversation:
    conversation_id: str
    limit: int = 200
    request_id: Optional[str] = None


@_frozen
class ListModels:
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class CurrentModel:
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class CurrentReasoning:
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class CurrentYolo:
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class ListTasks:
    limit: int = 50
    status_filter: Optional[str] = None
    request_id: Optional[str] = None


Command = Union[
    CreateConversation,
    RenameConversation,
    DeleteConversation,
    SendMessage,
    CancelRun,
    PauseRun,
    ResumeRun,
    ResolveApproval,
    AnswerClarify,
    SetModel,
    SetReasoning,
    SetYolo,
    ListConversations,
    OpenConversation,
    ListModels,
    CurrentModel,
    CurrentReasoning,
    CurrentYolo,
    ListTasks,
]

COMMAND_TYPES: tuple[type, ...] = Command.__args__  # type: ignore[attr-defined]
