"""Locating Node >= 22 and pi 1.6.0 for the pi tests (installed by scripts/install-pi.sh).

Order: ``AGENT_BRIDGE_NODE`` / ``AGENT_BRIDGE_PI``, then the cache's ``env.sh`` that the install
script writes (``${AGENT_BRIDGE_CACHE:-~/.cache/agent-bridge}/pi/env.sh``), then ``node`` / ``pi``
on PATH (``pi`` only at the pinned version). Tests skip with the reason when nothing fits.

``pi_modules`` is the ``node_modules`` folder holding ``@earendil-works/pi-coding-agent`` (for code
that imports pi's SDK, like the worker): ``AGENT_BRIDGE_PI_MODULES``, else where the ``pi`` found
above lives (the install script's wrapper names it; a global install is a symlink into it).
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from typing import Optional

import pytest

from tests.peers import missing_peer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXTENSION_DIR = os.path.join(ROOT, "lvmh_adapter", "pi_extension")
PI_VERSION = "1.6.0"
NODE_MIN = (22, 19)


def _cache_env() -> dict[str, str]:
    cache = os.environ.get("AGENT_BRIDGE_CACHE") or os.path.expanduser("~/.cache/agent-bridge")
    path = os.environ.get("AGENT_BRIDGE_PI_DIR") or os.path.join(cache, "pi")
    out: dict[str, str] = {}
    try:
        with open(os.path.join(path, "env.sh"), encoding="utf-8") as f:
            for line in f:
                m = re.match(r"export (AGENT_BRIDGE_\w+)='([^']*)'", line.strip())
                if m:
                    out[m.group(1)] = m.group(2)
    except OSError:
        pass
    return out


def _version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


@functools.lru_cache(maxsize=None)
def find_node() -> Optional[str]:
    cached = _cache_env()
    for cand in (os.environ.get("AGENT_BRIDGE_NODE"), cached.get("AGENT_BRIDGE_NODE"), shutil.which("node")):
        if not cand or not os.path.exists(cand):
            continue
        m = re.match(r"v(\d+)\.(\d+)", _version([cand, "--version"]))
        if m and (int(m.group(1)), int(m.group(2))) >= NODE_MIN:
            return cand
    return None


@functools.lru_cache(maxsize=None)
def find_pi() -> Optional[str]:
    node = find_node()
    if node is None:
        return None
    cached = _cache_env()
    for cand in (os.environ.get("AGENT_BRIDGE_PI"), cached.get("AGENT_BRIDGE_PI"), shutil.which("pi")):
        if not cand or not os.path.exists(cand):
            continue
        env = dict(os.environ, PATH=os.path.dirname(node) + os.pathsep + os.environ.get("PATH", ""),
                   PI_OFFLINE="1", PI_SKIP_VERSION_CHECK="1", PI_TELEMETRY="0")
        try:
            out = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=60, env=env).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        if out.strip().splitlines()[-1:] == [PI_VERSION]:
            return cand
    return None


PI_PACKAGE = os.path.join("@earendil-works", "pi-coding-agent")


def _modules_of(path: str) -> Optional[str]:
    """The node_modules folder above ``path`` that holds pi's package at the pinned version."""
    parts = os.path.realpath(path).split(os.sep)
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] == "node_modules":
            modules = os.sep.join(parts[:i + 1])
            try:
                with open(os.path.join(modules, PI_PACKAGE, "package.json"), encoding="utf-8") as f:
                    if json.load(f).get("version") == PI_VERSION:
                        return modules
            except (OSError, ValueError):
                pass
    return None


@functools.lru_cache(maxsize=None)
def find_pi_modules() -> Optional[str]:
    explicit = os.environ.get("AGENT_BRIDGE_PI_MODULES")
    if explicit:
        return explicit if os.path.isfile(os.path.join(explicit, PI_PACKAGE, "package.json")) else None
    pi = find_pi()
    if pi is None:
        return None
    candidates = [pi]
    try:  # scripts/install-pi.sh's wrapper: exec '<node>' '<.../node_modules/@earendil-works/.../cli.js>' "$@"
        with open(pi, encoding="utf-8", errors="replace") as f:
            candidates += re.findall(r"'([^']*node_modules[^']*)'", f.read(4096))
    except OSError:
        pass
    for cand in candidates:
        found = _modules_of(cand)
        if found:
            return found
    return None


@pytest.fixture
def node22() -> str:
    node = find_node()
    if node is None:
        pytest.skip(missing_peer("Node 22", "needs Node >= 22.19 (run scripts/install-pi.sh, or set AGENT_BRIDGE_NODE)"))
    return node


@pytest.fixture
def pi_cli(node22) -> str:
    pi = find_pi()
    if pi is None:
        pytest.skip(missing_peer("pi", f"needs pi {PI_VERSION} (run scripts/install-pi.sh, or set AGENT_BRIDGE_PI)"))
    return pi


@pytest.fixture
def pi_modules(pi_cli) -> str:
    modules = find_pi_modules()
    if modules is None:
        pytest.skip(missing_peer("pi", f"needs pi {PI_VERSION}'s node_modules (run scripts/install-pi.sh, or set AGENT_BRIDGE_PI_MODULES)"))
    return modules
