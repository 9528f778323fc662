"""The shared events' own JSON form: a cattrs converter for the tagged union.

Used where shared events cross a process or thread boundary as data (tests,
tools, logs of what happened): each event is a dict tagged with ``"event"``
(its class name), timestamps stay epoch seconds, a TextDelta carries its
cumulative text. An unknown tag structures into ``UnknownEvent`` instead of
raising a bare KeyError, so a newer peer's events do not break an older reader.
"""

from __future__ import annotations

from typing import Any

import attrs
import cattrs
from cattrs.strategies import configure_tagged_union

from . import events as ev
from .errors import BadRequest
from .wire import strict_converter, structure

TAG = "event"


@attrs.frozen
class UnknownEvent:
    event: str = "unknown"


def _unknown(data: Any, _cls: type) -> UnknownEvent:
    tag = data.get(TAG) if isinstance(data, dict) else None
    return UnknownEvent(event=tag if isinstance(tag, str) else "unknown")


def event_converter() -> cattrs.Converter:
    conv = strict_converter()
    conv.register_unstructure_hook(ev.TextSoFar, lambda d: d.text())
    conv.register_structure_hook(ev.TextSoFar, lambda v, _t: ev.TextSoFar.of(conv.structure(v, str)))
    conv.register_structure_hook(UnknownEvent, _unknown)
    configure_tagged_union(
        ev.Event, conv, tag_name=TAG, tag_generator=lambda cl: cl.__name__, default=UnknownEvent
    )
    return conv


_CONV = event_converter()


def to_dict(event: Any) -> dict:
    return _CONV.unstructure(event, ev.Event)


def from_dict(data: Any) -> Any:
    """A shared event (or UnknownEvent for an unknown tag); BadRequest for malformed data."""
    if not isinstance(data, dict):
        raise BadRequest("an event is a JSON object")
    return structure(_CONV, data, ev.Event)  # type: ignore[arg-type]
