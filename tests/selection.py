"""Which tests a plain ``pytest`` runs: everything but the slow ``hardening`` suite, unless asked.

The hardening suite (tests/hardening: a bridge process under floods, faults, crashes and a soak)
takes minutes on two cores, so the developer's default run leaves it out and says so at the end.
It runs when any of these holds:

- ``AGENT_BRIDGE_FULL=1`` (``scripts/test``, and so ``.ci/run``, always sets it: the whole suite);
- a marker expression is given (``-m hardening``, ``-m "not pi"``): the expression decides;
- the command line names the hardening folder, a file in it or one of its tests
  (``pytest tests/hardening``, ``pytest tests/hardening/test_crash.py::test_kill9``).

See the README's test paragraph.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FULL_ENV = "AGENT_BRIDGE_FULL"
SLOW_MARKER = "hardening"
TESTS = Path(__file__).resolve().parent
_DROPPED = pytest.StashKey[int]()


def full_run() -> bool:
    return os.environ.get(FULL_ENV, "").strip().lower() in ("1", "true", "yes")


def _named_paths(config) -> list[Path]:
    """The paths the command line names below tests/ itself (a bare ``pytest`` names none)."""
    out = []
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if path != TESTS and TESTS in path.parents:
            out.append(path)
    return out


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    if full_run() or config.getoption("markexpr", ""):
        return
    named = _named_paths(config)
    keep, dropped = [], []
    for item in items:
        if item.get_closest_marker(SLOW_MARKER) is None:
            keep.append(item)
            continue
        path = Path(str(item.path)).resolve()
        if any(p == path or p in path.parents for p in named):
            keep.append(item)
        else:
            dropped.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        config.stash[_DROPPED] = len(dropped)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    n = config.stash.get(_DROPPED, 0)
    if n:
        terminalreporter.write_line(
            f"{n} slow test{'s' if n != 1 else ''} (marker '{SLOW_MARKER}') deselected by default; run "
            f"{'them' if n != 1 else 'it'} with {FULL_ENV}=1, -m {SLOW_MARKER}, pytest tests/hardening, "
            "or ./scripts/test (the whole suite)")
