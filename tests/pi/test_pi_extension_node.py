"""The lvmh pi extension's own Node test suite (node --test), run with Node >= 22."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.pi.conftest import EXTENSION_DIR

pytestmark = pytest.mark.pi


def test_extension_node_suite(node22, tmp_path):
    env = dict(os.environ, HOME=str(tmp_path), LVMH_LOG=str(tmp_path / "lvmh-agent.log"))
    for var in ("LVMH_URL", "LVMH_TOKEN", "LVMH_TOKEN_FILE", "LVMH_DISABLE", "LVMH_AGENT", "LVMH_REPO"):
        env.pop(var, None)
    proc = subprocess.run(
        [node22, "--test", "--test-reporter=tap", "--test-concurrency=2", "test/*.test.mjs"],
        cwd=EXTENSION_DIR, env=env, capture_output=True, text=True, timeout=300,
    )
    out = proc.stdout + proc.stderr
    counts = {k: int(v) for k, v in re.findall(r"^# (tests|pass|fail|cancelled) (\d+)$", out, re.M)}
    assert proc.returncode == 0 and counts.get("fail") == 0 and counts.get("cancelled") == 0, out[-6000:]
    assert counts.get("pass", 0) >= 40, out[-3000:]
