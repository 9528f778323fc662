"""Interpreter settings for a serving process (docs/architecture.md, "Where each rule lives").

Two things stall the event loop of a busy bridge that a minimal server does
not have (measured with ``python -m bench --only team -v``, see docs/performance.md,
"Team load"):

- the GIL hand-off to the store's writer thread. Each SQLite step releases
  the GIL and takes it back; while the loop runs Python code, taking it back
  waits for the interpreter's switch interval (5 ms by default), several
  times per commit, and every frame behind the durability barrier waits for
  that commit. A short interval bounds each hand-off (``SWITCH_INTERVAL``);
  it costs nothing while only one thread runs. At 0.5 ms a run's first
  frames still waited about 20 ms for their commit while the loop streamed
  an unpaced ``/bench 2000`` (a commit is some twenty hand-offs); at 0.1 ms,
  3 ms, with the CPU per frame unchanged within the noise (docs/performance.md,
  "A team's start").
- full garbage collections over everything imported and built at start
  (tens of thousands of objects that never die). ``gc.freeze`` after start
  moves them out of the collector's view, so a collection scans only what
  the running bridge made.

``Service.start`` (cli/app.py) calls ``tune_for_serving`` once every front
end listens. It is process-wide: a library embedding the bridge (the Hermes
plugin) leaves the host's settings alone unless it calls it.
"""

from __future__ import annotations

import gc
import sys

SWITCH_INTERVAL = 0.0001  # seconds; CPython's default is 0.005


_frozen = False


def tune_for_serving() -> None:
    """Short GIL switch interval; start-up objects frozen out of the garbage collector's scans.

    The freeze happens once per process: a second service in the same process
    (the tests start many) must not freeze what the first left behind.
    """
    global _frozen
    sys.setswitchinterval(SWITCH_INTERVAL)
    if not _frozen:
        _frozen = True
        gc.collect()
        gc.freeze()
