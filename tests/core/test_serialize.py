"""The shared events' JSON form round-trips for every event type; unknown tags do not break a reader."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.model import events as ev
from bridge_core.model.errors import BadRequest
from bridge_core.model.serialize import UnknownEvent, from_dict, to_dict
from tests.strategies import EVENT_STRATEGIES, ids


@settings(max_examples=400, deadline=None)
@given(st.one_of(*EVENT_STRATEGIES.values()))
def test_every_event_round_trips_through_json(event):
    data = json.loads(json.dumps(to_dict(event)))
    assert data["event"] == type(event).__name__
    back = from_dict(data)
    assert back == event


@given(ids, st.lists(st.text(max_size=5), max_size=20))
def test_text_delta_carries_its_cumulative_text(cid, pieces):
    draft = ev.Draft()
    for p in pieces:
        draft.append(p)
    e = ev.TextDelta(conversation_id=cid, run_id="r", message_id="m", delta=pieces[-1] if pieces else "", draft=draft)
    back = from_dict(json.loads(json.dumps(to_dict(e))))
    assert back.text == "".join(pieces) and back.delta == e.delta


def test_unknown_tag_is_an_unknown_event():
    assert from_dict({"event": "FromTheFuture", "x": 1}) == UnknownEvent(event="FromTheFuture")


@pytest.mark.parametrize("bad", [[1], "x", {"event": "RunFinished", "conversation_id": 1}, {"event": "RunStarted"}])
def test_malformed_is_bad_request(bad):
    with pytest.raises(BadRequest):
        from_dict(bad)
