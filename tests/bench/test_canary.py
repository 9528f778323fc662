"""The benchmark's freeze canary (bench/canary.py): what counts as a freeze, and the process's round trip."""

from __future__ import annotations

import os
import time

from bench.canary import TICK, Canary, late_wakeups


def test_a_freeze_is_a_gap_past_the_tick_and_the_threshold():
    wakes = [0.0, 0.001, 0.002, 0.0125, 0.0135, 0.0235, 0.0245]
    assert late_wakeups(wakes, tick=0.001, freeze=0.008) == [(0.002, 0.0125), (0.0135, 0.0235)]
    assert late_wakeups([0.0, 0.0089, 0.0178], tick=0.001, freeze=0.008) == []
    assert late_wakeups([0.0]) == []


def test_the_canary_reports_its_late_wakeups_within_the_window():
    # every wake-up counts as late here (threshold -TICK): the process's own round trip (ready, SIGTERM,
    # its report, the window) without waiting for a real freeze; what a freeze is, is the test above
    start = time.monotonic()
    c = Canary(freeze=-TICK)
    freezes = c.stop(start, time.monotonic())
    assert freezes and all(start <= a < b for a, b in freezes), freezes
    assert not os.path.exists(c.path)


def test_freezes_outside_the_window_are_left_out():
    c = Canary(freeze=-TICK)
    assert c.stop(0.0, 0.0) == []  # a window before it started
