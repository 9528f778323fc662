"""Under CI a missing peer fails the run; elsewhere its tests skip with the reason.

The installs are forced to fail hermetically (the Hermes venv pointed below a regular file, so
scripts/install-hermes.sh stops before any network access), and the pytest side runs a one-test
file in a subprocess: nothing here runs the real suite or installs anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 120  # upper bound for a subprocess to finish; never a timing assertion


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the Hermes venv's parent folder should be\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "AGENT_BRIDGE_CI", "AGENT_BRIDGE_REQUIRE_PEERS", "AGENT_BRIDGE_FULL", "AGENT_BRIDGE_PEERS")}
    env.update(AGENT_BRIDGE_CACHE=str(tmp_path / "cache"), AGENT_BRIDGE_HERMES_VENV=str(blocker / "hermes-venv"),
               AGENT_BRIDGE_PEERS="hermes")
    env.update(extra)
    return env


def _run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT)


def test_failed_peer_install_fails_the_run_under_ci(tmp_path):
    done = _run(["./scripts/test", "-q"], _env(tmp_path, CI="true"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "peer Hermes could not be installed" in done.stderr
    assert "scripts/install-hermes.sh failed: install-hermes: error: cannot create" in done.stderr
    assert "missing peers: Hermes" in done.stderr
    assert "not running the tests" in done.stderr
    assert not (tmp_path / "cache" / "venv").exists()  # stopped before the test venv and pytest


def test_the_ci_flag_of_ci_run_is_enough(tmp_path):
    done = _run(["./scripts/install-peers"], _env(tmp_path, AGENT_BRIDGE_REQUIRE_PEERS="1"))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "missing peers: Hermes" in done.stderr
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert "export AGENT_BRIDGE_CI=1" in ci_run and "exec ./scripts/test -q" in ci_run
    case = (ROOT / "scripts" / "test").read_text()
    assert "AGENT_BRIDGE_CI" in case and "export AGENT_BRIDGE_REQUIRE_PEERS=1" in case


def test_failed_peer_install_is_a_note_outside_ci(tmp_path):
    done = _run(["./scripts/install-peers"], _env(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "note: peer Hermes is not installed" in done.stderr
    assert "the tests needing it will skip" in done.stderr
    assert "cannot create" in (tmp_path / "cache" / "install-hermes.log").read_text()


PEER_TESTS = '''
import pytest
from tests.peers import missing_peer

def test_needs_hermes():
    pytest.skip(missing_peer("Hermes", "Hermes venv not installed; run scripts/install-hermes.sh"))

@pytest.mark.skipif(True, reason=missing_peer("Node 22", "needs Node >= 22"))
def test_needs_node():
    pass

def test_needs_root():
    pytest.skip("needs root to mount a small tmpfs")
'''


def _pytest_peer_file(tmp_path: Path, **extra: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_peer_skips.py").write_text(PEER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    env = _env(tmp_path, **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return _run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "tests.peers",
                 "-c", str(tmp_path / "pytest.ini"), str(tmp_path / "test_peer_skips.py")], env)


def test_peer_skips_fail_when_peers_are_required(tmp_path):
    done = _pytest_peer_file(tmp_path, AGENT_BRIDGE_REQUIRE_PEERS="1")
    assert done.returncode == 1, done.stdout + done.stderr
    # a skip in the call is a failure, one in setup (skipif, a fixture) an error: both fail the run
    assert "1 failed, 1 skipped, 1 error" in done.stdout, done.stdout
    assert "peer missing: Hermes: Hermes venv not installed" in done.stdout
    assert "peer missing: Node 22: needs Node >= 22" in done.stdout
    assert "needs root to mount a small tmpfs" in done.stdout  # not a peer: still a skip


def test_peer_skips_stay_skips_by_default(tmp_path):
    done = _pytest_peer_file(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 skipped" in done.stdout, done.stdout
    assert "peer missing: Hermes" in done.stdout  # -rs shows the reason
