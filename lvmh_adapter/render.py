"""Shared events of the bridge's own conversations as lvmh session events (pure).

The shared-event mapping, lvmh column (docs/architecture.md names each front end's renderer):

| shared event | lvmh events |
|---|---|
| UserMessageSent | ``message_start`` + ``message_end`` role user |
| RunStarted | ``agent_start``, ``message_start`` assistant |
| TextDelta (text) | ``message_update {delta}`` (never persisted; reasoning deltas dropped) |
| InterimMessage | ``message_end`` assistant (intermediate); later text opens a new message |
| MessageCompleted | ``message_end`` assistant (``kind: "notice"`` for notices) |
| ToolStarted/Progress/Finished | ``tool_execution_start`` / ``_update`` / ``_end`` |
| RunFinished | ``agent_end {usage, status, error?}``, ``agent_settled {aborted}`` |
| Approval*/Clarify*/AttachmentAdded/Notification | extensions ``approval_request``, ``approval_resolved``, ``clarify_request``, ``clarify_resolved``, ``attachment_added``, ``notification`` |
| ModelChanged (conversation scope) | ``session_info`` |

Conversation lifecycle events become ``session_list`` frames (book.py, stream.py), not events.
Every payload here is what follows the envelope (``v, sessionId, seq, ts, type``).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import draft_message_id

Rendered = list[tuple[str, dict]]


def message(role: str, mid: str, text: Optional[str] = None, *, complete: bool = False) -> dict:
    if not complete:
        return {"role": role, "id": mid}
    return {"role": role, "id": mid, "text": text or "", "thinking": None, "toolCalls": [], "toolCallId": None}


def usage(u: Optional[ev.Usage]) -> dict:
    if u is None:
        return {}
    out: dict = {}
    if u.input_tokens is not None:
        out["inputTokens"] = u.input_tokens
    if u.output_tokens is not None:
        out["outputTokens"] = u.output_tokens
    if u.total_cost is not None:
        out["totalCost"] = u.total_cost
    return out


def attachment(a: ev.Attachment) -> dict:
    return {
        "id": a.attachment_id,
        "filename": a.filename,
        "mimeType": a.mime_type,
        "size": a.size,
        "kind": a.kind,
        "inlineImage": a.inline_image,
        "messageId": a.message_id,
        "url": f"/api/attachments/{a.attachment_id}",
        "createdAt": int(a.created_at * 1000),
        "expiresAt": int(a.expires_at * 1000) if a.expires_at is not None else None,
    }


class _Conv:
    __slots__ = ("open_id", "run_id", "draft_id", "parts", "restored", "held", "seen", "ended")

    def __init__(self) -> None:
        self.open_id: Optional[str] = None  # the assistant message currently open
        self.run_id: Optional[str] = None
        self.draft_id: Optional[str] = None
        self.parts = 0  # assistant messages opened in this run
        self.restored: Optional[OpenRun] = None  # a run rebuilt from stored events after a restart
        self.held: Optional[OpenRun] = None  # the tools and decisions the open run holds, as rendered here
        self.seen: Optional[str] = None  # the last run whose start this renderer saw or rebuilt (kept past its end)
        self.ended: Optional[str] = None  # the last run whose end this renderer rendered (or the store holds)


class OpenRun:
    """What a session's stored events leave open: a run, its message, tools and decisions (pure).

    Fed the persisted events of one session in seq order (``message_update`` is never
    stored and needs no feeding). Used after a restart, when nothing in memory knows
    that a run was cut short, to close it for every lvmh client (docs/conformance.md,
    lvmh, "Runs cut short").
    """

    __slots__ = ("running", "run_id", "messages", "open_id", "tools", "approvals", "clarifications")

    def __init__(self) -> None:
        self.running = False
        self.run_id: Optional[str] = None
        self.messages = 0  # assistant messages begun in this run
        self.open_id: Optional[str] = None
        self.tools: dict[str, str] = {}  # toolCallId -> toolName, started and not ended
        self.approvals: list[str] = []
        self.clarifications: list[str] = []

    @property
    def open(self) -> bool:
        return self.running or self.open_id is not None or bool(self.tools)

    def feed(self, etype: str, obj: dict) -> None:
        if etype == "agent_start":
            self.__init__()  # type: ignore[misc]
            self.running = True
            rid = obj.get("runId")
            self.run_id = rid if isinstance(rid, str) else None
        elif etype == "agent_settled":
            self.__init__()  # type: ignore[misc]
        elif etype == "message_start" or etype == "message_end":
            msg = obj.get("message")
            if not isinstance(msg, dict) or msg.get("role") != "assistant" or not isinstance(msg.get("id"), str):
                return
            if etype == "message_start":
                self.open_id = msg["id"]
                self.messages += 1
            elif msg["id"] == self.open_id:
                self.open_id = None
        elif etype == "tool_execution_start" or etype == "tool_execution_end":
            call = obj.get("toolCallId")
            if not isinstance(call, str):
                return
            if etype == "tool_execution_start":
                name = obj.get("toolName")
                self.tools[call] = name if isinstance(name, str) else "tool"
            else:
                self.tools.pop(call, None)
        elif etype in _DECISION_EVENTS:
            key, table, opens = _DECISION_EVENTS[etype]
            did = obj.get(key)
            if isinstance(did, str):
                pending = getattr(self, table)
                if opens:
                    pending.append(did)
                elif did in pending:
                    pending.remove(did)

    def closing(self, reason: str, *, text: str = "") -> Rendered:
        """The events that close what is open: the message (with ``text``), tools, decisions.

        The run's own end (``agent_end``/``agent_settled``) is not included: the caller
        renders it (a bridge conversation's ``RunFinished``) or adds it (``settle``).
        """
        out: Rendered = []
        if self.open_id is not None:
            out.append(("message_end", {"message": message("assistant", self.open_id, text, complete=True),
                                        "reason": reason}))
        for call, name in self.tools.items():
            out.append(("tool_execution_end", {"toolCallId": call, "toolName": name, "isError": True,
                                               "resultPreview": "", "status": "failed", "error": reason}))
        for aid in self.approvals:
            out.append(("approval_resolved", {"approvalId": aid, "choice": "deny", "accepted": False,
                                              "decidedBy": reason, "surface": None, "reason": reason}))
        for cid in self.clarifications:
            out.append(("clarify_resolved", {"clarifyId": cid, "response": None, "accepted": False,
                                             "decidedBy": reason, "surface": None}))
        self.open_id = None
        self.tools = {}
        self.approvals = []
        self.clarifications = []
        return out

    def settle(self, reason: str) -> Rendered:
        """Close everything and end the run as aborted (a session whose agent never came back)."""
        out = self.closing(reason)
        out.append(("agent_settled", {"aborted": True, "reason": reason}))
        self.__init__()  # type: ignore[misc]
        return out


# lvmh decision event type -> (id field, OpenRun list, opens it)
_DECISION_EVENTS = {
    "approval_request": ("approvalId", "approvals", True),
    "approval_resolved": ("approvalId", "approvals", False),
    "clarify_request": ("clarifyId", "clarifications", True),
    "clarify_resolved": ("clarifyId", "clarifications", False),
}

RESTART = "restart"  # decidedBy / reason of what a restart cut short


class Renderer:
    """Per-conversation rendering state (which assistant message is open)."""

    def __init__(self, session_info: Callable[[str], dict]):
        self._convs: dict[str, _Conv] = {}
        self._session_info = session_info

    def forget(self, cid: str) -> None:
        self._convs.pop(cid, None)

    def restore(self, cid: str, run: OpenRun) -> None:
        """After a restart: the conversation's run that stored events show open (``run.open``).

        Its ``RunFinished`` (the core reports runs a restart interrupted) then closes the
        open message, and what only these events know (decisions and tools the core's
        memory lost with the old process) is closed with it (``_run_finished``).
        """
        self.rebuild(cid, run.run_id or "", run)
        self._conv(cid).restored = run

    def rebuild(self, cid: str, run_id: str, run: Optional[OpenRun], ended: bool = False) -> None:
        """Run ``run_id`` of ``cid`` as its stored events leave it (``run``; None: the store does not show
        it open; ``ended``: the store holds its end): the run and open message a node that rendered it from
        its start holds, so what this renderer renders next is the same on every node. The run's first
        message has its draft id (``_run_started``), later parts are numbered from it; the tools and decisions
        it holds open are those a node that rendered it from its start holds (``held``)."""
        c = self._conv(cid)
        c.seen = run_id
        if ended:
            c.ended = run_id
        if run is None:
            return
        c.run_id = run.run_id
        c.open_id = run.open_id
        c.parts = run.messages
        c.draft_id = draft_message_id(run.run_id) if run.run_id is not None else None
        run.open_id = None  # the renderer's own closing covers the message
        c.held = run

    def completed_before_end(self, cid: str, run_id: str) -> None:
        """Run ``run_id``'s end is next: its open message counts as completed, so the end renders no
        ``message_end`` of it (several nodes: book.py ``on_event``). The completion always comes before a
        run's end on the bus (``Bridge.close_run``): a message still open here at the end is one whose
        completion this node missed (its delivery failed: the store unreachable as a node restarted, or the
        store read by ``_rebuild`` lacked its rows, the origin committing them), rendered and stored under the
        completion's seqs by the nodes that got it. Closed again by the end it was a second ``message_end``
        under the end's seqs (``base + n * 256``), stored by this node alone, below the ``agent_settled``
        every browser had from the others, which no ``after=`` fetch returns (issue 41, chaos seeds 2019 and
        2018 ``view_diverged``)."""
        c = self._convs.get(cid)
        if c is not None and c.run_id == run_id:
            c.open_id = None

    def knows(self, cid: str, run_id: str) -> bool:
        """Whether this renderer saw run ``run_id`` of ``cid`` start (or rebuilt it), ended or not."""
        c = self._convs.get(cid)
        return c is not None and c.seen == run_id

    def restored(self, cid: str) -> Optional[str]:
        """The run id of a restored run not yet finished (``None`` when there is none)."""
        c = self._convs.get(cid)
        return c.run_id if c is not None and c.restored is not None else None

    def run_of(self, cid: str) -> Optional[str]:
        """The id of the run open in ``cid`` (None between runs)."""
        c = self._convs.get(cid)
        return c.run_id if c is not None else None

    def open_message(self, cid: str) -> Optional[str]:
        """The id of the assistant message open in ``cid`` (None between messages)."""
        c = self._convs.get(cid)
        return c.open_id if c is not None else None

    def _conv(self, cid: str) -> _Conv:
        c = self._convs.get(cid)
        if c is None:
            c = self._convs[cid] = _Conv()
        return c

    def _open(self, c: _Conv, out: Rendered, mid: Optional[str] = None) -> str:
        if c.open_id is None:
            if mid is None:
                base = c.draft_id or "assistant"
                mid = base if c.parts == 0 else f"{base}-{c.parts}"
            c.parts += 1
            c.open_id = mid
            out.append(("message_start", {"message": message("assistant", mid)}))
        return c.open_id

    def render(self, e: Any) -> Rendered:
        fn = _RENDER.get(type(e))
        if fn is None:
            return []
        out: Rendered = []
        fn(self, e, out)
        c = self._convs.get(getattr(e, "conversation_id", None)) if self._convs else None
        if c is not None and c.held is not None:
            for etype, payload in out:  # what the core closes itself is not closed again
                if etype != "message_start" and etype != "message_end":
                    c.held.feed(etype, payload)
        return out

    # --- per event type ----------------------------------------------------------------------------

    def _user(self, e: ev.UserMessageSent, out: Rendered) -> None:
        out.append(("message_start", {"message": message("user", e.message_id)}))
        out.append(("message_end", {"message": message("user", e.message_id, e.text, complete=True)}))

    def _run_started(self, e: ev.RunStarted, out: Rendered) -> None:
        c = self._conv(e.conversation_id)
        c.run_id, c.draft_id, c.parts, c.open_id, c.seen = e.run_id, e.message_id, 0, None, e.run_id
        c.held = OpenRun()
        payload: dict = {"runId": e.run_id}
        if e.model:
            payload["model"] = e.model
        out.append(("agent_start", payload))
        self._open(c, out, e.message_id)

    def _delta(self, e: ev.TextDelta, out: Rendered) -> None:
        if e.kind != "text":
            return
        c = self._conv(e.conversation_id)
        if e.run_id is not None and e.run_id == c.seen and e.run_id != c.run_id:
            return  # its run ended here (or the store shows it ended: _rebuild): delivered again, as _completed
        self._open(c, out)
        out.append(("message_update", {"delta": e.delta}))

    def _interim(self, e: ev.InterimMessage, out: Rendered) -> None:
        c = self._conv(e.conversation_id)
        mid = self._open(c, out)
        out.append(("message_end", {"message": message("assistant", mid, e.text, complete=True), "interim": True}))
        c.open_id = None

    def _completed(self, e: ev.MessageCompleted, out: Rendered) -> None:
        c = self._conv(e.conversation_id)
        if e.run_id is not None and e.run_id == c.seen and e.run_id != c.run_id:
            return  # its run ended here, its message with it (the core completes it first): delivered again
        if e.run_id is None or e.run_id != c.run_id:
            mid = e.message_id  # a notice outside any run
            out.append(("message_start", {"message": message("assistant", mid)}))
        else:
            mid = self._open(c, out)
        payload: dict = {"message": message("assistant", mid, e.text, complete=True)}
        if e.kind != "normal":
            payload["kind"] = e.kind
        out.append(("message_end", payload))
        if e.run_id is not None and e.run_id == c.run_id:
            c.open_id = None

    def _tool_started(self, e: ev.ToolStarted, out: Rendered) -> None:
        out.append(("tool_execution_start", {"toolCallId": e.call_id, "toolName": e.tool_name, "args": e.args}))

    def _tool_progress(self, e: ev.ToolProgress, out: Rendered) -> None:
        out.append(("tool_execution_update", {"toolCallId": e.call_id, "toolName": e.tool_name, "partial": e.partial}))

    def _tool_finished(self, e: ev.ToolFinished, out: Rendered) -> None:
        payload: dict = {
            "toolCallId": e.call_id,
            "toolName": e.tool_name,
            "isError": e.status != "completed",
            "resultPreview": e.result_preview[:2048],
            "status": e.status,
        }
        if e.duration_ms is not None:
            payload["durationMs"] = e.duration_ms
        if e.error:
            payload["error"] = e.error
        out.append(("tool_execution_end", payload))

    def _run_finished(self, e: ev.RunFinished, out: Rendered) -> None:
        c = self._conv(e.conversation_id)
        again = e.run_id is not None and e.run_id == c.ended  # its end rendered here already, or stored (_rebuild)
        c.ended = e.run_id
        if again:  # one end per run, however many arrive (read back, delivered again, a restart's close)
            if c.run_id == e.run_id:  # (restored after its end was rendered: closed, nothing rendered)
                c.open_id = c.run_id = c.draft_id = c.restored = c.held = None
            return
        if c.open_id is not None and c.run_id == e.run_id:
            # the run ended inside a message that was never completed: close it with what was said
            out.append(("message_end", {"message": message("assistant", c.open_id, e.text, complete=True)}))
        if c.held is not None and c.run_id == e.run_id and (c.restored is not None or e.error == ev.RUN_INTERRUPTED):
            # what a restart cut short that the core no longer knows: an interrupted run's, on every node alike (a
            # node that restored the run alone closing it stored rows no browser elsewhere got: chaos seed 2304)
            out.extend(c.held.closing(RESTART))
        c.open_id = c.run_id = c.draft_id = None
        c.restored = c.held = None
        end: dict = {"usage": usage(e.usage), "status": e.status, "runId": e.run_id}
        if e.error:
            end["error"] = e.error
        out.append(("agent_end", end))
        out.append(("agent_settled", {"aborted": e.status == "cancelled"}))

    def _approval_requested(self, e: ev.ApprovalRequested, out: Rendered) -> None:
        out.append(
            (
                "approval_request",
                {
                    "approvalId": e.approval_id,
                    "runId": e.run_id,
                    "command": e.command,
                    "description": e.description,
                    "choices": list(e.choices),
                    "deadline": int(e.deadline_ts * 1000) if e.deadline_ts is not None else None,
                },
            )
        )

    def _approval_resolved(self, e: ev.ApprovalResolved, out: Rendered) -> None:
        out.append(
            (
                "approval_resolved",
                {
                    "approvalId": e.approval_id,
                    "choice": e.choice,
                    "accepted": e.accepted,
                    "decidedBy": e.decided_by,
                    "surface": e.surface,
                    "reason": e.reason,
                },
            )
        )

    def _clarify_requested(self, e: ev.ClarifyRequested, out: Rendered) -> None:
        out.append(
            (
                "clarify_request",
                {
                    "clarifyId": e.clarify_id,
                    "runId": e.run_id,
                    "question": e.question,
                    "choices": list(e.choices) if e.choices is not None else None,
                    "allowFreeText": e.allow_free_text,
                },
            )
        )

    def _clarify_resolved(self, e: ev.ClarifyResolved, out: Rendered) -> None:
        out.append(
            (
                "clarify_resolved",
                {
                    "clarifyId": e.clarify_id,
                    "response": e.response,
                    "accepted": e.accepted,
                    "decidedBy": e.decided_by,
                    "surface": e.surface,
                },
            )
        )

    def _attachment(self, e: ev.AttachmentAdded, out: Rendered) -> None:
        out.append(("attachment_added", {"runId": e.run_id, "attachment": attachment(e.attachment)}))

    def _notification(self, e: ev.Notification, out: Rendered) -> None:
        out.append(
            (
                "notification",
                {
                    "messageId": e.message_id,
                    "title": e.title,
                    "text": e.text,
                    "category": e.category,
                    "source": e.source,
                    "requiresAttention": e.requires_attention,
                },
            )
        )

    def _model(self, e: ev.ModelChanged, out: Rendered) -> None:
        if e.conversation_id is not None:
            out.append(("session_info", {"session": self._session_info(e.conversation_id)}))


_RENDER: dict[type, Callable[[Renderer, Any, Rendered], None]] = {
    ev.UserMessageSent: Renderer._user,
    ev.RunStarted: Renderer._run_started,
    ev.TextDelta: Renderer._delta,
    ev.InterimMessage: Renderer._interim,
    ev.MessageCompleted: Renderer._completed,
    ev.ToolStarted: Renderer._tool_started,
    ev.ToolProgress: Renderer._tool_progress,
    ev.ToolFinished: Renderer._tool_finished,
    ev.RunFinished: Renderer._run_finished,
    ev.ApprovalRequested: Renderer._approval_requested,
    ev.ApprovalResolved: Renderer._approval_resolved,
    ev.ClarifyRequested: Renderer._clarify_requested,
    ev.ClarifyResolved: Renderer._clarify_resolved,
    ev.AttachmentAdded: Renderer._attachment,
    ev.Notification: Renderer._notification,
    ev.ModelChanged: Renderer._model,
}
