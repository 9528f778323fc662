"""lvmh wire codec (pure): plugin and browser frames, session snapshots, REST inputs.

Decoders take the raw text of one frame (or a query/body) and return typed
values or raise ``FrameError``/``BadRequest``; nothing here does I/O.

A plugin event is stored and re-served as the JSON text it arrived in (the
"envelope+payload" object of the lvmh protocol), so the hot path parses each
frame once and never re-encodes it. Only a frame whose ``ts`` is missing or
unusable is re-encoded with the daemon's clock.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any, Iterable, Optional, Union

import attrs
import orjson

from bridge_core.model.errors import BadRequest, BridgeError, TooLarge
from bridge_core.model.limits import MAX_TEXT
from bridge_core.model.redact import redact_tool_args

PROTOCOL_VERSION = 1
MAX_PLUGIN_FRAME = 4 * 1024 * 1024  # bytes; aiohttp closes the socket (1009) above this
# a spawned worker's frames (docs/security.md, "What a worker may store"): one event each, the largest a
# message_end whose tool calls carry a file the model wrote; a quarter of a user plugin's limit
MAX_WORKER_FRAME = 1024 * 1024
MAX_BROWSER_FRAME = 64 * 1024
MAX_BODY = 1024 * 1024  # bytes of a REST body (413 above)
MAX_SEQ = 2**53 - 1  # JavaScript's safe integers: the plugin counts with them
EVENTS_LIMIT_DEFAULT = 1000
EVENTS_LIMIT_MAX = 1000
MAX_INFO_STRING = 1000

SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@+=-]{0,127}$")
EVENT_TYPE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
ENVELOPE_KEYS = ("v", "sessionId", "seq", "ts", "type")

# daemon-bound types the daemon gives a meaning to; other well-formed types are stored as they are
EPHEMERAL_TYPES = frozenset({"message_update"})


class FrameError(BridgeError):
    """A frame that cannot be accepted; answered with an error frame, the socket stays open."""

    code = "invalid_frame"
    default_message = "Invalid frame"


def now_ms() -> int:
    return int(time.time() * 1000)


def is_session_id(value: object) -> bool:
    return isinstance(value, str) and bool(SESSION_ID.match(value))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# The strings the two patterns accepted lately: a plugin sends the same session id and a handful of
# types in every frame, so the hot path tests each once (a set lookup after). Bounded: emptied when full.
_SEEN_MAX = 1024
_SEEN_TYPES: set[str] = set()
_SEEN_SIDS: set[str] = set()


def _matches(value: str, pattern: re.Pattern, seen: set[str]) -> bool:
    if value in seen:
        return True
    if not pattern.match(value):
        return False
    if len(seen) >= _SEEN_MAX:
        seen.clear()
    seen.add(value)
    return True


# --- plugin -> daemon -------------------------------------------------------------------------


@attrs.frozen(slots=True)
class PluginFrame:
    type: str
    session_id: str
    seq: int
    ts: int
    obj: dict  # the decoded frame (envelope and payload)
    raw: str  # the JSON text stored and re-served (envelope and payload)

    @property
    def persisted(self) -> bool:
        return self.type not in EPHEMERAL_TYPES


def _loads(data: Union[str, bytes]) -> Any:
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
    try:
        return orjson.loads(data)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise FrameError("Frame is not valid JSON", code="invalid_json")


def decode_plugin_frame(data: Union[str, bytes]) -> PluginFrame:
    """One daemon-bound frame: a JSON object with the lvmh envelope.

    The hot path of every plugin event: the checks are inlined (``type(x) is int`` is ``_is_int``
    for what orjson returns) and the type and session id are matched once each (``_matches``)."""
    obj = _loads(data)
    if type(obj) is not dict:
        raise FrameError("Frame must be one JSON object", code="invalid_json")
    ftype = obj.get("type")
    if not isinstance(ftype, str) or not _matches(ftype, EVENT_TYPE, _SEEN_TYPES):
        raise FrameError("type must be a snake_case string", code="invalid_frame")
    v = obj.get("v")
    if v != PROTOCOL_VERSION or v is True:
        raise FrameError(f"Unsupported protocol version (v must be {PROTOCOL_VERSION})", code="version_mismatch")
    sid = obj.get("sessionId")
    if not isinstance(sid, str) or not _matches(sid, SESSION_ID, _SEEN_SIDS):
        raise FrameError("sessionId must be 1-128 characters of [A-Za-z0-9._:@+=-]", code="invalid_frame")
    seq = sent_seq = obj.get("seq")
    if ftype == "hello":
        seq = 0
    elif type(seq) is not int or not 1 <= seq <= MAX_SEQ:
        raise FrameError("seq must be an integer from 1", code="invalid_frame")
    ts = obj.get("ts")
    reencode = False
    if type(ts) is int and 0 <= ts <= MAX_SEQ:
        ts_ms = ts
    elif type(ts) is float and math.isfinite(ts) and 0 <= ts <= MAX_SEQ:
        ts_ms = int(ts)
        reencode = True
    else:
        ts_ms = now_ms()
        reencode = True
    if ftype == "message_update":
        if type(obj.get("delta")) is not str:
            raise FrameError("message_update needs a string delta", code="invalid_frame")
    elif ftype == "hello" or ftype == "session_info":
        if type(obj.get("session")) is not dict:
            raise FrameError(f"{ftype} needs a session object", code="invalid_frame")
    elif ftype == "tool_execution_start" or ftype == "message_end":
        reencode |= _redact_tool_args(obj)
    if sent_seq != seq:  # a hello may omit seq (always 0)
        obj["seq"] = seq
        reencode = True
    if reencode:
        obj["ts"] = ts_ms
        raw = orjson.dumps(obj).decode()
    elif isinstance(data, str):
        raw = data
    else:
        raw = bytes(data).decode("utf-8")  # orjson accepted it, so it is valid UTF-8
    return PluginFrame(ftype, sid, seq, ts_ms, obj, raw)


def stored_size(raw: str) -> int:
    """The bytes ``raw`` takes in the store (UTF-8): its length when ASCII (a flag CPython keeps, no scan)."""
    return len(raw) if raw.isascii() else len(raw.encode("utf-8"))


def _redact_tool_args(obj: dict) -> bool:
    """Redact secret-looking keys in tool arguments before they are stored or sent on; True if changed."""
    changed = False
    args = obj.get("args")
    if isinstance(args, (dict, list)):
        safe = redact_tool_args(args)
        if safe != args:
            obj["args"] = safe
            changed = True
    message = obj.get("message")
    calls = message.get("toolCalls") if isinstance(message, dict) else None
    if isinstance(calls, list):
        for call in calls:
            raw_args = call.get("argsJson") if isinstance(call, dict) else None
            if not isinstance(raw_args, str) or not raw_args:
                continue
            try:
                parsed = orjson.loads(raw_args)
            except orjson.JSONDecodeError:
                continue
            if isinstance(parsed, (dict, list)):
                safe = redact_tool_args(parsed)
                if safe != parsed:
                    call["argsJson"] = orjson.dumps(safe).decode()
                    changed = True
    return changed


def _opt_str(value: object) -> Optional[str]:
    if isinstance(value, str):
        return value[:MAX_INFO_STRING]
    return None


def session_info(raw: object, session_id: str, previous: Optional[dict] = None) -> dict:
    """The spec's session snapshot, normalised: known keys, right types, bounded strings."""
    src = raw if isinstance(raw, dict) else {}
    prev = previous or {}
    started = src.get("startedAt")
    if _is_int(started) and 0 <= started <= MAX_SEQ:  # type: ignore[operator]
        started_at = int(started)  # type: ignore[arg-type]
    elif isinstance(started, float) and math.isfinite(started) and 0 <= started <= MAX_SEQ:
        started_at = int(started)
    else:
        started_at = prev.get("startedAt") or now_ms()
    cwd = _opt_str(src.get("cwd"))
    return {
        "id": session_id,
        "name": _opt_str(src.get("name")),
        "cwd": cwd if cwd is not None else (prev.get("cwd") or ""),
        "model": _opt_str(src.get("model")),
        "provider": _opt_str(src.get("provider")),
        "agent": src.get("agent") is True,
        "repo": _opt_str(src.get("repo")),
        "startedAt": started_at,
    }


# --- events the daemon writes into a session ---------------------------------------------------


def event_raw(session_id: str, seq: int, ts_ms: int, etype: str, payload: dict) -> str:
    """The JSON text of an event the daemon writes (its envelope and ``payload``), as stored and streamed."""
    obj = {"v": PROTOCOL_VERSION, "sessionId": session_id, "seq": seq, "ts": ts_ms, "type": etype}
    obj.update(payload)
    return orjson.dumps(obj, default=_json_default).decode()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return str(obj)


# --- daemon -> plugin ---------------------------------------------------------------------------


def _daemon_frame(ftype: str, session_id: str, **fields: Any) -> bytes:
    frame = {"v": PROTOCOL_VERSION, "type": ftype, "sessionId": session_id, "seq": 0, "ts": now_ms()}
    frame.update(fields)
    return orjson.dumps(frame)


def welcome(session_id: str, last_seq: int) -> bytes:
    return _daemon_frame("welcome", session_id, lastSeq=last_seq)


def prompt(session_id: str, prompt_id: str, message: str) -> bytes:
    return _daemon_frame("prompt", session_id, promptId=prompt_id, message=message)


def abort(session_id: str) -> bytes:
    return _daemon_frame("abort", session_id)


# --- browser --------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class BrowserFrame:
    type: str  # subscribe | unsubscribe
    session_id: Optional[str]


def decode_browser_frame(data: Union[str, bytes]) -> BrowserFrame:
    obj = _loads(data)
    if not isinstance(obj, dict):
        raise FrameError("Frame must be one JSON object", code="invalid_json")
    ftype = obj.get("type")
    if ftype not in ("subscribe", "unsubscribe"):
        if isinstance(ftype, str):
            raise FrameError("Unknown frame type (subscribe or unsubscribe)", code="unknown_type")
        raise FrameError("type must be a string", code="invalid_json")
    sid = obj.get("sessionId")
    if ftype == "subscribe" and not is_session_id(sid):
        raise FrameError("subscribe needs a valid sessionId", code="invalid_frame")
    if ftype == "unsubscribe" and sid is not None and not isinstance(sid, str):
        raise FrameError("sessionId must be a string", code="invalid_frame")
    return BrowserFrame(type=ftype, session_id=sid)


def events_frame(session_id: str, after: int, raws: Iterable[str]) -> str:
    """``{"type":"events","sessionId":...,"after":N,"events":[...]}`` around stored JSON texts."""
    return (
        '{"type":"events","sessionId":'
        + orjson.dumps(session_id).decode()
        + ',"after":'
        + str(int(after))
        + ',"events":['
        + ",".join(raws)
        + "]}"
    )


def session_list_frame(sessions: list, **page: Any) -> bytes:
    """The spec's full list; with ``page`` (``total``, ``next``, ``attention``), the first page of it
    that a browser opened with ``ext=list-deltas`` gets (lvmh_adapter/listing.py)."""
    return orjson.dumps({"type": "session_list", "sessions": sessions, **page})


_LIST_HEAD = b'{"type":"session_list","sessions":['
LIST_RUN = 64 * 1024  # bytes of entries joined into one piece of a whole list


def entry_runs(sessions: Iterable[dict], size: int = LIST_RUN) -> list:
    """The session list's entries encoded, in order, joined by commas into runs of about ``size`` bytes: the
    whole list then costs its own bytes and a few pieces, where a dict per entry held at once cost about 650 bytes
    each, and orjson's answer for one entry keeps the 8 KB buffer it wrote into (hence the copy of each)."""
    runs: list = []
    run: list = []
    length = 0
    for session in sessions:
        raw = memoryview(orjson.dumps(session)).tobytes()
        run.append(raw)
        length += len(raw)
        if length >= size:
            runs.append(b",".join(run))
            run, length = [], 0
    if run:
        runs.append(b",".join(run))
    return runs


def session_list_joined(runs: list) -> bytes:
    """``session_list_frame(sessions)`` byte for byte, from ``entry_runs(sessions)``: one copy, the frame's size."""
    return b"".join(_comma_joined(_LIST_HEAD, runs, b"]}"))


def json_array_pieces(runs: list) -> Iterable[bytes]:
    """``orjson.dumps(sessions)`` (the JSON array) in pieces, from ``entry_runs(sessions)``."""
    return _comma_joined(b"[", runs, b"]")


def json_array_length(runs: list) -> int:
    return 2 + sum(map(len, runs)) + max(len(runs) - 1, 0)


def _comma_joined(head: bytes, runs: list, tail: bytes) -> Iterable[bytes]:
    yield head
    for i, run in enumerate(runs):
        if i:
            yield b","
        yield run
    yield tail


ENTRY_CHANGES = ("added", "changed", "removed")


def session_entry_frame(change: str, session: dict, total: Optional[int] = None) -> bytes:
    """One entry of the session list: ``added`` or ``changed`` (the whole entry), ``removed`` (``{"id"}``);
    ``total``: how many sessions are listed now (sent with a change of the list itself).
    An extension frame (docs/web-ui.md, "The live session list"); spec clients ignore it."""
    assert change in ENTRY_CHANGES
    frame: dict = {"type": "session_entry", "change": change, "session": session}
    if total is not None:
        frame["total"] = total
    return orjson.dumps(frame)


def spawn_status_frame(jobs: list) -> bytes:
    return orjson.dumps({"type": "spawn_status", "jobs": jobs})


def json_array(raws: Iterable[str]) -> str:
    return "[" + ",".join(raws) + "]"


# --- REST inputs ----------------------------------------------------------------------------------


def query_int(query, name: str, default: int, lo: int, hi: int, *, clamp_high: bool = False) -> int:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if not re.fullmatch(r"[0-9]{1,18}", text):
        raise BadRequest(f"{name} must be a non-negative integer")
    value = int(text)
    if value < lo:
        raise BadRequest(f"{name} must be at least {lo}")
    if value > hi:
        if clamp_high:
            return hi
        raise BadRequest(f"{name} must be at most {hi}")
    return value


def events_query(query) -> tuple[int, int]:
    after = query_int(query, "after", 0, 0, MAX_SEQ)
    limit = query_int(query, "limit", EVENTS_LIMIT_DEFAULT, 1, EVENTS_LIMIT_MAX, clamp_high=True)
    return after, limit


MAX_BODY_DEPTH = 32  # nesting of arrays/objects in a REST body; every route needs two at most


def _depth_ok(obj: Any, limit: int) -> bool:
    """True when ``obj`` nests at most ``limit`` containers deep (iterative: no recursion)."""
    stack = [(obj, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return False
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return True


def json_body(data: bytes, *, allow_empty: bool = False) -> dict:
    """A REST body: one JSON object, at most ``MAX_BODY_DEPTH`` deep, else ``BadRequest``.

    The size limit is the server's (``MAX_BODY``, 413 before this is called); orjson's own
    nesting limit (1024) raises ``JSONDecodeError`` ("depth limit exceeded"), never a
    ``RecursionError``, and is answered here as too deep like any body past our limit.
    """
    if not data.strip():
        if allow_empty:
            return {}
        raise BadRequest("Body must be a JSON object")
    try:
        obj = orjson.loads(data)
    except (orjson.JSONDecodeError, ValueError) as exc:
        if "depth" in str(exc):
            raise BadRequest(f"Body is nested too deeply (at most {MAX_BODY_DEPTH} levels)")
        raise BadRequest("Body is not valid JSON")
    if not isinstance(obj, dict):
        raise BadRequest("Body must be a JSON object")
    if not _depth_ok(obj, MAX_BODY_DEPTH):
        raise BadRequest(f"Body is nested too deeply (at most {MAX_BODY_DEPTH} levels)")
    return obj


def body_string(obj: dict, name: str, *, max_len: int = MAX_TEXT, required: bool = True,
                allow_empty: bool = False) -> Optional[str]:
    value = obj.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise BadRequest(f"{name} must be a string")
    if not allow_empty and not value.strip():
        raise BadRequest(f"{name} must not be empty")
    if len(value) > max_len:
        raise TooLarge(f"{name} longer than {max_len} characters")
    return value
