"""Loomi wire codec: shared events -> frame bodies, client frames -> requests -> commands.

Pure functions, no I/O. A shared event is encoded ONCE into a *body*: the envelope without
``seq``/``event_id`` (``{"v":1,"ts":..,"type":..,"task_id":..,"run_id":..,"payload":{..}}``). Each
device's frame is that body with its own ``{"seq":N,"event_id":"e_N",`` spliced in front (``stamp``),
so fanning an event out to many devices never re-encodes JSON.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Union

import attrs
import cattrs
import orjson

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.errors import BadRequest, InvalidJson, UnknownType, VersionMismatch
from bridge_core.push.model import RegisterPush, UnregisterPush
from bridge_core.model.redact import fingerprint
from bridge_core.model.wire import attachment_fields, prepare_hooks, strict_converter

PROTOCOL_VERSION = 1
REPLAY_WINDOW = 512
MAX_REQUEST_ID = 128

# --- server -> client ------------------------------------------------------

_OPTS = orjson.OPT_NON_STR_KEYS
_dumps = orjson.dumps


def body(type_: str, payload: dict, *, task_id: Optional[str] = None, run_id: Optional[str] = None,
         ts: Optional[float] = None) -> bytes:
    """The envelope without seq/event_id, encoded once."""
    return orjson.dumps(
        {
            "v": PROTOCOL_VERSION,
            "ts": time.time() if ts is None else ts,
            "type": type_,
            "task_id": task_id,
            "run_id": run_id,
            "payload": payload,
        },
        option=_OPTS,
    )


SEQ_PREFIX = b'{"seq":%d,"event_id":"e_%d",'
SEQ_FRAME = SEQ_PREFIX + b"%b"  # the prefix and a tail, spliced in one step (no prefix object between)


def stamp(body_: bytes, seq: int) -> bytes:
    """Splice a device's ``seq`` and ``event_id`` into an encoded body (``body_[1:]`` drops its ``{``)."""
    return SEQ_PREFIX % (seq, seq) + body_[1:]


def stamp_tail(seq: int, tail: bytes) -> bytes:
    """A device's frame of a body without its ``{`` (as the replay rows store it): the same splice."""
    return SEQ_FRAME % (seq, seq, tail)


def mark_replayed(frame: bytes) -> bytes:
    """The original frame with ``"replayed": true`` added."""
    return frame[:-1] + b',"replayed":true}'


def frame(seq: int, type_: str, payload: dict, *, task_id: Optional[str] = None,
          run_id: Optional[str] = None) -> bytes:
    return stamp(body(type_, payload, task_id=task_id, run_id=run_id), seq)


def task_dict(conv: Any) -> dict:
    """A task object, as the bridge fixes its fields (from a bridge ConversationState)."""
    return {
        "task_id": conv.conversation_id,
        "title": conv.name,
        "status": conv.status,
        "created_at": conv.created_at,
        "updated_at": conv.updated_at,
        "preview": conv.preview,
        "source": conv.source,
    }


CHOICE_LABELS = {
    "once": ("Allow once", "primary"),
    "session": ("Allow for this session", "secondary"),
    "always": ("Always allow", "warning"),
    "deny": ("Deny", "danger"),
}


def approval_choices(choices) -> list[dict]:
    out = []
    for c in choices:
        label, style = CHOICE_LABELS.get(c, (str(c).replace("_", " ").capitalize(), "secondary"))
        out.append({"label": label, "choice": c, "style": style})
    return out


def attachment_dict(a: ev.Attachment) -> dict:
    return attachment_fields(a, with_conversation=False, path_key="url")


@attrs.define
class Extra:
    """What a renderer may need beyond the event itself (looked up by the server)."""

    conv: Any = None  # the bridge's ConversationState, when the event has one
    final_text: Optional[str] = None  # the run's last completed message (RunFinished)


def _run_started(e: ev.RunStarted, x: Extra) -> list[bytes]:
    # "loomi" for a run a Loomi request started; as it always was, only one that carried a request_id
    origin = e.origin
    surface = "loomi" if origin is not None and origin.surface == "loomi" and e.request_id is not None else None
    session_id = getattr(x.conv, "session_id", None) or e.conversation_id
    payload = {
        "run_id": e.run_id,
        "task_id": e.conversation_id,
        "session_id": session_id,
        "surface": surface,
        "model": e.model,
        "provider": e.provider,
        "started_at": e.ts,
        "title": e.title,
    }
    return [body("run.started", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


# run.delta's tail (its body without the ``{``): the one body made per streamed delta, spliced from its
# values' JSON, the envelope of ``body`` key for key (tests/loomi/test_codec.py holds them equal)
_DELTA_TAIL = (b'"v":%d,"ts":%%b,"type":"run.delta","task_id":%%b,"run_id":%%b,"payload":{"run_id":%%b,'
               b'"text":%%b,"kind":%%b,"iteration":%%d}}' % PROTOCOL_VERSION)


# a run's _DELTA_TAIL with its ids, kind and iteration spliced in (each % of their JSON doubled), %b left for a
# delta's ts and text: run_id -> (conversation_id, kind, iteration, template), at most 1024 runs (then anew)
_run_tails: dict[str, tuple[str, str, int, bytes]] = {}


def delta_tail(e: ev.TextDelta) -> bytes:
    """``_delta``'s body without its ``{`` (what each device's seq is spliced in front of)."""
    iteration = e.iteration
    if type(iteration) is not int:  # what %d would write otherwise differs from JSON's (a bool)
        return _delta_body(e)[1:]
    got = _run_tails.get(e.run_id)
    if got is None or got[0] != e.conversation_id or got[1] != e.kind or got[2] != iteration:
        if len(_run_tails) >= 1024:
            _run_tails.clear()
        c, r, k = (_dumps(v).replace(b"%", b"%%") for v in (e.conversation_id, e.run_id, e.kind))
        got = _run_tails[e.run_id] = (e.conversation_id, e.kind, iteration,
                                      _DELTA_TAIL % (b"%b", c, r, r, b"%b", k, iteration))
    return got[3] % (_dumps(e.ts), _dumps(e.delta))


def _delta_body(e: ev.TextDelta) -> bytes:
    payload = {"run_id": e.run_id, "text": e.delta, "kind": e.kind, "iteration": e.iteration}
    return body("run.delta", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)


def _delta(e: ev.TextDelta, x: Extra) -> list[bytes]:
    return [b"{" + delta_tail(e)]


def _interim(e: ev.InterimMessage, x: Extra) -> list[bytes]:
    payload = {"run_id": e.run_id, "text": e.text, "already_streamed": e.already_streamed}
    return [body("run.interim", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _message(e: ev.MessageCompleted, x: Extra) -> list[bytes]:
    if e.run_id is not None and e.kind == "normal":
        return []  # its text is carried by run.completed
    payload = {"category": "result", "title": "", "text": e.text, "source": "agent", "requires_attention": False}
    return [body("notification", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _tool_started(e: ev.ToolStarted, x: Extra) -> list[bytes]:
    payload = {
        "run_id": e.run_id,
        "iteration": e.iteration,
        "tool": e.tool_name,
        "preview": e.preview,
        "index": e.index,
        "call_id": e.call_id,
    }
    return [body("run.tool_started", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _tool_finished(e: ev.ToolFinished, x: Extra) -> list[bytes]:
    payload = {
        "run_id": e.run_id,
        "iteration": e.iteration,
        "tool": e.tool_name,
        "ok": e.status == "completed",
        "index": e.index,
        "call_id": e.call_id,
        "duration": None if e.duration_ms is None else e.duration_ms / 1000.0,
        "status": e.status,
        "error": e.error,
    }
    return [body("run.tool_finished", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _run_finished(e: ev.RunFinished, x: Extra) -> list[bytes]:
    text = e.text or x.final_text or ""
    completed = {
        "run_id": e.run_id,
        "status": e.status,
        "text": text,
        "error": e.error,
        "finished": e.status == "completed",
    }
    if e.usage is not None:
        completed["usage"] = attrs.asdict(e.usage)
    out = [body("run.completed", completed, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]
    if e.status == "failed" or e.error:
        failed = {"run_id": e.run_id, "error": e.error or "run failed", "status": "failed"}
        out.append(body("run.failed", failed, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts))
    return out


def _approval(e: ev.ApprovalRequested, x: Extra) -> list[bytes]:
    payload = {
        "approval_id": e.approval_id,
        "run_id": e.run_id,
        "task_id": e.conversation_id,
        "command": e.command,
        "description": e.description,
        "choices": approval_choices(e.choices),
        "smart_denied": e.smart_denied,
        "session_key_ref": fingerprint(e.session_key),
        "deadline_ts": e.deadline_ts,
    }
    return [body("approval.required", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


# the spec's decided_by set; the core's run-end reasons (cancelled, failed, restart...) are the agent's side
LOOMI_DECIDED_BY = frozenset({"local", "remote", "timeout", "agent"})


def decided_by(value: str) -> str:
    return value if value in LOOMI_DECIDED_BY else "agent"


def _approval_resolved(e: ev.ApprovalResolved, x: Extra) -> list[bytes]:
    payload = {
        "approval_id": e.approval_id,
        "choice": e.choice,
        "decided_by": decided_by(e.decided_by),
        "accepted": e.accepted,
        "surface": e.surface,
    }
    return [body("approval.resolved", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _clarify(e: ev.ClarifyRequested, x: Extra) -> list[bytes]:
    payload = {
        "clarify_id": e.clarify_id,
        "run_id": e.run_id,
        "task_id": e.conversation_id,
        "question": e.question,
        "choices": list(e.choices) if e.choices is not None else None,
        "allow_free_text": e.allow_free_text,
    }
    return [body("clarify.required", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _clarify_resolved(e: ev.ClarifyResolved, x: Extra) -> list[bytes]:
    payload = {"clarify_id": e.clarify_id, "response": e.response, "decided_by": decided_by(e.decided_by),
               "surface": e.surface}
    return [body("clarify.resolved", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _attachment(e: ev.AttachmentAdded, x: Extra) -> list[bytes]:
    payload = attachment_dict(e.attachment)
    payload["run_id"] = e.run_id
    return [body("attachment.added", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _notification(e: ev.Notification, x: Extra) -> list[bytes]:
    payload = {
        "category": e.category,
        "title": e.title,
        "text": e.text,
        "source": e.source,
        "requires_attention": e.requires_attention,
    }
    return [body("notification", payload, task_id=e.conversation_id, ts=e.ts)]


def _user_message(e: ev.UserMessageSent, x: Extra) -> list[bytes]:
    payload = {"message_id": e.message_id, "role": "user", "text": e.text, "run_id": e.run_id}
    return [body("session.message", payload, task_id=e.conversation_id, run_id=e.run_id, ts=e.ts)]


def _task_changed(type_: str) -> Callable[[Any, Extra], list[bytes]]:
    def render(e: Any, x: Extra) -> list[bytes]:
        if x.conv is None:
            return []
        return [body(type_, {"task": task_dict(x.conv)}, task_id=e.conversation_id, ts=e.ts)]

    return render


def _task_deleted(e: ev.ConversationDeleted, x: Extra) -> list[bytes]:
    return [body("task.deleted", {"task_id": e.conversation_id}, task_id=e.conversation_id, ts=e.ts)]


RENDERERS: dict[type, Callable[[Any, Extra], list[bytes]]] = {
    ev.ConversationCreated: _task_changed("task.created"),
    ev.ConversationRenamed: _task_changed("task.updated"),
    ev.ConversationUpdated: _task_changed("task.updated"),
    ev.ConversationDeleted: _task_deleted,
    ev.UserMessageSent: _user_message,
    ev.RunStarted: _run_started,
    ev.TextDelta: _delta,
    ev.InterimMessage: _interim,
    ev.MessageCompleted: _message,
    ev.ToolStarted: _tool_started,
    ev.ToolFinished: _tool_finished,
    ev.RunFinished: _run_finished,
    ev.ApprovalRequested: _approval,
    ev.ApprovalResolved: _approval_resolved,
    ev.ClarifyRequested: _clarify,
    ev.ClarifyResolved: _clarify_resolved,
    ev.AttachmentAdded: _attachment,
    ev.Notification: _notification,
    # ToolProgress and the settings events have no Loomi frame: dropped.
}


def render(event: Any, extra: Optional[Extra] = None) -> list[bytes]:
    """Encoded bodies (zero, one or two) for one shared event."""
    fn = RENDERERS.get(type(event))
    if fn is None:
        return []
    return fn(event, extra or Extra())


# --- client -> server ------------------------------------------------------


def _frozen(cls):
    return attrs.frozen(kw_only=True)(cls)


@_frozen
class DeviceInfo:
    model: Optional[str] = None
    os: Optional[str] = None
    app_version: Optional[str] = None
    name: Optional[str] = None


@_frozen
class Hello:
    protocol_version: Optional[int] = None
    token: Optional[str] = attrs.field(default=None, repr=False)
    device_id: Optional[str] = None
    credential: Optional[str] = attrs.field(default=None, repr=False)
    last_seq: Optional[int] = None
    device_info: Optional[DeviceInfo] = None


@_frozen
class Ping:
    pass


@_frozen
class Pong:
    pass


@_frozen
class SessionSend:
    text: str
    task_id: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class RunCancel:
    run_id: str
    request_id: Optional[str] = None


@_frozen
class RunPause:
    run_id: str
    request_id: Optional[str] = None


@_frozen
class RunResume:
    run_id: str
    request_id: Optional[str] = None


@_frozen
class ApprovalResolve:
    approval_id: str
    choice: str
    reason: Optional[str] = None
    request_id: Optional[str] = None


@_frozen
class ClarifyResolve:
    clarify_id: str
    response: str
    request_id: Optional[str] = None


@_frozen
class TaskList:
    request_id: Optional[str] = None
    limit: int = 50
    status_filter: Optional[tuple[str, ...]] = None


# extensions (docs/push.md, docs/loomi.md): a Web Push / UnifiedPush endpoint for when
# the app is closed; an app that never sends them sees nothing new
@_frozen
class PushKeys:
    p256dh: str
    auth: str


@_frozen
class PushRegister:
    endpoint: str
    keys: PushKeys
    request_id: Optional[str] = None


@_frozen
class PushUnregister:
    subscription_id: str
    request_id: Optional[str] = None


Request = Union[Hello, Ping, Pong, SessionSend, RunCancel, RunPause, RunResume, ApprovalResolve,
                ClarifyResolve, TaskList, PushRegister, PushUnregister]

REQUEST_TYPES: dict[str, type] = {
    "hello": Hello,
    "ping": Ping,
    "pong": Pong,
    "session.send": SessionSend,
    "run.cancel": RunCancel,
    "run.pause": RunPause,
    "run.resume": RunResume,
    "approval.resolve": ApprovalResolve,
    "clarify.resolve": ClarifyResolve,
    "task.list": TaskList,
    "push.register": PushRegister,
    "push.unregister": PushUnregister,
}
TYPE_OF: dict[type, str] = {v: k for k, v in REQUEST_TYPES.items()}
TASK_STATUSES = ("idle", "running", "waiting")


def _status_filter(value: Any, _: Any) -> Optional[tuple[str, ...]]:
    if value is None:
        return None
    if isinstance(value, str):
        items = [s.strip() for s in value.split(",") if s.strip()]
    elif isinstance(value, list) and all(isinstance(s, str) for s in value):
        items = list(value)
    else:
        raise TypeError("expected a string or a list of strings")
    for s in items:
        if s not in TASK_STATUSES:
            raise ValueError(f"status must be one of {', '.join(TASK_STATUSES)}")
    return tuple(items) or None


def make_converter() -> cattrs.Converter:
    conv = strict_converter()  # the shared strict scalars; Loomi adds its status filter
    conv.register_structure_hook(Optional[tuple[str, ...]], _status_filter)
    return conv


CONVERTER = make_converter()


def prepare() -> None:
    """At the front end's start: every request type's structure function made (wire.prepare_hooks)."""
    prepare_hooks(CONVERTER, REQUEST_TYPES.values())


@attrs.frozen
class ClientFrame:
    type: str
    payload: dict
    request_id: Optional[str]  # the raw request_id, when the payload had a string one


def parse_frame(data: Union[str, bytes]) -> ClientFrame:
    """Envelope of a client frame; raises InvalidJson / BadRequest / VersionMismatch."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidJson()
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise InvalidJson()
    v = obj.get("v", PROTOCOL_VERSION)
    if v != PROTOCOL_VERSION or isinstance(v, bool):
        raise VersionMismatch(f"Unsupported protocol version; this server speaks v{PROTOCOL_VERSION}")
    payload = obj.get("payload")
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise BadRequest("payload must be an object")
    rid = payload.get("request_id")
    return ClientFrame(type=obj["type"][:64], payload=payload, request_id=rid if isinstance(rid, str) else None)


def decode_request(f: ClientFrame) -> Any:
    """The typed request of a client frame; raises UnknownType / BadRequest."""
    cls = REQUEST_TYPES.get(f.type)
    if cls is None:
        raise UnknownType(f"Unknown type {f.type!r}")
    try:
        req = CONVERTER.structure(f.payload, cls)
    except Exception as exc:  # cattrs' ClassValidationError and friends
        if cls is Hello:  # never echo anything of a hello: it carries secrets
            raise BadRequest("Invalid hello payload")
        try:
            details = "; ".join(cattrs.transform_error(exc, path=f.type)[:3])
        except Exception:
            details = f.type
        raise BadRequest(f"Invalid payload: {details}")
    rid = getattr(req, "request_id", None)
    if rid is not None and (not rid or len(rid) > MAX_REQUEST_ID):
        raise BadRequest(f"request_id must be 1-{MAX_REQUEST_ID} characters")
    return req


def to_command(req: Any) -> Any:
    """The shared command of a (non-handshake) request."""
    t = type(req)
    rid = getattr(req, "request_id", None)
    if t is SessionSend:
        return cmd.SendMessage(text=req.text, conversation_id=req.task_id, request_id=rid)
    if t is RunCancel:
        return cmd.CancelRun(run_id=req.run_id, request_id=rid)
    if t is RunPause:
        return cmd.PauseRun(run_id=req.run_id, request_id=rid)
    if t is RunResume:
        return cmd.ResumeRun(run_id=req.run_id, request_id=rid)
    if t is ApprovalResolve:
        return cmd.ResolveApproval(approval_id=req.approval_id, choice=req.choice, reason=req.reason, request_id=rid)
    if t is ClarifyResolve:
        return cmd.AnswerClarify(clarify_id=req.clarify_id, response=req.response, request_id=rid)
    if t is TaskList:
        status = ",".join(req.status_filter) if req.status_filter else None
        return cmd.ListTasks(limit=max(0, min(req.limit, 500)), status_filter=status, request_id=rid)
    if t is PushRegister:
        return RegisterPush(endpoint=req.endpoint, p256dh=req.keys.p256dh, auth=req.keys.auth, request_id=rid)
    if t is PushUnregister:
        return UnregisterPush(subscription_id=req.subscription_id, request_id=rid)
    raise UnknownType(f"Unsupported request {TYPE_OF.get(t, t.__name__)}")


def result_of(req: Any, result: Any) -> Any:
    """The ``result`` of an ``ack`` for a request's core result."""
    t = type(req)
    if t in (SessionSend, RunResume):
        return {"task_id": result.conversation_id, "run_id": result.run_id}
    if t in (RunCancel, RunPause):
        return {"run_id": result}
    if t is ApprovalResolve:
        return {"approval_id": result.approval_id, "choice": result.choice, "decided_by": result.decided_by}
    if t is ClarifyResolve:
        return {"clarify_id": result.clarify_id, "response": result.response}
    if t is PushRegister or t is PushUnregister:
        return {"subscription_id": result.subscription_id}
    return None


def hello_ok(*, device_id: str, credential: Optional[str], server_name: str, server_version: str,
             truncated: bool, home_channel: Optional[str] = None) -> dict:
    payload: dict[str, Any] = {"device_id": device_id}
    if credential is not None:
        payload["credential"] = credential
    payload.update(
        server_name=server_name,
        server_version=server_version,
        protocol_version=PROTOCOL_VERSION,
        server_time=time.time(),
        truncated=truncated,
        home_channel=home_channel,
    )
    return payload
