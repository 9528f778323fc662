"""The shared event model: what an agent run looks like to every front end.

Plain frozen attrs classes, no JSON code on them. Every event names its
conversation (``conversation_id``; Pheby conversation, Loomi task, lvmh
session), the run where there is one, and a UTC timestamp in float epoch
seconds. Adapters render these into their protocol's frames (see the
renderers in docs/architecture.md, "One event, agent to socket").

Provenance: the events a command causes (the user message, the run's start and
end, a decision's resolution) carry ``origin``, the ``commands.Origin`` the
command entered the core with (front end and connection); ``None`` when no
command caused them (the agent's own runs, timeouts). Front ends read it,
never a request id, to know whose request an event answers.
"""

from __future__ import annotations

import operator
import time
from typing import Any, Literal, Optional, Union

import attrs

from .commands import Origin

RunStatus = Literal["completed", "failed", "cancelled"]
ToolStatus = Literal["running", "completed", "failed", "cancelled"]
DeltaKind = Literal["text", "reasoning"]
Scope = Literal["conversation", "global"]
# who settled a decision: a person (local/remote), the agent, its timeout, or the core when the
# decision's run ended under it (cancelled, failed, completed) or a restart interrupted it
DecidedBy = Literal["local", "remote", "timeout", "agent", "cancelled", "failed", "completed", "restart"]

APPROVAL_CHOICES = ("once", "session", "always", "deny")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra")


def now() -> float:
    return time.time()


_time = time.time


def _frozen(cls):
    return attrs.frozen(kw_only=True)(cls)


@_frozen
class Attachment:
    attachment_id: str
    filename: str
    mime_type: str
    size: int
    kind: str  # image | voice | video | audio | document
    inline_image: bool
    conversation_id: str
    message_id: Optional[str]
    created_at: float
    expires_at: Optional[float]

    @property
    def download_path(self) -> str:
        return f"/attachments/{self.attachment_id}"


@_frozen
class Message:
    """One transcript entry (role user or assistant)."""

    message_id: str
    role: str
    text: str
    ts: Optional[float]


# --- conversation lifecycle ------------------------------------------------


@_frozen
class ConversationCreated:
    conversation_id: str
    name: str
    source: str = "demo"
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


@_frozen
class ConversationRenamed:
    conversation_id: str
    name: str
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


@_frozen
class ConversationUpdated:
    """Something about a conversation changed (auto-title, metadata, online state)."""

    conversation_id: str
    name: str
    ts: float = attrs.field(factory=now)


@_frozen
class ConversationDeleted:
    conversation_id: str
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


# --- runs ------------------------------------------------------------------


@_frozen
class UserMessageSent:
    conversation_id: str
    message_id: str
    text: str
    run_id: Optional[str] = None
    origin: Optional[Origin] = None
    ts: float = attrs.field(factory=now)


@_frozen
class RunStarted:
    conversation_id: str
    run_id: str
    message_id: str  # the assistant draft's id
    model: Optional[str] = None
    provider: Optional[str] = None
    title: Optional[str] = None
    request_id: Optional[str] = None
    origin: Optional[Origin] = None
    ts: float = attrs.field(factory=now)


class _Buffer:
    """Append-only text: what was appended is never changed, so any prefix of it is a value."""

    __slots__ = ("_text", "_parts", "length")

    def __init__(self, text: str = ""):
        self._text = text
        self._parts: list[str] = []
        self.length = len(text)

    # appended to by its Draft (Draft.append: the one writer)

    def upto(self, n: int) -> str:
        """The first ``n`` characters; joined lazily, so a run of deltas costs no O(n^2) copying."""
        if self._parts:
            self._text += "".join(self._parts)
            self._parts = []
        t = self._text
        return t if n == len(t) else t[:n]


class TextSoFar(tuple):
    """Immutable: a run's cumulative text at one delta (the first ``length`` characters of an
    append-only buffer). A ``TextDelta`` holds one; the text is only built when a front end
    actually sends it (Pheby coalesces to the latest draft)."""

    __slots__ = ()

    def __new__(cls, buf: _Buffer, length: int) -> "TextSoFar":
        return tuple.__new__(cls, (buf, length))

    # its second item, read without a Python frame (once per delta on the hot path: the draft saver's check)
    length = property(operator.itemgetter(1), doc="The text's length (characters).")

    def text(self) -> str:
        return self[0].upto(self[1])

    @classmethod
    def of(cls, text: str) -> "TextSoFar":
        return cls(_Buffer(text), len(text))

    def __repr__(self) -> str:
        return f"TextSoFar(length={self[1]})"


class Draft:
    """A run's accumulating text: the mutable accumulator a run (or its source) owns.

    Events never hold it: ``snapshot()`` is what a ``TextDelta`` keeps. ``set``
    (a non-append edit) starts a new buffer, so earlier snapshots keep their text.
    """

    __slots__ = ("_buf",)

    def __init__(self, text: str = ""):
        self._buf = _Buffer(text)

    @property
    def length(self) -> int:
        return self._buf.length

    def append(self, piece: str) -> None:
        buf = self._buf  # once per streamed delta: _Buffer.append inlined
        buf._parts.append(piece)
        buf.length += len(piece)

    def set(self, text: str) -> None:
        self._buf = _Buffer(text)

    def text(self) -> str:
        buf = self._buf
        return buf.upto(buf.length)

    def snapshot(self) -> TextSoFar:
        buf = self._buf
        return TextSoFar(buf, buf.length)

    def __repr__(self) -> str:
        return f"Draft(length={self._buf.length})"


_new_snapshot = tuple.__new__


def _text_so_far(value: Any) -> TextSoFar:
    """A ``TextDelta``'s ``draft``: given the run's ``Draft``, its snapshot at this delta."""
    t = type(value)
    if t is Draft:  # the hot path (one per streamed delta): Draft.snapshot, inlined
        buf = value._buf
        return _new_snapshot(TextSoFar, (buf, buf.length))
    if t is TextSoFar:
        return value
    if isinstance(value, str):
        return TextSoFar.of(value)
    raise TypeError(f"draft must be a Draft, TextSoFar or str, not {type(value).__name__}")


_UNSET: Any = object()


@attrs.frozen(kw_only=True, init=False)
class TextDelta:
    """Streamed text: the increment, and the cumulative text at this delta (immutable)."""

    conversation_id: str
    run_id: str
    message_id: str
    delta: str
    draft: TextSoFar = attrs.field(eq=False, repr=False, factory=Draft, converter=_text_so_far)
    kind: DeltaKind = "text"
    iteration: int = 0
    ts: float = attrs.field(factory=now)

    def __init__(self, *, conversation_id: str, run_id: str, message_id: str, delta: str, draft: Any = _UNSET,
                 kind: DeltaKind = "text", iteration: int = 0, ts: Any = _UNSET) -> None:
        _fill_delta(self, conversation_id, run_id, message_id, delta, draft, kind, iteration, ts)

    @property
    def text(self) -> str:
        """The cumulative text of this kind up to and including this delta."""
        return self.draft.text()


(_set_cid, _set_rid, _set_mid, _set_delta, _set_draft, _set_kind, _set_iteration, _set_ts) = (
    TextDelta.__dict__[a.name].__set__ for a in attrs.fields(TextDelta))


def _fill_delta(e: TextDelta, conversation_id: str, run_id: str, message_id: str, delta: str, draft: Any,
                kind: str, iteration: int, ts: Any) -> None:
    # what attrs' __init__ does (TextDelta's fields: the draft's converter, the factories), each slot set
    # through its descriptor, not a setattr per field
    _set_cid(e, conversation_id)
    _set_rid(e, run_id)
    _set_mid(e, message_id)
    _set_delta(e, delta)
    if type(draft) is Draft:  # the hot path: _text_so_far's first case
        buf = draft._buf
        _set_draft(e, _new_snapshot(TextSoFar, (buf, buf.length)))
    else:
        _set_draft(e, _text_so_far(Draft() if draft is _UNSET else draft))
    _set_kind(e, kind)
    _set_iteration(e, iteration)
    _set_ts(e, _time() if ts is _UNSET else ts)  # now()


_new_object = object.__new__


def streamed_delta(conversation_id: str, run_id: str, message_id: str, delta: str, draft: Any,
                   kind: DeltaKind = "text", iteration: int = 0) -> TextDelta:
    """``TextDelta(conversation_id=..., ...)`` stamped now, its arguments by position: the one event made per
    streamed delta (``RunContext.delta``). A keyword call to a class with its own ``__init__`` builds a dict of
    the keywords on every call (``type.__call__``): about half of the event's making, for nothing."""
    e = _new_object(TextDelta)
    _fill_delta(e, conversation_id, run_id, message_id, delta, draft, kind, iteration, _UNSET)
    return e


@_frozen
class InterimMessage:
    conversation_id: str
    run_id: str
    text: str
    already_streamed: bool = False
    ts: float = attrs.field(factory=now)


@_frozen
class MessageCompleted:
    conversation_id: str
    message_id: str
    text: str
    run_id: Optional[str] = None
    kind: Literal["normal", "notice"] = "normal"
    ts: float = attrs.field(factory=now)


@_frozen
class ToolStarted:
    conversation_id: str
    run_id: Optional[str]
    call_id: str
    tool_name: str
    args: Any  # already redacted
    preview: str = ""
    iteration: int = 0
    index: int = 0
    ts: float = attrs.field(factory=now)


@_frozen
class ToolProgress:
    conversation_id: str
    run_id: Optional[str]
    call_id: str
    tool_name: str
    partial: str
    ts: float = attrs.field(factory=now)


@_frozen
class ToolFinished:
    conversation_id: str
    run_id: Optional[str]
    call_id: str
    tool_name: str
    status: ToolStatus
    duration_ms: Optional[int] = None
    error: Optional[str] = None
    result_preview: str = ""
    iteration: int = 0
    index: int = 0
    ts: float = attrs.field(factory=now)


@_frozen
class Usage:
    input_tokens: Optional[int] = None
    output_tokens: Optional[int] = None
    total_cost: Optional[float] = None


@_frozen
class RunFinished:
    conversation_id: str
    run_id: str
    status: RunStatus
    error: Optional[str] = None
    text: str = ""
    usage: Optional[Usage] = None
    request_id: Optional[str] = None
    origin: Optional[Origin] = None  # the cancel's when a command cancelled it, else the run's
    ts: float = attrs.field(factory=now)


# the error of a run a restart cut short (``RunFinished.error``, failed): its decisions are settled as
# decided by the restart (``Bridge.close_run``), whoever closes it (the bridge, lvmh for a pi session)
RUN_INTERRUPTED = "interrupted by a restart"


# --- decisions -------------------------------------------------------------


@_frozen
class ApprovalRequested:
    conversation_id: str
    run_id: Optional[str]
    approval_id: str
    session_key: str
    command: str
    description: str
    choices: tuple[str, ...] = APPROVAL_CHOICES
    smart_denied: bool = False
    deadline_ts: Optional[float] = None
    ts: float = attrs.field(factory=now)


@_frozen
class ApprovalResolved:
    conversation_id: str
    run_id: Optional[str]
    approval_id: str
    choice: str
    accepted: bool = True
    decided_by: DecidedBy = "remote"
    reason: Optional[str] = None
    request_id: Optional[str] = None
    surface: Optional[str] = None  # which front end answered: pheby, loomi, lvmh
    origin: Optional[Origin] = None
    ts: float = attrs.field(factory=now)


@_frozen
class ClarifyRequested:
    conversation_id: str
    run_id: Optional[str]
    clarify_id: str
    session_key: str
    question: str
    choices: Optional[tuple[str, ...]] = None
    allow_free_text: bool = True
    ts: float = attrs.field(factory=now)


@_frozen
class ClarifyResolved:
    conversation_id: str
    run_id: Optional[str]
    clarify_id: str
    response: str
    accepted: bool = True
    decided_by: DecidedBy = "remote"
    request_id: Optional[str] = None
    surface: Optional[str] = None
    origin: Optional[Origin] = None
    ts: float = attrs.field(factory=now)


# --- deliverables and notices ----------------------------------------------


@_frozen
class AttachmentAdded:
    conversation_id: str
    attachment: Attachment
    run_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


@_frozen
class Notification:
    conversation_id: Optional[str]
    message_id: str
    text: str
    title: str = ""
    category: Literal["result", "diagnostic"] = "result"
    source: str = "agent"
    requires_attention: bool = False
    ts: float = attrs.field(factory=now)


# --- settings ---------------------------------------------------------------


@_frozen
class ModelChanged:
    model: str
    provider: Optional[str]
    scope: Scope
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


@_frozen
class ReasoningChanged:
    effort: Optional[str]
    enabled: bool
    scope: Scope
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


@_frozen
class YoloChanged:
    enabled: bool
    scope: Scope
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None
    ts: float = attrs.field(factory=now)


Event = Union[
    ConversationCreated,
    ConversationRenamed,
    ConversationUpdated,
    ConversationDeleted,
    UserMessageSent,
    RunStarted,
    TextDelta,
    InterimMessage,
    MessageCompleted,
    ToolStarted,
    ToolProgress,
    ToolFinished,
    RunFinished,
    ApprovalRequested,
    ApprovalResolved,
    ClarifyRequested,
    ClarifyResolved,
    AttachmentAdded,
    Notification,
    ModelChanged,
    ReasoningChanged,
    YoloChanged,
]

EVENT_TYPES: tuple[type, ...] = Event.__args__  # type: ignore[attr-defined]

# Events that belong to a conversation's task list (Loomi replays them,
# lvmh renders them). Settings changes are global UI state.
CONVERSATION_EVENTS = tuple(t for t in EVENT_TYPES if "conversation_id" in attrs.fields_dict(t))
