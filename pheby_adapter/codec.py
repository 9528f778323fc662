"""Pheby v1 codec, client to server: pure functions from wire dicts to the shared model.

``decode_request`` turns a client frame (already a dict) into a shared
command (or a Hello / Ping marker). The way back, events and replies to
frames, is ``render.py``; the per-connection rules are ``protocol.py``.
No I/O, no state beyond what is passed in.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import attrs

from bridge_core.model import commands as cmd
from bridge_core.model.errors import BadRequest, InvalidJson, UnknownType
from bridge_core.model.limits import HISTORY_CAP, check_text
from bridge_core.push.model import RegisterPush, UnregisterPush
from bridge_core.model.wire import prepare_hooks, strict_converter, structure

PROTOCOL_VERSION = 1
MAX_FRAME = 2 * 1024 * 1024
HELLO_DEADLINE = 10.0
LOCKOUT_FAILS = 5
LOCKOUT_WINDOW = 60.0

CLIENT_TYPES = (
    "hello", "ping", "conversation.list", "conversation.open", "conversation.create",
    "conversation.rename", "conversation.delete", "chat.send", "run.cancel", "approval.respond",
    "clarify.respond", "models.list", "model.set", "models.current", "reasoning.set",
    "reasoning.current", "yolo.set", "yolo.current",
)  # fmt: skip
# the bridge's extension frames (docs/pheby.md, "Push"): an app that never sends them sees nothing new
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
    check_text(w.text)  # before anything runs: too_large, then the emptiness
    if not w.text.strip():
        raise BadRequest("text must not be empty")
    return cmd.SendMessage(text=w.text, conversation_id=w.conversation_id, request_id=w.request_id)


def _clarify(w: _ClarifyRespond) -> cmd.AnswerClarify:
    check_text(w.response, "Response")
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
