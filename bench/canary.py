"""A canary for the machine's own freezes, beside a measured server (benchmark only).

On a virtual machine the whole guest sometimes stops running for 10-100 ms:
both CPUs show idle while a task is runnable, and the hypervisor's steal count
does not show it (docs/performance.md, "Stalls that are the machine's"). Such a freeze
delays every server's frames alike and lands in the max latency of whichever
round it hits. ``python -m bench.canary PATH`` is a process with no work: it
sleeps a millisecond at a time and notes each wake-up that came ``FREEZE`` or
more late. With nothing to do, a late wake-up is the machine's: the VM not
running, or both CPUs held past the scheduler's own latency. On SIGTERM it
writes the late wake-ups as JSON to PATH: ``[[asleep_since, woke_at], ...]``
in ``time.monotonic()`` seconds (one clock for every process on the machine).
``Canary`` runs one for the length of a measurement.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from .proc import ROOT

TICK = 0.001
FREEZE = 0.008  # late by this much or more beyond the tick: above a busy 2-core machine's scheduling delays


def late_wakeups(wakes: list[float], tick: float = TICK, freeze: float = FREEZE) -> list[tuple[float, float]]:
    """The gaps between consecutive wake-ups that exceed ``tick + freeze``, as (since, until)."""
    return [(a, b) for a, b in zip(wakes, wakes[1:]) if b - a >= tick + freeze]


def main(path: str, freeze: float = FREEZE) -> None:
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    late: list[tuple[float, float]] = []
    last = time.monotonic()
    print("ready", flush=True)
    while True:  # at least one tick after "ready", whenever SIGTERM comes
        time.sleep(TICK)
        now = time.monotonic()
        late += late_wakeups([last, now], freeze=freeze)
        last = now
        if stop:
            break
    with open(path + ".tmp", "w") as f:
        json.dump(late, f)
    os.replace(path + ".tmp", path)


class Canary:
    """A canary process, running when this returns; ``stop()`` returns the freezes within a window.
    ``freeze``: how late a wake-up must come to count (the tests count every one with ``-TICK``)."""

    def __init__(self, freeze: float = FREEZE) -> None:
        fd, self.path = tempfile.mkstemp(prefix="bench-canary-", suffix=".json")
        os.close(fd)
        os.unlink(self.path)
        self.proc = subprocess.Popen([sys.executable, "-m", "bench.canary", self.path, repr(freeze)], cwd=ROOT,
                                     env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # "ready": it is asleep, counting

    def stop(self, since: float, until: float) -> list[tuple[float, float]]:
        """The late wake-ups that overlap [since, until] (monotonic seconds), after stopping the process."""
        self.proc.terminate()
        self.proc.wait(10)
        try:
            with open(self.path) as f:
                late = json.load(f)
            os.unlink(self.path)
        except FileNotFoundError:
            return []
        return [(a, b) for a, b in late if b > since and a < until]


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else FREEZE)
