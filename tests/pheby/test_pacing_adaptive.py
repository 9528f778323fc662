"""Pheby's draft pacing with an interval adapted to the draft's size (pheby_adapter/pacing.py), a given clock.

The rules: the first draft of a message at once; then at most one push per
``interval_for(length)``: ``interval * length / full_chars``, never below
``min_interval``, never above ``interval`` (a draft of ``full_chars`` or
more waits the full interval, as with a fixed one); the newest draft
replaces an unsent one (the push that is due sends the newest).
"""

from __future__ import annotations

import json

from bridge_core import events as ev
from pheby_adapter.pacing import DraftPacer, Pace

TS = 1_700_000_000.0


def _delta(draft: ev.Draft, piece: str, mid: str = "m1") -> ev.TextDelta:
    draft.append(piece)
    return ev.TextDelta(conversation_id="c1", run_id="r1", message_id=mid, delta=piece, draft=draft, ts=TS)


def _pacer(tick: float = 0.0) -> DraftPacer:
    return DraftPacer(0.040, min_interval=0.010, full_chars=2048, tick=tick)


def test_the_interval_grows_with_the_draft_up_to_the_full_interval():
    p = _pacer()
    assert p.interval_for(1) == 0.010  # the floor
    assert abs(p.interval_for(1024) - 0.020) < 1e-12  # half the full size: half the interval
    assert p.interval_for(2048) == 0.040 and p.interval_for(100_000) == 0.040  # never longer than the interval
    fixed = DraftPacer(0.040, tick=0)
    assert fixed.interval_for(1) == fixed.interval_for(100_000) == 0.040  # no full_chars: a fixed interval


def test_a_short_draft_follows_sooner_a_long_one_after_the_full_interval():
    p = _pacer()
    d = ev.Draft()
    assert p.offer(10.0, _delta(d, "a")) == Pace(now=True)  # the first at once
    p.push("m1", 10.0)
    pace = p.offer(10.005, _delta(d, "b"))
    assert abs(pace.at - 10.010) < 1e-9  # 2 characters: due after the 10 ms floor, not 40 ms
    assert p.offer(10.008, _delta(d, "c")) == Pace()  # already due: that push sends the newest
    frame, _ = p.push("m1", 10.010)
    assert json.loads(frame())["text"] == "abc"
    assert p.offer(10.021, _delta(d, "d")) == Pace(now=True)  # a floor after the last push: at once
    p.push("m1", 10.021)
    long = _delta(d, "x" * 4000)
    pace = p.offer(10.022, long)
    assert abs(pace.at - 10.061) < 1e-9  # 4,004 characters: the full 40 ms after the last push


def test_a_lower_interval_never_raises_the_floor_above_it():
    p = DraftPacer(0.004, min_interval=0.010, full_chars=2048, tick=0)
    assert p.interval_for(1) == 0.004  # the floor is capped by the interval itself


def _stream(p: DraftPacer, chars: int, every: float) -> list[int]:
    """One character every ``every`` seconds; the pushes as the front end makes them (a timer at ``at``)."""
    d = ev.Draft()
    timer = None
    pushed: list[int] = []
    now = 0.0
    for _ in range(chars):
        now += every
        if timer is not None and timer <= now:  # the timer fires before the next delta
            p.push("m1", timer)
            pushed.append(d.length)
            timer = None
        pace = p.offer(now, _delta(d, "x"))
        if pace.now:
            p.push("m1", now)
            pushed.append(d.length)
        elif pace.at is not None:
            timer = pace.at
    if timer is not None:  # the push still due after the last delta
        p.push("m1", timer)
        pushed.append(d.length)
    return pushed


def test_a_long_fast_message_costs_about_the_same_bytes_as_with_a_fixed_interval():
    fixed = _stream(DraftPacer(0.040, tick=0), 20000, 0.0001)
    adaptive = _stream(_pacer(), 20000, 0.0001)
    assert sum(adaptive) <= 1.05 * sum(fixed)  # what short drafts add is small beside the long ones
    assert len(adaptive) > len(fixed)  # and the short start streamed more often
    alone = _stream(_pacer(tick=0.005), 20000, 0.0001)
    assert alone == adaptive  # a message streaming alone is not put on the clock


def test_a_short_message_at_an_agents_pace_goes_out_delta_by_delta():
    for tick in (0.0, 0.005):
        pushed = _stream(_pacer(tick), 400, 0.020)  # 50 characters a second, 400 characters
        assert pushed == list(range(1, 401))  # every draft under 800 characters waits less than 20 ms
