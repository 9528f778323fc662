"""A test that never ends stops the run at its limit, naming itself and the await it was stuck on
(tests/hangs.py, pytest-timeout's ``timeout`` in pyproject.toml), and the tests after it are not waited for."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STUCK = '''
import asyncio

async def never_answered(event):
    await event.wait()

async def test_stuck():
    await never_answered(asyncio.Event())

def test_after():
    pass
'''

STUCK_WITH_REDIS = '''
import asyncio

from tests.engines import Redis

async def test_stuck_holding_an_engine():
    redis = Redis().start()
    print("redis pid", redis.proc.pid, flush=True)
    await asyncio.Event().wait()
'''


def test_a_hanging_test_is_named_with_its_await_and_the_run_ends(tmp_path):
    (tmp_path / "test_stuck.py").write_text(STUCK)
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.hangs",
         "-o", "asyncio_mode=auto", "-o", "timeout=6", "-o", "timeout_method=thread", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert done.returncode != 0, out
    assert "test_stuck.py::test_stuck still running after" in out, out
    assert "never_answered" in out and "await event.wait()" in out, out  # the task's stack: the await
    assert "Timeout" in out, out  # pytest-timeout's own dump, then the end of the process
    assert "passed" not in out, out  # test_after never ran: the process ended at the limit


def test_what_a_hanging_test_started_is_stopped_before_the_process_ends(tmp_path):
    """pytest-timeout's ``os._exit`` runs no teardown: an engine the test started (here a Redis) would run on for
    good; the hang's timer stops it first (tests/hangs.py ``_end``)."""
    import shutil

    import pytest

    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (the test command installs it)")
    (tmp_path / "test_stuck_redis.py").write_text(STUCK_WITH_REDIS)
    env = dict(os.environ, PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tests.hangs",
         "-o", "asyncio_mode=auto", "-o", "timeout=6", "-o", "timeout_method=thread", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout + done.stderr
    assert "still running after" in out, out
    pid = int(out.split("redis pid ", 1)[1].split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return  # stopped with the process
    os.kill(pid, 9)
    raise AssertionError(f"redis-server {pid} outlived the test process")
