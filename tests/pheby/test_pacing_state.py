"""Pheby's draft pacer (pheby_adapter/pacing.py) on its own: no sockets, no loop, a given clock.

Most tests pace each push exactly when it is due (``tick=0``); the last ones the pacing clock's ticks.
"""

from __future__ import annotations

import json

from bridge_core.model import events as ev
from pheby_adapter.pacing import DraftPacer, Pace

TS = 1_700_000_000.0


def _delta(draft: ev.Draft, piece: str, mid: str = "m1") -> ev.TextDelta:
    draft.append(piece)
    return ev.TextDelta(conversation_id="c1", run_id="r1", message_id=mid, delta=piece, draft=draft, ts=TS)


def _text(frame: bytes) -> str:
    return json.loads(frame)["text"]


def test_the_first_draft_goes_at_once_encoded_now():
    p = DraftPacer(0.040, tick=0)
    d = ev.Draft()
    assert p.offer(10.0, _delta(d, "a")) == Pace(now=True)
    frame, key = p.push("m1", 10.0)
    assert key == ("draft", "m1")
    assert isinstance(frame, bytes)  # encoded now: it goes out even if the message completes first
    assert json.loads(frame) == {"type": "message.delta", "conversation_id": "c1", "message_id": "m1",
                                 "text": "a", "ts": json.loads(frame)["ts"]}


def test_then_the_newest_draft_at_most_once_per_interval():
    p = DraftPacer(0.040, tick=0)
    d = ev.Draft()
    p.offer(10.0, _delta(d, "a"))
    p.push("m1", 10.0)
    pace = p.offer(10.010, _delta(d, "b"))
    assert pace.now is False and abs(pace.at - 10.040) < 1e-9  # due one interval after the last push
    assert p.offer(10.020, _delta(d, "c")) == Pace()  # a push is already due: it sends the newest
    assert p.offer(10.030, _delta(d, "d")) == Pace()
    frame, key = p.push("m1", 10.040)
    assert isinstance(frame, bytes) and key == ("draft", "m1")  # encoded at the push: the newest draft
    assert _text(frame) == "abcd"
    # a delta a full interval after the last push goes at once again
    assert p.offer(10.081, _delta(d, "e")) == Pace(now=True)


def test_a_later_draft_is_encoded_once_at_its_push_and_marks_the_message_pushed_again():
    p = DraftPacer(0.040, tick=0)
    d = ev.Draft()
    p.offer(0.0, _delta(d, "x"))
    p.push("m1", 0.0)
    assert not p.pushed_again("m1")  # the first draft alone: it goes out even if the message completes first
    p.offer(0.001, _delta(d, "y"))
    frame, _ = p.push("m1", 0.040)
    assert isinstance(frame, bytes) and _text(frame) == "xy"  # the same bytes for every client
    p.offer(0.041, _delta(d, "z"))  # after the push: the next push sends it
    assert _text(frame) == "xy"
    assert p.pushed_again("m1")  # an unsent later draft is dropped when the message completes (protocol.Broadcast)


def test_a_completed_message_is_forgotten_and_its_due_push_cancelled():
    p = DraftPacer(0.040, tick=0)
    d = ev.Draft()
    p.offer(0.0, _delta(d, "a"))
    p.push("m1", 0.0)
    p.offer(0.010, _delta(d, "b"))
    assert p.end("m1") is True  # the front end cancels its timer
    assert not p.pushed_again("m1")  # forgotten
    assert p.push("m1", 0.040) is None
    assert p.end("m1") is False
    # a new message with the same id starts over: its first draft at once
    assert p.offer(0.050, _delta(ev.Draft(), "n")) == Pace(now=True)


def test_messages_are_paced_independently():
    p = DraftPacer(0.040, tick=0)
    d1, d2 = ev.Draft(), ev.Draft()
    assert p.offer(0.0, _delta(d1, "a", "m1")).now
    p.push("m1", 0.0)
    assert p.offer(0.001, _delta(d2, "b", "m2")).now
    assert p.offer(0.002, _delta(d1, "c", "m1")).at is not None


def test_the_interval_can_change():
    p = DraftPacer(0.040, tick=0)
    d = ev.Draft()
    p.offer(0.0, _delta(d, "a"))
    p.push("m1", 0.0)
    p.interval = 3600.0
    assert abs(p.offer(1.0, _delta(d, "b")).at - 3600.0) < 1e-9


def test_a_message_alone_is_pushed_exactly_when_due():
    p = DraftPacer(0.040, tick=0.005)
    d = ev.Draft()
    assert p.offer(10.0, _delta(d, "a")) == Pace(now=True)
    p.push("m1", 10.0)
    pace = p.offer(10.012, _delta(d, "b"))
    assert abs(pace.at - 10.040) < 1e-9  # one interval after the last push
    p.push("m1", 10.040)
    assert p.offer(10.0813, _delta(d, "c")) == Pace(now=True)  # past due: at once


def test_while_messages_stream_together_their_pushes_go_on_the_clock():
    p = DraftPacer(0.040, tick=0.005)
    d1, d2 = ev.Draft(), ev.Draft()
    assert p.offer(0.0013, _delta(d1, "a", "m1")) == Pace(now=True)  # a first draft: at once, always
    p.push("m1", 0.0013)
    assert p.offer(0.0042, _delta(d2, "a", "m2")) == Pace(now=True)
    p.push("m2", 0.0042)
    at1 = p.offer(0.010, _delta(d1, "b", "m1")).at  # due at 0.0413: the tick after
    at2 = p.offer(0.011, _delta(d2, "b", "m2")).at  # due at 0.0442: the same tick
    assert at1 == at2 and abs(at1 - 0.045) < 1e-9  # one turn, one write per connection
    p.push("m1", at1)
    p.push("m2", at2)
    pace = p.offer(0.1002, _delta(d1, "c", "m1"))  # past due: the next tick, not at once
    assert pace.now is False and abs(pace.at - 0.105) < 1e-9
    p.end("m2")
    p.push("m1", 0.105)
    assert p.offer(0.1500, _delta(d1, "d", "m1")) == Pace(now=True)  # alone again: exactly when due
