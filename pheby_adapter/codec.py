"""Pheby v1 codec: pure functions between wire dicts and the shared model.

``decode_request`` turns a client frame (already a dict) into a shared
command (or a Hello / Ping marker); ``render_event`` turns a shared event
into the broadcast frames; the ``reply_*`` functions build direct replies.
No I/O, no state beyond what is passed in.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import attrs

from bridge_core import commands as cmd
from bridge_core import events as ev
from bridge_core.agents.base import ModelCurrent, ModelsSnapshot, ReasoningSnapshot
from bridge_core.bridge import Snapshot
from bridge_core.errors import BadRequest, BridgeError, InvalidJson, TooLarge, UnknownType
from bridge_core.push import Registered, RegisterPush, UnregisterPush
from bridge_core.state import ConversationState
from bridge_core.attachments import attachment_fields
from bridge_core.wire import iso, prepare_hooks, strict_converter, structure

PROTOCOL_VERSION = 1
MAX_TEXT = 64_000
MAX_FRAME = 2 * 1024 * 1024
HISTORY_CAP = 500
HELLO_DEADLINE = 10.0
LOCKOUT_FAILS = 5
LOCKOUT_WINDOW = 60.0

CLIENT_TYPES = (
    "hello", "ping", "conversation.list", "conversation.open", "conversation.create",
    "conversation.rename", "conversation.delete", "chat.send", "run.cancel", "approval.respond",
    "clarify.respond", "models.list", "model.set", "models.current", "reasoning.set",
    "reasoning.current", "yolo.set", "yolo.current",
)  # fmt: skip
# the bridge's extension frames (README, "Extension frames"): an app that never sends them sees nothing new
EXTENSION_TYPES = ("push.register", "push.unregister")

_conv = strict_converter()


# --- wire request shapes (only what the server reads) -----------------------


@attrs.frozen
class Hello:
    secret: str
    protocol_version: int
    request_id: Optional[str] = None


@attrs.frozen
class Ping:
    request_id: Optional[str] = None


@attrs.frozen
class _ReqOnly:
    request_id: Optional[str] = None


@attrs.frozen
class _Open:
    conversation_id: str
    limit: int = 200
    request_id: Optional[str] = None


@attrs.frozen
class _Create:
    name: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _Rename:
    conversation_id: str
    name: str
    request_id: Optional[str] = None


@attrs.frozen
class _ConvId:
    conversation_id: str
    request_id: Optional[str] = None


@attrs.frozen
class _OptConvId:
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _ChatSend:
    conversation_id: str
    text: str
    request_id: Optional[str] = None


@attrs.frozen
class _Cancel:
    conversation_id: str
    run_id: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _ApprovalRespond:
    approval_id: str
    choice: str
    reason: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _ClarifyRespond:
    clarify_id: str
    response: str
    request_id: Optional[str] = None


@attrs.frozen
class _ModelSet:
    model: str
    provider: Optional[str] = None
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _ReasoningSet:
    effort: str
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _YoloSet:
    enabled: bool
    conversation_id: Optional[str] = None
    request_id: Optional[str] = None


@attrs.frozen
class _PushKeys:
    p256dh: str
    auth: str


@attrs.frozen
class _PushRegister:
    endpoint: str
    keys: _PushKeys
    request_id: Optional[str] = None


@attrs.frozen
class _PushUnregister:
    subscription_id: str
    request_id: Optional[str] = None


def _open(w: _Open) -> cmd.OpenConversation:
    if w.limit < 0:
        raise BadRequest("limit must not be negative")
    return cmd.OpenConversation(conversation_id=w.conversation_id, limit=min(w.limit, HISTORY_CAP), request_id=w.request_id)


def _chat(w: _ChatSend) -> cmd.SendMessage:
    if len(w.text) > MAX_TEXT:
        raise TooLarge(f"Text longer than {MAX_TEXT} characters")
    if not w.text.strip():
        raise BadRequest("text must not be empty")
    return cmd.SendMessage(text=w.text, conversation_id=w.conversation_id, request_id=w.request_id)


def _clarify(w: _ClarifyRespond) -> cmd.AnswerClarify:
    if len(w.response) > MAX_TEXT:
        raise TooLarge(f"Response longer than {MAX_TEXT} characters")
    return cmd.AnswerClarify(clarify_id=w.clarify_id, response=w.response, request_id=w.request_id)


# type -> (wire class, wire -> command)
_DECODERS: dict[str, tuple[type, Callable[[Any], Any]]] = {
    "hello": (Hello, lambda w: w),
    "ping": (Ping, lambda w: w),
    "conversation.list": (_ReqOnly, lambda w: cmd.ListConversations(request_id=w.request_id)),
    "conversation.open": (_Open, _open),
    "conversation.create": (_Create, lambda w: cmd.CreateConversation(name=w.name, request_id=w.request_id)),
    "conversation.rename": (
        _Rename,
        lambda w: cmd.RenameConversation(conversation_id=w.conversation_id, name=w.name, request_id=w.request_id),
    ),
    "conversation.delete": (
        _ConvId,
        lambda w: cmd.DeleteConversation(conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    "chat.send": (_ChatSend, _chat),
    "run.cancel": (
        _Cancel,
        lambda w: cmd.CancelRun(conversation_id=w.conversation_id, run_id=w.run_id, request_id=w.request_id),
    ),
    "approval.respond": (
        _ApprovalRespond,
        lambda w: cmd.ResolveApproval(
            approval_id=w.approval_id, choice=w.choice, reason=w.reason, request_id=w.request_id
        ),
    ),
    "clarify.respond": (_ClarifyRespond, _clarify),
    "models.list": (_OptConvId, lambda w: cmd.ListModels(conversation_id=w.conversation_id, request_id=w.request_id)),
    "models.current": (
        _OptConvId,
        lambda w: cmd.CurrentModel(conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    "model.set": (
        _ModelSet,
        lambda w: cmd.SetModel(
            model=w.model, provider=w.provider, conversation_id=w.conversation_id, request_id=w.request_id
        ),
    ),
    "reasoning.current": (
        _OptConvId,
        lambda w: cmd.CurrentReasoning(conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    "reasoning.set": (
        _ReasoningSet,
        lambda w: cmd.SetReasoning(effort=w.effort, conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    "yolo.current": (
        _OptConvId,
        lambda w: cmd.CurrentYolo(conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    "yolo.set": (
        _YoloSet,
        lambda w: cmd.SetYolo(enabled=w.enabled, conversation_id=w.conversation_id, request_id=w.request_id),
    ),
    # extensions (docs/push.md): a Web Push / UnifiedPush endpoint for when the app is closed
    "push.register": (
        _PushRegister,
        lambda w: RegisterPush(endpoint=w.endpoint, p256dh=w.keys.p256dh, auth=w.keys.auth, request_id=w.request_id),
    ),
    "push.unregister": (
        _PushUnregister,
        lambda w: UnregisterPush(subscription_id=w.subscription_id, request_id=w.request_id),
    ),
}


def frame_type(frame: dict) -> str:
    t = frame.get("type")
    if not isinstance(t, str) or not t:
        raise InvalidJson("Frame has no string type")
    return t


def request_id_of(frame: Any) -> Optional[str]:
    if isinstance(frame, dict):
        rid = frame.get("request_id")
        if isinstance(rid, str):
            return rid[:200]
    return None


def prepare() -> None:
    """At the front end's start: every request type's structure function made (wire.prepare_hooks)."""
    prepare_hooks(_conv, (wire_cls for wire_cls, _ in _DECODERS.values()))


def decode_request(frame: dict) -> Any:
    """A client frame -> Hello, Ping or a shared command. Raises BridgeError."""
    t = frame_type(frame)
    entry = _DECODERS.get(t)
    if entry is None:
        raise UnknownType(f"Unknown message type {t[:80]!r}")
    wire_cls, to_command = entry
    body = {k: v for k, v in frame.items() if k != "type"}
    return to_command(structure(_conv, body, wire_cls))


# --- server -> client ----------------------------------------------------------


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


def error_frame(err: BridgeError, request_id: Optional[str], ts: float) -> dict:
    frame: dict = {"type": "error"}
    if request_id is not None:
        frame["request_id"] = request_id
    frame["error"] = {"code": err.code, "message": err.message[:500]}
    frame["ts"] = iso(ts)
    return frame


def ready_frame(ts: float) -> dict:
    return {"type": "ready", "protocol_version": PROTOCOL_VERSION, "server": "pheby", "ts": iso(ts)}


def pong_frame(ts: float, request_id: Optional[str] = None) -> dict:
    return _with_rid({"type": "pong", "ts": iso(ts)}, request_id)


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
    return {
        "type": "message.delta",
        "conversation_id": e.conversation_id,
        "message_id": e.message_id,
        "text": e.text,
        "ts": iso(e.ts),
    }


def render_event(e: Any) -> list[dict]:
    """Broadcast frames for one shared event ([] when Pheby has no frame for it).

    Text deltas are rendered separately (``delta_frame``), lazily, so that a
    slow client gets only the newest cumulative draft.
    """
    t = type(e)
    if t is ev.RunStarted:
        return [
            _with_rid(
                {"type": "run.accepted", "conversation_id": e.conversation_id, "run_id": e.run_id}, own_request_id(e)
            ),
            {
                "type": "message.start",
                "conversation_id": e.conversation_id,
                "run_id": e.run_id,
                "message_id": e.message_id,
            },
        ]
    if t is ev.MessageCompleted:
        frame = {
            "type": "message.complete",
            "conversation_id": e.conversation_id,
            "message_id": e.message_id,
            "text": e.text,
            "ts": iso(e.ts),
        }
        if e.kind == "notice":
            frame["kind"] = "notice"
        return [frame]
    if t is ev.RunFinished:
        frame = {"type": "run.finished", "conversation_id": e.conversation_id, "run_id": e.run_id, "status": e.status}
        if e.status == "failed":
            frame["error"] = (e.error or "failed")[:500]
        return [_with_rid(frame, own_request_id(e))]
    if t is ev.ToolStarted:
        return [tool_frame(e.conversation_id, e.run_id, e.call_id, e.tool_name, "running", e.ts, args=e.args)]
    if t is ev.ToolFinished:
        return [
            tool_frame(
                e.conversation_id, e.run_id, e.call_id, e.tool_name, e.status, e.ts,
                duration_ms=e.duration_ms, error=e.error,
            )
        ]  # fmt: skip
    if t is ev.ApprovalRequested:
        return [approval_request_frame(e)]
    if t is ev.ApprovalResolved:
        return [
            _with_rid(
                {
                    "type": "approval.resolved",
                    "approval_id": e.approval_id,
                    "choice": e.choice,
                    "accepted": e.accepted,
                    "conversation_id": e.conversation_id,
                    "decided_by": e.decided_by,
                    "surface": e.surface,
                    "ts": iso(e.ts),
                },
                own_request_id(e),
            )
        ]
    if t is ev.ClarifyRequested:
        return [clarify_request_frame(e)]
    if t is ev.ClarifyResolved:
        return [
            _with_rid(
                {
                    "type": "clarify.resolved",
                    "clarify_id": e.clarify_id,
                    "accepted": e.accepted,
                    "response": e.response,
                    "conversation_id": e.conversation_id,
                    "decided_by": e.decided_by,
                    "surface": e.surface,
                    "ts": iso(e.ts),
                },
                own_request_id(e),
            )
        ]
    if t is ev.AttachmentAdded:
        return [
            {
                "type": "attachment.added",
                "conversation_id": e.conversation_id,
                "attachment": attachment_dict(e.attachment),
                "ts": iso(e.ts),
            }
        ]
    if t is ev.Notification:
        return notification_frames(e)
    if t is ev.ConversationCreated or t is ev.ConversationUpdated:
        return [{"type": "conversation.updated", "conversation_id": e.conversation_id, "name": e.name}]
    if t is ev.ConversationRenamed:
        return [{"type": "conversation.renamed", "conversation_id": e.conversation_id, "name": e.name}]
    if t is ev.ConversationDeleted:
        return [{"type": "conversation.deleted", "conversation_id": e.conversation_id}]
    if t is ev.ModelChanged:
        return [model_changed_frame(e.model, e.provider, e.scope, e.conversation_id, None)]
    if t is ev.ReasoningChanged:
        return [reasoning_changed_frame(e.effort, e.scope, e.conversation_id, None)]
    if t is ev.YoloChanged:
        return [yolo_changed_frame(e.enabled, e.scope, e.conversation_id, None)]
    return []


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


# --- direct replies -------------------------------------------------------------------


def conversation_summary(c: ConversationState) -> dict:
    return {
        "conversation_id": c.conversation_id,
        "name": c.name,
        "session_id": c.session_id,
        "last_active": iso(c.last_active),
        "source": c.source,
    }


def reply(command: Any, result: Any, ts: float) -> Optional[dict]:
    """The direct reply to ``command`` given the bridge's result (None: the broadcast is the reply)."""
    rid = getattr(command, "request_id", None)
    t = type(command)
    if t is cmd.ListConversations:
        return _with_rid({"type": "conversation.snapshot", "conversations": [conversation_summary(c) for c in result]}, rid)
    if t is cmd.CreateConversation:
        return _with_rid({"type": "conversation.created", "conversation_id": result.conversation_id, "name": result.name}, rid)
    if t is cmd.RenameConversation:
        return _with_rid({"type": "conversation.renamed", "conversation_id": result.conversation_id, "name": result.name}, rid)
    if t is cmd.DeleteConversation:
        return _with_rid({"type": "conversation.deleted", "conversation_id": result}, rid)
    if t is cmd.OpenConversation:
        return history_frame(result, rid)
    if t is cmd.ListModels:
        return models_frame(result, rid, ts)
    if t is cmd.CurrentModel:
        return model_current_frame(result, rid, ts)
    if t is cmd.SetModel:
        return model_changed_frame(result.model, result.provider, result.scope, result.conversation_id, rid)
    if t is cmd.CurrentReasoning:
        return reasoning_snapshot_frame(result, rid, ts)
    if t is cmd.SetReasoning:
        return reasoning_changed_frame(result.effort, result.scope, result.conversation_id, rid)
    if t is cmd.CurrentYolo:
        return _with_rid(
            {"type": "yolo.snapshot", "enabled": result.enabled, "scope": result.scope,
             "conversation_id": result.conversation_id, "ts": iso(ts)},
            rid,
        )  # fmt: skip
    if t is cmd.SetYolo:
        return yolo_changed_frame(result.enabled, result.scope, result.conversation_id, rid)
    if t is RegisterPush or t is UnregisterPush:
        assert isinstance(result, Registered)
        kind = "push.registered" if t is RegisterPush else "push.unregistered"
        return _with_rid({"type": kind, "subscription_id": result.subscription_id}, rid)
    return None  # chat.send, run.cancel, approval.respond, clarify.respond: the broadcast answers


def reply_covers(command: Any, event: Any) -> bool:
    """Does ``command``'s reply already tell its requester about ``event`` (so no broadcast to it)?

    Only ``conversation.delete``: the spec shows its reply alone, so the
    requester gets one ``conversation.deleted`` (with its request_id) and every
    other client one without.
    """
    return (
        type(event) is ev.ConversationDeleted
        and type(command) is cmd.DeleteConversation
        and command.conversation_id == event.conversation_id
    )


def history_frame(s: Snapshot, request_id: Optional[str]) -> dict:
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


def models_frame(m: ModelsSnapshot, request_id: Optional[str], ts: float) -> dict:
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


def model_current_frame(m: ModelCurrent, request_id: Optional[str], ts: float) -> dict:
    return _with_rid(
        {
            "type": "model.current",
            "model": m.model,
            "provider": m.provider,
            "scope": m.scope,
            "conversation_id": m.conversation_id,
            "ts": iso(ts),
        },
        request_id,
    )


def reasoning_snapshot_frame(r: ReasoningSnapshot, request_id: Optional[str], ts: float) -> dict:
    return _with_rid(
        {
            "type": "reasoning.snapshot",
            "effort": r.effort,
            "enabled": r.enabled,
            "scope": r.scope,
            "conversation_id": r.conversation_id,
            "supported_efforts": list(r.supported_efforts),
            "ts": iso(ts),
        },
        request_id,
    )

