"""Shared fixtures: a real bridge with real front ends on loopback ports."""

from __future__ import annotations

import asyncio
import compileall
import os
import sys

import pytest

from bridge_core.kit import looping
from cli.config import build_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.hangs import pytest_timeout_cancel_timer, pytest_timeout_set_timer  # noqa: E402,F401  (a hang named)
from tests.peers import pytest_runtest_makereport  # noqa: E402,F401  (peer-missing skips fail under CI)
from tests.selection import pytest_collection_modifyitems, pytest_terminal_summary  # noqa: E402,F401  (slow suite opt-in)

# the tests' loops are the one `agent-bridge serve` runs on (outboxes flush at the end of each turn)
asyncio.set_event_loop_policy(looping.Policy())

# the servers of the suite run side by side: none takes the default metrics port unless a test asks for
# an endpoint (--metrics-port 0, make_config(metrics_port=0); tests/core/test_metrics.py)
os.environ.setdefault("AGENT_BRIDGE_METRICS_PORT", "off")


def pytest_sessionstart(session):
    """Compile the project once for the servers the tests start.

    Each test starts `python -m cli serve` processes from the checkout. Where PYTHONDONTWRITEBYTECODE
    is set (CI machines set it), none of them leaves a .pyc behind, so every one compiled the whole
    project again: about 0.1 s of CPU a process, hundreds of processes a run. Explicit compilation
    writes the caches regardless; an up-to-date one is skipped."""
    for package in ("bridge_core", "cli", "pheby_adapter", "loomi_adapter", "lvmh_adapter", "tests", "bench"):
        compileall.compile_dir(os.path.join(ROOT, package), quiet=2)


PHEBY_SECRET = "test-pheby-secret-0123456789"
LVMH_TOKEN = "test-lvmh-token-0123456789"


def make_config(tmp_path, adapters=("pheby", "loomi", "lvmh"), **overrides):
    env = {"PHEBY_SECRET": PHEBY_SECRET, "LVMH_TOKEN": LVMH_TOKEN}
    env.update(overrides.pop("env", {}))
    flags = {
        "data_dir": str(tmp_path / "data"),
        "adapters": ",".join(adapters),
        "pheby_port": 0,
        "loomi_port": 0,
        "lvmh_port": 0,
        "metrics_port": "off",
    }
    flags.update(overrides)
    return build_config(flags, env)


@pytest.fixture
async def service_factory(tmp_path):
    """Start a Service (demo agent by default) with the given adapters on port 0; stopped after the test."""
    from bridge_core.bridge.demo import DemoAgent
    from cli.serve import Service

    started = []

    async def start(adapters=("pheby", "loomi", "lvmh"), source=None, data_dir=None, **overrides):
        cfg_path = tmp_path if data_dir is None else data_dir
        cfg = make_config(cfg_path, adapters, **overrides)
        svc = Service(cfg, source or DemoAgent(approval_timeout=overrides.get("approval_timeout", 300.0)))
        await svc.start()
        started.append(svc)
        return svc

    yield start
    for svc in reversed(started):
        await svc.stop()
