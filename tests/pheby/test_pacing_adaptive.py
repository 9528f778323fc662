"""Pheby's draft pacing with an interval adapted to the draft's size (pheby_adapter/pacing.py), a given clock.

The rules: the first draft of a message at once; then at most one push per
``interval_for(length)``: ``interval * length / full_chars``, never below
``min_interval``, never above ``max_interval`` (the interval itself when not
set longer: a draft of ``full_chars`` or more then waits the full interval,
as with a fixed one), ``length`` being that of the draft sent (``recheck``);
the newest draft replaces an unsent one (the push that is due sends the
newest).
"""

from __future__ import annotations

import json

from bridge_core.model import events as ev
from pheby_adapter import pacing
from pheby_adapter.pacing import SLACK, DraftPacer, Pace

TS = 1_700_000_000.0


def _delta(draft: ev.Draft, piece: str, mid: str = "m1") -> ev.TextDelta:
    draft.append(piece)
    return ev.TextDelta(conversation_id="c1", run_id="r1", message_id=mid, delta=piece, draft=draft, ts=TS)


def _pacer(tick: float = 0.0) -> DraftPacer:
    return DraftPacer(0.040, min_interval=0.010, full_chars=2048, tick=tick)


def _front_end_pacer(tick: float = 0.0) -> DraftPacer:
    """The Pheby front end's pacer at its defaults (no [pheby] options): long drafts wait up to 1 s."""
    return pacing.from_options({}, tick=tick)


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
    assert json.loads(frame)["text"] == "abc"
    assert p.offer(10.021, _delta(d, "d")) == Pace(now=True)  # a floor after the last push: at once
    p.push("m1", 10.021)
    long = _delta(d, "x" * 4000)
    pace = p.offer(10.022, long)
    assert abs(pace.at - 10.061) < 1e-9  # 4,004 characters: the full 40 ms after the last push


def test_a_lower_interval_never_raises_the_floor_above_it():
    p = DraftPacer(0.004, min_interval=0.010, full_chars=2048, tick=0)
    assert p.interval_for(1) == 0.004  # the floor is capped by the interval itself


def _stream_timed(p: DraftPacer, chars: int, every: float, stop_at_end: bool = False,
                  recheck: bool = True) -> list[tuple[float, int]]:
    """One character every ``every`` seconds; the pushes (time, length) as the front end makes them: a timer at
    ``at``, which, when it fires, asks ``recheck`` (``recheck=False``: the rule before it, the push at once).
    ``stop_at_end``: the message completes with its last character (``end``: a push still due is not made)."""
    d = ev.Draft()
    timer = None
    pushed: list[tuple[float, int]] = []
    now = 0.0

    def fire(at: float) -> None:
        nonlocal timer
        later = p.recheck("m1", at).at if recheck else None
        if later is not None:
            timer = later
            return
        p.push("m1", at)
        pushed.append((at, d.length))
        timer = None

    for _ in range(chars):
        now += every
        while timer is not None and timer <= now:  # the timer fires before the next delta (perhaps re-armed)
            fire(timer)
        pace = p.offer(now, _delta(d, "x"))
        if pace.now:
            p.push("m1", now)
            pushed.append((now, d.length))
        elif pace.at is not None:
            timer = pace.at
    if stop_at_end:
        p.end("m1")
    else:
        while timer is not None:  # the push still due after the last delta
            fire(timer)
    return pushed


def _stream(p: DraftPacer, chars: int, every: float, stop_at_end: bool = False, recheck: bool = True) -> list[int]:
    """The lengths of ``_stream_timed``'s pushes."""
    return [n for _, n in _stream_timed(p, chars, every, stop_at_end, recheck)]


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


def test_past_the_full_size_the_interval_goes_on_growing_up_to_the_longest_wait():
    p = _front_end_pacer()
    assert p.interval_for(2048) == 0.040  # the full size: the interval, as before
    assert abs(p.interval_for(4096) - 0.080) < 1e-12  # twice the full size: twice the interval
    assert p.interval_for(51_200) == 1.0 and p.interval_for(1_000_000) == 1.0  # never longer than max_interval
    assert p.interval_for(1) == 0.010  # short drafts as before
    shorter = DraftPacer(0.040, min_interval=0.010, max_interval=0.010, full_chars=2048, tick=0)
    assert shorter.interval_for(100_000) == 0.040  # a max_interval below the interval is the interval


def test_a_due_push_waits_for_the_wait_of_the_draft_it_would_send():
    p = _front_end_pacer()
    d = ev.Draft()
    assert p.offer(0.0, _delta(d, "a")) == Pace(now=True)
    p.push("m1", 0.0)
    pace = p.offer(0.001, _delta(d, "b"))
    assert abs(pace.at - 0.010) < 1e-9  # 2 characters: due after the 10 ms floor
    p.offer(0.009, _delta(d, "x" * 4094))  # by then 4,096 characters: their own wait is 80 ms
    later = p.recheck("m1", 0.010)
    assert abs(later.at - 0.080) < 1e-9
    assert p.recheck("m1", 0.080) == Pace(now=True)
    frame, _ = p.push("m1", 0.080)
    assert len(json.loads(frame)["text"]) == 4096
    p.offer(0.081, _delta(d, "c"))  # 4,097 characters: due at 160 ms after that push
    p.offer(0.150, _delta(d, "d"))
    assert p.recheck("m1", 0.160) == Pace(now=True)  # grown by a character: its wait ends within SLACK


def test_a_long_fast_answer_costs_no_more_than_its_final_text_and_a_little():
    """80,000 characters arriving in 67 ms (an unpaced ``/bench 20000``: 1.2 million characters a second
    measured on the project's 2-core machine) and ten times slower: the drafts before ``message.complete``
    stay under a tenth of the final text. With a wait capped at 40 ms and no recheck (the rule before),
    they were most of the text again."""
    chars = 80_000
    for per_second in (1_200_000, 120_000):
        drafts = sum(_stream(_front_end_pacer(), chars, 1 / per_second, stop_at_end=True))
        before = sum(_stream(_pacer(), chars, 1 / per_second, stop_at_end=True, recheck=False))
        assert drafts <= 0.1 * chars, (per_second, drafts)
        assert before > 0.5 * chars, (per_second, before)


def test_a_long_answer_at_an_agents_pace_gets_each_draft_after_its_own_wait():
    p = _front_end_pacer()
    pushes = _stream_timed(p, 20_000, 0.001, stop_at_end=True)  # 1,000 characters a second for 20 s
    for (t0, _), (t1, n) in zip(pushes, pushes[1:]):
        wait = p.interval_for(n)
        # the pushed draft's own wait, give or take the slack (a push sends a draft whose wait ends within it),
        # never under the floor, and late at most by the time a character takes to arrive
        assert max(wait - SLACK, 0.010) - 1e-9 <= t1 - t0 <= wait + 0.001 + 1e-9, (t0, t1, n)
    assert pushes[-1][1] > 19_000 and t1 - t0 > 0.35  # drafts of 19,000 characters: one every 0.37 s
