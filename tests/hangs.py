"""A test that hangs fails the run with what it was waiting for, instead of holding CI until it is killed.

pytest-timeout (the ``timeout`` in pyproject.toml, ``thread`` method) ends the process at a test's limit
with every thread's stack. A stuck asyncio test's main thread shows only the event loop's ``select``, so a
moment before that limit this names the test and prints the stack of every task of the running loops: the
await that never returned. README.md, "Tests", says what the run prints then.
"""

from __future__ import annotations

import asyncio
import gc
import linecache
import sys
import threading
import time

import pytest

AHEAD = 3.0  # seconds before pytest-timeout's own end of the process


def _loops() -> list:
    """The running event loops (the test's, and any a test runs in a thread)."""
    return [o for o in gc.get_objects() if isinstance(o, asyncio.AbstractEventLoop) and o.is_running()]


def awaiting(task: asyncio.Task) -> list[str]:
    """Where a task stands: each coroutine of its await chain, outermost first (file, line, the line)."""
    lines, coro = [], task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            code = frame.f_code
            text = linecache.getline(code.co_filename, frame.f_lineno).strip()
            lines.append(f"  {code.co_filename}:{frame.f_lineno} in {code.co_name}: {text}")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return lines


def dump(nodeid: str, limit: float, out=None) -> None:
    """The test's name and where each task of its loops waits (read from another thread: the loop is stuck)."""
    out = out or sys.stderr
    print(f"\n+++ {nodeid} still running after {limit:.0f} s: its tasks, each await chain outermost first +++",
          file=out)
    for loop in _loops():
        try:
            tasks = list(asyncio.all_tasks(loop))
        except RuntimeError:  # the set changed while read
            tasks = []
        for task in tasks:
            try:
                print(f"{task.get_name()}:", *awaiting(task), sep="\n", file=out)
            except Exception as exc:  # noqa: BLE001  (a report; never fail the dump)
                print(f"  (a task's stack could not be read: {exc!r})", file=out)
    out.flush()


def _end(nodeid: str, limit: float) -> None:
    """The dump, then what the process started stopped: pytest-timeout ends it with ``os._exit`` (no fixture's
    teardown), and a PostgreSQL daemonized by ``pg_ctl``, a Redis or a bridge process left running would outlive
    it for good, holding ports, memory and CPU (orphans after hangs on the test loop's machine)."""
    dump(nodeid, limit)
    from tests.engines import stop_live
    from tests.hardening.proc import kill_made

    kill_made()
    stop_live()


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item, settings):
    """Beside pytest-timeout's timer (this returns None: its own is still set), one that dumps first."""
    limit = float(settings.timeout or 0)
    if limit > AHEAD:
        started = time.monotonic()
        timer = threading.Timer(limit - AHEAD, lambda: _end(item.nodeid, time.monotonic() - started))
        timer.daemon = True
        timer.start()
        item._hang_timer = timer


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_cancel_timer(item):
    timer = getattr(item, "_hang_timer", None)
    if timer is not None:
        timer.cancel()
