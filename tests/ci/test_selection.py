"""Plain ``pytest`` leaves the slow hardening suite out (and says so); the whole suite is one switch away.

Collection only (``--collect-only``), in a subprocess, of tests/ without its big folders and
narrowed with ``-k`` to one hardening test and one fast test: nothing runs.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # upper bound for a subprocess to finish; never a timing assertion
PICK = "test_soak or test_redact_never_leaves_a_secret_key_value"
SOAK = "tests/hardening/test_soak.py::test_soak"
FAST = "tests/core/test_redact.py::test_redact_never_leaves_a_secret_key_value"
# "tests" itself (what a bare ``pytest`` collects), without the folders that only cost import time
TREE = ["tests", *(f"--ignore=tests/{d}" for d in ("browser", "cli", "conformance", "fakes", "hermes", "loomi", "lvmh",
                                                    "pheby", "pi", "security", "ci"))]


def _collect(*args: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("AGENT_BRIDGE_FULL", "PYTEST_ADDOPTS")}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_default_run_deselects_the_hardening_suite_and_says_how_to_run_it():
    out = _collect(*TREE, "-k", PICK)
    assert FAST in out and SOAK not in out
    assert "1 slow test (marker 'hardening') deselected by default" in out
    assert "AGENT_BRIDGE_FULL=1" in out


def test_the_full_run_and_a_marker_expression_select_it():
    assert SOAK in _collect(*TREE, "-k", PICK, AGENT_BRIDGE_FULL="1")
    out = _collect(*TREE, "-m", "hardening", "-k", PICK)
    assert SOAK in out and FAST not in out


def test_naming_the_hardening_suite_selects_it():
    out = _collect(SOAK, "tests/core/test_redact.py")
    assert SOAK in out and FAST in out and "deselected by default" not in out
