"""Helpers every protocol codec shares: strict cattrs converters, JSON, timestamps, the attachment's JSON form.

Each adapter makes its own converter with ``strict_converter()`` (never the
global one): strings are strict (cattrs would coerce ``1`` to ``"1"``), ints
refuse bools and floats, bools refuse everything but bools, and structuring
errors become ``BadRequest`` with the offending field named.
"""

from __future__ import annotations

import datetime as _dt
import typing
from typing import TYPE_CHECKING, Any, Callable, Iterable, Optional

import attrs
import cattrs
import orjson
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from .errors import BadRequest, InvalidJson

if TYPE_CHECKING:
    from .events import Attachment


def _json_kind(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages a client reads
    (``null``, not Python's ``NoneType``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, (list, tuple)):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return "a value of another kind"


def _strict_str(value: Any, _t: type) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {_json_kind(value)}")
    return value


def _strict_int(value: Any, _t: type) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {_json_kind(value)}")
    return value


def _strict_float(value: Any, _t: type) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {_json_kind(value)}")
    return float(value)


def _strict_bool(value: Any, _t: type) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected a boolean, got {_json_kind(value)}")
    return value


def strict_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=False)
    conv.register_structure_hook(str, _strict_str)
    conv.register_structure_hook(int, _strict_int)
    conv.register_structure_hook(float, _strict_float)
    conv.register_structure_hook(bool, _strict_bool)
    return conv


def prepare_hooks(conv: cattrs.Converter, classes: Iterable[type]) -> None:
    """Make ``conv``'s structure function of each of ``classes`` now, at a front end's start, and of
    every attrs class their fields hold (an ``Optional`` one is parsed by its own function, made at its
    first value otherwise).

    cattrs writes and compiles the function of a class at its first use, 0.5-1 ms
    each: without this, the first ``session.send`` or ``hello`` a fresh server
    received waited for it (docs/architecture.md, "One command, socket to agent").
    """
    todo = list(classes)
    done: set = set()
    while todo:
        cls = todo.pop()
        if cls in done:
            continue
        done.add(cls)
        conv.get_structure_hook(cls)
        if isinstance(cls, type) and attrs.has(cls):
            for field in attrs.fields(attrs.resolve_types(cls)):
                todo.extend(t for t in _types_in(field.type) if isinstance(t, type) and attrs.has(t))


def _types_in(tp: Any) -> list:
    """``tp`` and every type its arguments name (``Optional[X]``: X, ``list[tuple[Y]]``: Y ...)."""
    out = [tp]
    for arg in typing.get_args(tp):
        out += _types_in(arg)
    return out


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ClassValidationError):
        parts = []
        for sub in exc.exceptions:
            notes = getattr(sub, "__notes__", None) or []
            name = str(notes[0]).rsplit("@ attribute ", 1)[-1] if notes else "field"
            if isinstance(sub, KeyError):
                parts.append(f"missing field {name}")
            elif isinstance(sub, ClassValidationError):
                parts.append(f"{name}: {_describe(sub)}")
            else:
                parts.append(f"{name}: {sub}")
        return "; ".join(parts) or "invalid fields"
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unexpected fields: {', '.join(sorted(exc.extra_fields))}"
    return str(exc)


def structure(conv: cattrs.Converter, data: Any, cls: type) -> Any:
    """Structure ``data`` into ``cls`` or raise BadRequest with a readable reason."""
    try:
        return conv.structure(data, cls)
    except (ClassValidationError, ForbiddenExtraKeysError, TypeError, ValueError, KeyError) as exc:
        raise BadRequest(f"bad request: {_describe(exc)}"[:500])


def loads_object(raw: Any) -> dict:
    """Parse a frame that must be one JSON object; InvalidJson otherwise."""
    try:
        data = orjson.loads(raw)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        raise InvalidJson("Frame is not valid JSON")
    if not isinstance(data, dict):
        raise InvalidJson("Frame is not a JSON object")
    return data


def dumps(obj: Any) -> bytes:
    return orjson.dumps(obj)


def iso(ts: Optional[float]) -> Optional[str]:
    """ISO-8601 UTC with millisecond precision: 2026-09-02T18:00:00.123+00:00."""
    if ts is None:
        return None
    return _dt.datetime.fromtimestamp(ts, _dt.timezone.utc).isoformat(timespec="milliseconds")


def parse_iso(value: str) -> float:
    return _dt.datetime.fromisoformat(value).timestamp()


def attachment_fields(
    a: Attachment,
    *,
    stamp: Callable[[Optional[float]], object] = lambda t: t,
    with_conversation: bool = True,
    path_key: str = "download_path",
) -> dict:
    """An attachment as a JSON object, in one key order: ``stamp`` renders the two times
    (epoch seconds as they are, or ISO-8601), ``path_key`` names the download path."""
    out: dict = {
        "attachment_id": a.attachment_id,
        "filename": a.filename,
        "mime_type": a.mime_type,
        "size": a.size,
        "kind": a.kind,
        "inline_image": a.inline_image,
    }
    if with_conversation:
        out["conversation_id"] = a.conversation_id
    out["message_id"] = a.message_id
    out["created_at"] = stamp(a.created_at)
    out["expires_at"] = stamp(a.expires_at)
    out[path_key] = a.download_path
    return out
