"""Pheby v1 rendering, server to client: pure functions from the shared model to frames.

``RENDERERS`` is the one table from an event type to the function that
renders its broadcast frames as bytes (``render``: nothing for a type not in
it); ``REPLIES`` the one table from a command type to its direct reply
(``reply``: none when the broadcast answers). Text deltas are not in the
table: drafts go out paced (``pacing.py``), as ``delta_frame``. No I/O, no
state beyond what is passed in.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.errors import BridgeError
from bridge_core.push.model import Registered, RegisterPush, UnregisterPush
from bridge_core.model.wire import attachment_fields, dumps, iso

from .codec import PROTOCOL_VERSION

NOTHING: tuple = ()  # no frame


def own_request_id(e: Any) -> Optional[str]:
    """The request id of an event Pheby's own request caused (its ``origin``); other front ends' ids never show."""
    origin = e.origin
    if origin is not None and origin.surface == "pheby":
        return e.request_id
    return None


def _with_rid(frame: dict, request_id: Optional[str]) -> dict:
    if request_id is not None:
        frame["request_id"] = request_id
    return frame


# --- frames the protocol sends on its own ---------------------------------------------------


def error_frame(err: BridgeError, request_id: Optional[str], ts: float) -> dict:
    frame: dict = {"type": "error"}
    if request_id is not None:
        frame["request_id"] = request_id
    frame["error"] = {"code": err.code, "message": err.message[:500]}
    frame["ts"] = iso(ts)
    return frame


def ready_frame(ts: float, request_id: Optional[str] = None) -> dict:
    return _with_rid({"type": "ready", "protocol_version": PROTOCOL_VERSION, "server": "pheby", "ts": iso(ts)},
                     request_id)


def pong_frame(ts: float, request_id: Optional[str] = None) -> dict:
    return _with_rid({"type": "pong", "ts": iso(ts)}, request_id)


# --- broadcasts: one function per event type ----------------------------------------------------


def attachment_dict(a: ev.Attachment) -> dict:
    return attachment_fields(a, stamp=iso)


def approval_request_frame(e: ev.ApprovalRequested) -> dict:
    return {
        "type": "approval.request",
        "approval_id": e.approval_id,
        "session_key": e.session_key,
        "conversation_id": e.conversation_id,
        "run_id": e.run_id,
        "command": e.command,
        "description": e.description,
        "choices": list(e.choices),
        "ts": iso(e.ts),
    }


def clarify_request_frame(e: ev.ClarifyRequested) -> dict:
    return {
        "type": "clarify.request",
        "clarify_id": e.clarify_id,
        "session_key": e.session_key,
        "conversation_id": e.conversation_id,
        "run_id": e.run_id,
        "question": e.question,
        "choices": list(e.choices) if e.choices is not None else None,
        "allow_free_text": e.allow_free_text,
        "ts": iso(e.ts),
    }


def tool_frame(
    conversation_id: str,
    run_id: Optional[str],
    call_id: str,
    tool_name: str,
    status: str,
    ts: float,
    args: Any = None,
    duration_ms: Optional[int] = None,
    error: Optional[str] = None,
) -> dict:
    frame = {
        "type": "tool.event",
        "conversation_id": conversation_id,
        "run_id": run_id,
        "tool_call_id": call_id,
        "tool_name": tool_name,
        "status": status,
    }
    if status == "running":
        frame["args_redacted"] = args if args is not None else {}
    else:
        frame["duration_ms"] = duration_ms
    if status == "failed":
        frame["error"] = (error or "failed")[:500]
    frame["ts"] = iso(ts)
    return frame


def delta_frame(e: ev.TextDelta) -> dict:
    """A cumulative draft: the message's whole text so far (``pacing.py`` decides when one goes out)."""
    return {
        "type": "message.delta",
        "conversation_id": e.conversation_id,
        "message_id": e.message_id,
        "text": e.text,
        "ts": iso(e.ts),
    }


def _run_started(e: ev.RunStarted) -> list[bytes]:
    accepted = {"type": "run.accepted", "conversation_id": e.conversation_id, "run_id": e.run_id}
    start = {"type": "message.start", "conversation_id": e.conversation_id, "run_id": e.run_id,
             "message_id": e.message_id}
    return [dumps(_with_rid(accepted, own_request_id(e))), dumps(start)]


def _message_completed(e: ev.MessageCompleted) -> list[bytes]:
    frame = {"type": "message.complete", "conversation_id": e.conversation_id, "message_id": e.message_id,
             "text": e.text, "ts": iso(e.ts)}
    if e.kind == "notice":
        frame["kind"] = "notice"
    return [dumps(frame)]


def completion_at_end(e: ev.RunFinished, message_id: str, text: str) -> bytes:
    """The ``message.complete`` of a run's message rendered at the run's end (``protocol.Turns``: its own
    completion never reached this node), stamped with the end's time."""
    return _message_completed(ev.MessageCompleted(conversation_id=e.conversation_id, message_id=message_id,
                                                  text=text, run_id=e.run_id, ts=e.ts))[0]


def _run_finished(e: ev.RunFinished) -> list[bytes]:
    frame = {"type": "run.finished", "conversation_id": e.conversation_id, "run_id": e.run_id, "status": e.status}
    if e.status == "failed":
        frame["error"] = (e.error or "failed")[:500]
    return [dumps(_with_rid(frame, own_request_id(e)))]


def _tool_started(e: ev.ToolStarted) -> list[bytes]:
    return [dumps(tool_frame(e.conversation_id, e.run_id, e.call_id, e.tool_name, "running", e.ts, args=e.args))]


def _tool_finished(e: ev.ToolFinished) -> list[bytes]:
    return [dumps(tool_frame(e.conversation_id, e.run_id, e.call_id, e.tool_name, e.status, e.ts,
                             duration_ms=e.duration_ms, error=e.error))]


def _approval_resolved(e: ev.ApprovalResolved) -> list[bytes]:
    frame = {"type": "approval.resolved", "approval_id": e.approval_id, "choice": e.choice, "accepted": e.accepted,
             "conversation_id": e.conversation_id, "decided_by": e.decided_by, "surface": e.surface,
             "ts": iso(e.ts)}
    return [dumps(_with_rid(frame, own_request_id(e)))]


def _clarify_resolved(e: ev.ClarifyResolved) -> list[bytes]:
    frame = {"type": "clarify.resolved", "clarify_id": e.clarify_id, "accepted": e.accepted,
             "response": e.response, "conversation_id": e.conversation_id, "decided_by": e.decided_by,
             "surface": e.surface, "ts": iso(e.ts)}
    return [dumps(_with_rid(frame, own_request_id(e)))]


def _attachment_added(e: ev.AttachmentAdded) -> list[bytes]:
    return [dumps({"type": "attachment.added", "conversation_id": e.conversation_id,
                   "attachment": attachment_dict(e.attachment), "ts": iso(e.ts)})]


def notification_frames(e: ev.Notification) -> list[dict]:
    """Unsolicited output (a cron delivery, a background completion) is conversation content.

    It arrives as ``message.start`` then ``message.complete`` without ``kind``
    (the spec's "Unsolicited messages"), and it is in the conversation's
    history. Only a gateway lifecycle notice (a diagnostic, or one that belongs
    to no conversation) is ``kind: "notice"``, which a client may ignore.
    """
    complete = {
        "type": "message.complete",
        "conversation_id": e.conversation_id,
        "message_id": e.message_id,
        "text": e.text,
        "ts": iso(e.ts),
    }
    if e.category == "diagnostic" or e.conversation_id is None:
        complete["kind"] = "notice"
        return [complete]
    return [{"type": "message.start", "conversation_id": e.conversation_id, "message_id": e.message_id}, complete]


def _notification(e: ev.Notification) -> list[bytes]:
    return [dumps(f) for f in notification_frames(e)]


def _conversation_updated(e: Any) -> list[bytes]:
    return [dumps({"type": "conversation.updated", "conversation_id": e.conversation_id, "name": e.name})]


def _conversation_renamed(e: ev.ConversationRenamed) -> list[bytes]:
    return [dumps({"type": "conversation.renamed", "conversation_id": e.conversation_id, "name": e.name})]


def _conversation_deleted(e: ev.ConversationDeleted) -> list[bytes]:
    return [dumps({"type": "conversation.deleted", "conversation_id": e.conversation_id})]


def model_changed_frame(model, provider, scope, conversation_id, request_id) -> dict:
    frame = {"type": "model.changed", "model": model, "provider": provider, "scope": scope}
    if conversation_id is not None:
        frame["conversation_id"] = conversation_id
    return _with_rid(frame, request_id)


def reasoning_changed_frame(effort, scope, conversation_id, request_id) -> dict:
    frame = {"type": "reasoning.changed", "effort": effort, "scope": scope}
    if conversation_id is not None:
        frame["conversation_id"] = conversation_id
    return _with_rid(frame, request_id)


def yolo_changed_frame(enabled, scope, conversation_id, request_id) -> dict:
    frame = {"type": "yolo.changed", "enabled": enabled, "scope": scope}
    if conversation_id is not None:
        frame["conversation_id"] = conversation_id
    return _with_rid(frame, request_id)


RENDERERS: dict[type, Callable[[Any], list[bytes]]] = {
    ev.RunStarted: _run_started,
    ev.MessageCompleted: _message_completed,
    ev.RunFinished: _run_finished,
    ev.ToolStarted: _tool_started,
    ev.ToolFinished: _tool_finished,
    ev.ApprovalRequested: lambda e: [dumps(approval_request_frame(e))],
    ev.ApprovalResolved: _approval_resolved,
    ev.ClarifyRequested: lambda e: [dumps(clarify_request_frame(e))],
    ev.ClarifyResolved: _clarify_resolved,
    ev.AttachmentAdded: _attachment_added,
    ev.Notification: _notification,
    ev.ConversationCreated: _conversation_updated,
    ev.ConversationUpdated: _conversation_updated,
    ev.ConversationRenamed: _conversation_renamed,
    ev.ConversationDeleted: _conversation_deleted,
    ev.ModelChanged: lambda e: [dumps(model_changed_frame(e.model, e.provider, e.scope, e.conversation_id, None))],
    ev.ReasoningChanged: lambda e: [dumps(reasoning_changed_frame(e.effort, e.scope, e.conversation_id, None))],
    ev.YoloChanged: lambda e: [dumps(yolo_changed_frame(e.enabled, e.scope, e.conversation_id, None))],
    # TextDelta: paced drafts (delta_frame); UserMessageSent, InterimMessage, ToolProgress: no Pheby frame
}


def render(e: Any) -> Sequence[bytes]:
    """The broadcast frames (encoded) of one shared event; none when Pheby has no frame for it."""
    fn = RENDERERS.get(type(e))
    return fn(e) if fn is not None else NOTHING


# --- direct replies: one function per command type ----------------------------------------------


def conversation_summary(c: Any) -> dict:
    """A ``state.ConversationState`` in ``conversation.snapshot``."""
    return {
        "conversation_id": c.conversation_id,
        "name": c.name,
        "session_id": c.session_id,
        "last_active": iso(c.last_active),
        "source": c.source,
    }


def history_frame(s: Any, request_id: Optional[str]) -> dict:
    """``conversation.history`` of a snapshot (``Bridge.snapshot``'s: conversation, messages, attachments,
    run, tools, approvals, clarifications)."""
    run = s.run
    return _with_rid(
        {
            "type": "conversation.history",
            "conversation_id": s.conversation.conversation_id,
            "messages": [
                {"message_id": m.message_id, "role": m.role, "text": m.text, "ts": iso(m.ts)} for m in s.messages
            ],
            "attachments": [attachment_dict(a) for a in s.attachments],
            "run": None
            if run is None
            else {
                "run_id": run.run_id,
                "status": "running",
                "message_id": run.message_id,
                "text": run.text,
                "started_at": iso(run.started_at),
            },
            "tools": [
                {
                    "tool_call_id": t.call_id,
                    "tool_name": t.tool_name,
                    "run_id": t.run_id,
                    "status": t.status,
                    "args_redacted": t.args if t.args is not None else {},
                    "duration_ms": t.duration_ms,
                    "error": t.error,
                    "ts": iso(t.ts),
                }
                for t in s.tools
            ],
            "approvals": [approval_request_frame(a) for a in s.approvals],
            "clarifications": [clarify_request_frame(c) for c in s.clarifications],
        },
        request_id,
    )


def models_frame(m: Any, request_id: Optional[str], ts: float) -> dict:
    """``models.snapshot`` of an agent's ``ModelsSnapshot``."""
    return _with_rid(
        {
            "type": "models.snapshot",
            "providers": [
                {
                    "slug": p.slug,
                    "name": p.name,
                    "is_current": p.is_current,
                    "models": list(p.models),
                    "total_models": p.total_models if p.total_models is not None else len(p.models),
                }
                for p in m.providers
            ],
            "current_model": m.current_model,
            "current_provider": m.current_provider,
            "scope": m.scope,
            "supported_reasoning_efforts": [e for e in m.supported_reasoning_efforts if e != "none"],
            "ts": iso(ts),
        },
        request_id,
    )


def model_current_frame(m: Any, request_id: Optional[str], ts: float) -> dict:
    """``model.current`` of an agent's ``ModelCurrent``."""
    return _with_rid(
        {"type": "model.current", "model": m.model, "provider": m.provider, "scope": m.scope,
         "conversation_id": m.conversation_id, "ts": iso(ts)},
        request_id,
    )


def reasoning_snapshot_frame(r: Any, request_id: Optional[str], ts: float) -> dict:
    """``reasoning.snapshot`` of an agent's ``ReasoningSnapshot``."""
    return _with_rid(
        {"type": "reasoning.snapshot", "effort": r.effort, "enabled": r.enabled, "scope": r.scope,
         "conversation_id": r.conversation_id, "supported_efforts": list(r.supported_efforts), "ts": iso(ts)},
        request_id,
    )


def _yolo_snapshot(result: Any, rid: Optional[str], ts: float) -> dict:
    return _with_rid({"type": "yolo.snapshot", "enabled": result.enabled, "scope": result.scope,
                      "conversation_id": result.conversation_id, "ts": iso(ts)}, rid)


def _push_reply(kind: str) -> Callable[[Any, Optional[str], float], dict]:
    def reply_(result: Any, rid: Optional[str], ts: float) -> dict:
        assert isinstance(result, Registered)
        return _with_rid({"type": kind, "subscription_id": result.subscription_id}, rid)

    return reply_


# command type -> (the bridge's result, the request id, now) -> the reply frame
REPLIES: dict[type, Callable[[Any, Optional[str], float], dict]] = {
    cmd.ListConversations: lambda r, rid, ts: _with_rid(
        {"type": "conversation.snapshot", "conversations": [conversation_summary(c) for c in r]}, rid),
    cmd.CreateConversation: lambda r, rid, ts: _with_rid(
        {"type": "conversation.created", "conversation_id": r.conversation_id, "name": r.name}, rid),
    cmd.RenameConversation: lambda r, rid, ts: _with_rid(
        {"type": "conversation.renamed", "conversation_id": r.conversation_id, "name": r.name}, rid),
    cmd.DeleteConversation: lambda r, rid, ts: _with_rid({"type": "conversation.deleted", "conversation_id": r}, rid),
    cmd.OpenConversation: lambda r, rid, ts: history_frame(r, rid),
    cmd.ListModels: models_frame,
    cmd.CurrentModel: model_current_frame,
    cmd.SetModel: lambda r, rid, ts: model_changed_frame(r.model, r.provider, r.scope, r.conversation_id, rid),
    cmd.CurrentReasoning: reasoning_snapshot_frame,
    cmd.SetReasoning: lambda r, rid, ts: reasoning_changed_frame(r.effort, r.scope, r.conversation_id, rid),
    cmd.CurrentYolo: _yolo_snapshot,
    cmd.SetYolo: lambda r, rid, ts: yolo_changed_frame(r.enabled, r.scope, r.conversation_id, rid),
    RegisterPush: _push_reply("push.registered"),
    UnregisterPush: _push_reply("push.unregistered"),
    # chat.send, run.cancel, approval.respond, clarify.respond: the broadcast answers
}  # fmt: skip


def reply(command: Any, result: Any, ts: float) -> Optional[bytes]:
    """The direct reply to ``command`` given the bridge's result, encoded (None: the broadcast is the reply)."""
    fn = REPLIES.get(type(command))
    if fn is None:
        return None
    return dumps(fn(result, getattr(command, "request_id", None), ts))
