"""Skips for a missing real peer (Hermes, pi / Node, Chromium; PostgreSQL and Redis, tests/engines.py),
and the switch that makes them failures.

A test that needs a real peer skips through :func:`missing_peer`, whose reason starts with
``PREFIX`` and names the peer. Plain ``pytest`` keeps such a skip a skip, with its reason.
With ``AGENT_BRIDGE_REQUIRE_PEERS=1`` (``scripts/test`` sets it under CI, see the README's
test paragraph) the hook below turns every such skip into a failure naming the peer, so a
CI run cannot pass with the end-to-end tests silently not run. Other skips (no root for a
tmpfs, no git) are not peers and stay skips.
"""

from __future__ import annotations

import os

import pytest

PREFIX = "peer missing: "
REQUIRE_ENV = "AGENT_BRIDGE_REQUIRE_PEERS"


def require_peers() -> bool:
    return os.environ.get(REQUIRE_ENV, "").strip().lower() in ("1", "true", "yes")


def missing_peer(peer: str, why: str) -> str:
    """The skip reason for a test whose real ``peer`` is not here: ``pytest.skip(missing_peer(...))``."""
    return f"{PREFIX}{peer}: {why}"


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr or "")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or not require_peers() or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    marker = reason.find(PREFIX)
    if marker < 0:
        return
    report.outcome = "failed"
    report.longrepr = (f"{reason[marker:]}\n{REQUIRE_ENV}=1 (set by scripts/test under CI): "
                       "a test whose real peer is missing fails instead of skipping")


# --- reverse proxies (tests/remote): Debian's Caddy and nginx, installed by scripts/install-peers ---------
# Their tests skip through ``missing_proxy`` with a PREFIX reason, so under CI (AGENT_BRIDGE_REQUIRE_PEERS=1)
# a missing proxy fails the run like any other peer.

PROXY_BINARIES = {"caddy": "/usr/bin/caddy", "nginx": "/usr/sbin/nginx"}


def missing_proxy(name: str):
    """The skip reason when proxy ``name`` (caddy, nginx) is not installed, else None."""
    path = PROXY_BINARIES[name]
    if os.access(path, os.X_OK):
        return None
    return missing_peer(name, f"{path} not found (scripts/install-{name}.sh installs Debian's {name})")
