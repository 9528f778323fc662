"""Conversation state: what a front end needs to recover at any moment.

Pure: ``ConversationState.apply(event)`` folds shared events into the
transcript, the active run (with its draft text), the latest tool state per
call, pending approvals and clarifications, and attachments. No I/O.

The transcript is made when something first needs it (``messages``): a state may be given a
``keeper`` (the bridge's ``bridge/transcripts.py``), which loads it from the store then and
may drop it again later, so that a cold conversation holds only what its list entry needs.
Without a keeper it starts empty and stays in memory.
"""

from __future__ import annotations

import collections
from typing import Any, Optional, Protocol, Union

import attrs

from . import events as ev

HISTORY_KEEP = 2000  # transcript entries kept in memory per conversation (while its transcript is loaded)


class Transcript(collections.deque):
    """A conversation's transcript: its last ``HISTORY_KEEP`` messages, oldest first.

    ``held`` is set once someone other than the reducers replaced it (``clear``: the Hermes source
    adopts its own sessions' transcripts, the authority for them, which the store does not hold):
    a keeper then never drops it, since it could not load it back.
    """

    __slots__ = ("held",)

    def __init__(self, items: Any = ()):
        super().__init__(items, HISTORY_KEEP)
        self.held = False

    def clear(self) -> None:
        self.held = True
        super().clear()


class TranscriptKeeper(Protocol):
    """What a state asks of whoever keeps transcripts (``bridge/transcripts.py``)."""

    def load(self, conv: "ConversationState") -> Transcript: ...

    def touch(self, conv: "ConversationState") -> None: ...

    def grew(self, conv: "ConversationState", message: ev.Message, dropped: Optional[ev.Message]) -> None: ...


@attrs.define
class ActiveRun:
    run_id: str
    message_id: str
    started_at: float
    # the latest delta's text (immutable), or a Draft where the state itself set it
    draft: Union[ev.TextSoFar, ev.Draft] = attrs.field(factory=ev.Draft)
    reasoning_draft: Union[ev.TextSoFar, ev.Draft] = attrs.field(factory=ev.Draft)
    status: str = "running"
    request_id: Optional[str] = None
    completed: bool = False  # its message (message_id) was completed

    @property
    def text(self) -> str:
        return self.draft.text()

    @property
    def reasoning(self) -> str:
        return self.reasoning_draft.text()


@attrs.define
class ToolState:
    call_id: str
    tool_name: str
    run_id: Optional[str]
    status: str
    args: Any = None
    duration_ms: Optional[int] = None
    error: Optional[str] = None
    ts: float = 0.0


class _Unmade(dict):
    """The empty table a state hands out for one it has not made yet (``_lazy_dict``): reading it
    makes nothing; the first write into it makes it the state's own (or goes to the one made
    meanwhile)."""

    __slots__ = ("_owner", "_slot")

    def __init__(self, owner: Any, slot: str):
        super().__init__()
        self._owner = owner
        self._slot = slot

    def _target(self) -> dict:
        owner = self._owner
        if owner is None:
            return self
        self._owner = None
        made = getattr(owner, self._slot)
        if made is None:
            setattr(owner, self._slot, self)
            return self
        return made

    def __setitem__(self, key: Any, value: Any) -> None:
        target = self._target()
        dict.__setitem__(target, key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        return dict.setdefault(self._target(), key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        dict.update(self._target(), *args, **kwargs)


def _lazy_dict(slot: str) -> property:
    """A dict attribute kept in ``slot``: None until something is put in it, so that a conversation at
    rest holds no empty dicts (64 bytes each; reading one, as a list does for every conversation,
    makes none)."""

    def get(self: Any) -> dict:
        d = getattr(self, slot)
        return _Unmade(self, slot) if d is None else d

    def put(self: Any, value: dict) -> None:
        setattr(self, slot, value)

    return property(get, put)


@attrs.define
class ConversationState:
    conversation_id: str
    name: str
    source: str = "demo"
    created_at: float = attrs.field(factory=ev.now)
    updated_at: float = attrs.field(factory=ev.now)
    last_active: Optional[float] = None
    session_id: Optional[str] = None
    # the transcript while it is in memory (None: not made yet, or dropped by the keeper): read it as ``messages``
    transcript: Optional[Transcript] = attrs.field(default=None, repr=False, eq=False)
    keeper: Optional[TranscriptKeeper] = attrs.field(default=None, repr=False, eq=False)
    run: Optional[ActiveRun] = None
    last_run_id: Optional[str] = None
    # made when something is first put in them (``tools``, ``approvals``...: _lazy_dict)
    _tools: Optional[dict] = attrs.field(default=None, alias="tools")  # call_id -> ToolState (latest run's tools)
    _approvals: Optional[dict] = attrs.field(default=None, alias="approvals")  # approval_id -> ApprovalRequested
    _clarifications: Optional[dict] = attrs.field(default=None, alias="clarifications")  # clarify_id -> ClarifyRequested
    _attachments: Optional[dict] = attrs.field(default=None, alias="attachments")  # attachment_id -> Attachment
    preview: str = ""

    tools = _lazy_dict("_tools")
    approvals = _lazy_dict("_approvals")
    clarifications = _lazy_dict("_clarifications")
    attachments = _lazy_dict("_attachments")

    @property
    def messages(self) -> Transcript:
        """The transcript, loaded by the keeper if it is not in memory (marked as used: it stays a while)."""
        t = self.transcript
        keeper = self.keeper
        if t is None:
            t = self.transcript = keeper.load(self) if keeper is not None else Transcript()
        elif keeper is not None:
            keeper.touch(self)
        return t

    def _append(self, message: ev.Message) -> None:
        t = self.transcript
        if t is None:
            t = self.messages  # (the keeper's grew marks it as used: no touch here)
        dropped = t[0] if len(t) == HISTORY_KEEP else None  # the oldest, which the append pushes out
        t.append(message)
        if self.keeper is not None:
            self.keeper.grew(self, message, dropped)

    @property
    def status(self) -> str:
        """Loomi task status: idle, running or waiting (a decision is pending)."""
        if self._approvals or self._clarifications:
            return "waiting"
        if self.run is not None:
            return "running"
        return "idle"

    def apply(self, event: Any) -> None:
        handler = _APPLY.get(type(event))
        if handler is not None:
            handler(self, event)
        self.updated_at = event.ts

    # --- reducers ---------------------------------------------------------

    def _user(self, e: ev.UserMessageSent) -> None:
        self._append(ev.Message(message_id=e.message_id, role="user", text=e.text, ts=e.ts))
        self.last_active = e.ts
        self.preview = e.text[:200]

    def _run_started(self, e: ev.RunStarted) -> None:
        self.run = ActiveRun(run_id=e.run_id, message_id=e.message_id, started_at=e.ts, request_id=e.request_id)
        self.last_run_id = e.run_id
        self._tools = None
        self.last_active = e.ts

    def _delta(self, e: ev.TextDelta) -> None:
        run = self.run
        if run is not None and run.run_id == e.run_id:
            if e.kind == "text":
                run.draft = e.draft
            else:
                run.reasoning_draft = e.draft

    def _completed(self, e: ev.MessageCompleted) -> None:
        self._append(ev.Message(message_id=e.message_id, role="assistant", text=e.text, ts=e.ts))
        self.last_active = e.ts
        if e.text:
            self.preview = e.text[:200]
        if self.run is not None and e.run_id == self.run.run_id:
            self.run.draft = ev.Draft(e.text)
            if e.message_id == self.run.message_id:
                self.run.completed = True

    def _tool_started(self, e: ev.ToolStarted) -> None:
        self.tools[e.call_id] = ToolState(
            call_id=e.call_id, tool_name=e.tool_name, run_id=e.run_id, status="running", args=e.args, ts=e.ts
        )

    def _tool_finished(self, e: ev.ToolFinished) -> None:
        prev = self.tools.get(e.call_id)
        self.tools[e.call_id] = ToolState(
            call_id=e.call_id,
            tool_name=e.tool_name,
            run_id=e.run_id,
            status=e.status,
            args=prev.args if prev else None,
            duration_ms=e.duration_ms,
            error=e.error,
            ts=e.ts,
        )

    def _run_finished(self, e: ev.RunFinished) -> None:
        if self.run is not None and self.run.run_id == e.run_id:
            self.run = None
        for tool in (self._tools or {}).values():
            if tool.status == "running" and tool.run_id == e.run_id:
                tool.status = "cancelled" if e.status == "cancelled" else "failed"
        # a finished run leaves no decision pending
        for aid, a in list((self._approvals or {}).items()):
            if a.run_id == e.run_id:
                del self.approvals[aid]
        for cid, c in list((self._clarifications or {}).items()):
            if c.run_id == e.run_id:
                del self.clarifications[cid]
        self.last_active = e.ts

    def _approval_requested(self, e: ev.ApprovalRequested) -> None:
        self.approvals[e.approval_id] = e

    def _approval_resolved(self, e: ev.ApprovalResolved) -> None:
        self.approvals.pop(e.approval_id, None)

    def _clarify_requested(self, e: ev.ClarifyRequested) -> None:
        self.clarifications[e.clarify_id] = e

    def _clarify_resolved(self, e: ev.ClarifyResolved) -> None:
        self.clarifications.pop(e.clarify_id, None)

    def _attachment(self, e: ev.AttachmentAdded) -> None:
        self.attachments[e.attachment.attachment_id] = e.attachment

    def _renamed(self, e: ev.ConversationRenamed) -> None:
        self.name = e.name

    def _updated(self, e: ev.ConversationUpdated) -> None:
        self.name = e.name

    def _notification(self, e: ev.Notification) -> None:
        self._append(ev.Message(message_id=e.message_id, role="assistant", text=e.text, ts=e.ts))
        self.last_active = e.ts

    def history(self, limit: int) -> list:
        msgs = list(self.messages)
        return msgs[-limit:] if limit > 0 else []

    def live_attachments(self, at: float) -> list:
        return [a for a in (self._attachments or {}).values() if a.expires_at is None or a.expires_at > at]


_APPLY = {
    ev.UserMessageSent: ConversationState._user,
    ev.RunStarted: ConversationState._run_started,
    ev.TextDelta: ConversationState._delta,
    ev.MessageCompleted: ConversationState._completed,
    ev.ToolStarted: ConversationState._tool_started,
    ev.ToolFinished: ConversationState._tool_finished,
    ev.RunFinished: ConversationState._run_finished,
    ev.ApprovalRequested: ConversationState._approval_requested,
    ev.ApprovalResolved: ConversationState._approval_resolved,
    ev.ClarifyRequested: ConversationState._clarify_requested,
    ev.ClarifyResolved: ConversationState._clarify_resolved,
    ev.AttachmentAdded: ConversationState._attachment,
    ev.ConversationRenamed: ConversationState._renamed,
    ev.ConversationUpdated: ConversationState._updated,
    ev.Notification: ConversationState._notification,
}
