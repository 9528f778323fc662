"""Helpers every protocol codec shares: strict cattrs converters, JSON, timestamps.

Each adapter makes its own converter with ``strict_converter()`` (never the
global one): strings are strict (cattrs would coerce ``1`` to ``"1"``), ints
refuse bools and floats, bools refuse everything but bools, and structuring
errors become ``BadRequest`` with the offending field named.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any, Optional

import cattrs
import orjson
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError

from .errors import BadRequest, InvalidJson


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
