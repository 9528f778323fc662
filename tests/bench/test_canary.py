"""The benchmark's freeze canary (bench/canary.py): what counts as a freeze, and a real one seen."""

from __future__ import annotations

import os
import signal
import time

from bench.canary import Canary, late_wakeups


def test_a_freeze_is_a_gap_past_the_tick_and_the_threshold():
    wakes = [0.0, 0.001, 0.002, 0.0125, 0.0135, 0.0235, 0.0245]
    assert late_wakeups(wakes, tick=0.001, freeze=0.008) == [(0.002, 0.0125), (0.0135, 0.0235)]
    assert late_wakeups([0.0, 0.0089, 0.0178], tick=0.001, freeze=0.008) == []
    assert late_wakeups([0.0]) == []


def test_a_stopped_canary_reports_the_freeze_within_the_window():
    c = Canary()
    start = time.monotonic()
    os.kill(c.proc.pid, signal.SIGSTOP)
    # the stimulus is a length of time: the canary does not run for 30 ms, as in a freeze of the machine
    while time.monotonic() - start < 0.03:
        time.sleep(0.002)
    os.kill(c.proc.pid, signal.SIGCONT)
    end = time.monotonic()
    freezes = c.stop(start, end)
    assert any(b - a >= 0.03 and a <= start + 0.01 and b >= end - 0.01 for a, b in freezes), freezes
    assert not os.path.exists(c.path)


def test_freezes_outside_the_window_are_left_out():
    c = Canary()
    assert c.stop(0.0, 0.0) == []  # a window before it started
