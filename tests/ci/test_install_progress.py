"""scripts/test installs only what the selection needs, one line a peer, and reuses what is there.

The real scripts/test, scripts/install-peers and tests/needs.py run from a copy of the checkout in a
temporary folder whose installers (scripts/install-<peer>.sh) are fakes: a peer is "installed" once
its mark file exists in the cache, every real install is logged, and the test venv's python only
prints the pytest command it was given. The test venv's own check (scripts/install-venv.sh --check)
runs against bare venvs holding only package metadata. Nothing is installed and no test suite runs.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from tests.needs import ALL, NEEDS

ROOT = Path(__file__).resolve().parents[2]  # resolved, as scripts/install-venv.sh's pwd -P
TIMEOUT = 120  # upper bound for a subprocess to finish; never a timing assertion
TOOK = r"ok, \d+(\.\d)? s"

FAKE_INSTALLER = r"""#!/usr/bin/env bash
# fake: installed once $AGENT_BRIDGE_CACHE/<peer>.installed exists; FAIL=<peer> makes its install fail
peer=$(basename "$0" .sh); peer=${peer#install-}
mark="$AGENT_BRIDGE_CACHE/$peer.installed"
if [ "${1:-}" = --check ]; then [ -f "$mark" ]; exit; fi
echo "$peer" >>"$AGENT_BRIDGE_CACHE/installs"
if [ "${FAIL:-}" = "$peer" ]; then echo "install-$peer: error: no network"; exit 1; fi
if [ "$peer" = venv ]; then
  mkdir -p "$AGENT_BRIDGE_CACHE/venv/bin"
  printf '#!/bin/sh\necho "ran: python $*"\n' >"$AGENT_BRIDGE_CACHE/venv/bin/python"
  chmod +x "$AGENT_BRIDGE_CACHE/venv/bin/python"
fi
touch "$mark"
"""


def _checkout(tmp_path: Path) -> Path:
    """A copy of what scripts/test runs, with fake installers and tests/ holding the table's paths."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("test", "install-peers"):
        shutil.copy2(ROOT / "scripts" / name, root / "scripts" / name)
    for peer in (*ALL, "venv"):
        (root / "scripts" / f"install-{peer}.sh").write_text(FAKE_INSTALLER)
    (root / "tests").mkdir()
    for name in ("__init__.py", "needs.py"):
        shutil.copy2(ROOT / "tests" / name, root / "tests" / name)
    for key in NEEDS:
        path = root / "tests" / key
        if key.endswith(".py"):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        else:
            path.mkdir(parents=True, exist_ok=True)
    return root


def _test(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items()
            if k not in ("CI", "AGENT_BRIDGE_CI", "AGENT_BRIDGE_REQUIRE_PEERS", "AGENT_BRIDGE_PEERS", "FAIL")}
    base["AGENT_BRIDGE_CACHE"] = str(root.parent / "cache")
    return subprocess.run([str(root / "scripts" / "test"), *args], cwd=root, env={**base, **env},
                          capture_output=True, text=True, timeout=TIMEOUT)


def _installs(root: Path) -> list[str]:
    log = root.parent / "cache" / "installs"
    return log.read_text().split() if log.exists() else []


def test_a_pheby_selection_installs_no_peer_and_says_so(tmp_path):
    root = _checkout(tmp_path)
    done = _test(root, "tests/pheby", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "scripts/test: no peers needed by this selection (tests/needs.py)"
    assert re.fullmatch(r"installing the test venv \(agent-bridge\[test\], editable\)\.\.\. " + TOOK, lines[1]), lines
    assert lines[2:] == ["ran: python -m pytest tests/pheby -q"]
    assert _installs(root) == ["venv"]  # no Hermes, no Node + pi, no Chromium, no engines, no proxies


def test_the_whole_suite_installs_every_peer_with_its_tests_then_finds_them_cached(tmp_path):
    root = _checkout(tmp_path)
    done = _test(root, "-q", AGENT_BRIDGE_CI="1")  # what .ci/run runs
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"installing Hermes \(needed by tests/hermes/test_gateway_data_dir\.py, tests/hermes/test_gateway_e2e\.py\)\.\.\. " + TOOK, lines[0])
    assert re.fullmatch(r"installing pi \(Node 22 \+ the pi coding agent; needed by "
                        r"tests/lvmh/test_extension_interop\.py, tests/pi\)\.\.\. " + TOOK, lines[1])
    assert re.fullmatch(r"installing PostgreSQL \(Debian's postgresql; needed by tests/nemesis, tests/scale, tests/store\)\.\.\. "
                        + TOOK, lines[3])
    # the whole suite: two pytest processes at once, tests/scale and tests/nemesis beside the rest (scripts/test)
    assert len(lines) == len(ALL) + 4 and all(re.search(TOOK + "$", line) for line in lines[:-3])
    assert lines[-3:] == ["ran: python -m pytest -q --ignore=tests/scale --ignore=tests/nemesis",
                          "== tests/scale and tests/nemesis, run beside the rest:",
                          "ran: python -m pytest -p no:cacheprovider -q tests/scale tests/nemesis"]
    assert _installs(root) == [*ALL, "venv"]

    again = _test(root, "-q", AGENT_BRIDGE_CI="1")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [line.rsplit("... ", 1)[1] for line in again.stdout.splitlines()[:-3]] == ["cached"] * (len(ALL) + 1)

    serial = _test(root, "-q", AGENT_BRIDGE_CI="1", AGENT_BRIDGE_SERIAL="1")
    assert serial.stdout.splitlines()[-1] == "ran: python -m pytest -q"
    assert _installs(root) == [*ALL, "venv"]  # the checks found everything: nothing installed twice


def test_a_peer_that_went_missing_is_installed_again(tmp_path):
    root = _checkout(tmp_path)
    assert _test(root, "tests/scale").returncode == 0
    (root.parent / "cache" / "redis.installed").unlink()
    done = _test(root, "tests/scale")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "installing PostgreSQL (Debian's postgresql; needed by tests/scale)... cached"
    assert re.fullmatch(r"installing Redis \(Debian's redis-server; needed by tests/scale\)\.\.\. " + TOOK, lines[1])
    assert _installs(root) == ["postgresql", "redis", "venv", "redis"]


def test_a_failed_peer_is_a_note_outside_ci_and_stops_the_run_under_ci(tmp_path):
    root = _checkout(tmp_path)
    done = _test(root, "tests/hermes", FAIL="hermes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.match(r"installing Hermes \(needed by tests/hermes/test_gateway_data_dir\.py, tests/hermes/test_gateway_e2e\.py\)\.\.\. failed, \d", done.stdout)
    assert "note: peer Hermes is not installed: scripts/install-hermes.sh failed: install-hermes: error: no network" \
        in done.stderr
    assert done.stdout.endswith("ran: python -m pytest tests/hermes\n")  # its tests skip, with the reason

    under_ci = _test(root, "tests/hermes", FAIL="hermes", CI="true")
    assert under_ci.returncode == 1, under_ci.stdout + under_ci.stderr
    assert "missing peers: Hermes" in under_ci.stderr and "not running the tests" in under_ci.stderr
    assert "ran: python" not in under_ci.stdout


def test_the_test_venv_failing_always_stops_the_run(tmp_path):
    root = _checkout(tmp_path)
    done = _test(root, "tests/pheby", FAIL="venv")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "install-peers: error: the test venv (agent-bridge[test], editable) could not be installed: " \
           "scripts/install-venv.sh failed: install-venv: error: no network" in done.stderr
    assert "ran: python" not in done.stdout


def test_agent_bridge_peers_chooses_the_peers(tmp_path):
    root = _checkout(tmp_path)
    done = _test(root, "tests/scale", AGENT_BRIDGE_PEERS="pi")
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.fullmatch(r"installing pi \(Node 22 \+ the pi coding agent\)\.\.\. " + TOOK, done.stdout.splitlines()[0])
    assert _installs(root) == ["pi", "venv"]


def _fake_venv(cache: Path, url: str) -> Path:
    """A venv holding agent-bridge (editable from ``url``) and its requirements as bare metadata."""
    venv = cache / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=TIMEOUT)
    site = next(venv.glob("lib/python*/site-packages"))
    metadata = {"agent_bridge-0.1.0": "Name: agent-bridge\nVersion: 0.1.0\nRequires-Dist: aiohttp>=3.14\n"
                                      "Requires-Dist: pytest>=8; extra == \"test\"\n"
                                      "Requires-Dist: hermes-agent>=0.19; extra == \"hermes\"\n",
                "aiohttp-3.14.0": "Name: aiohttp\nVersion: 3.14.0\n", "pytest-8.3.0": "Name: pytest\nVersion: 8.3.0\n"}
    for name, text in metadata.items():
        (site / f"{name}.dist-info").mkdir()
        (site / f"{name}.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\n" + text)
    (site / "agent_bridge-0.1.0.dist-info" / "direct_url.json").write_text(
        json.dumps({"url": url, "dir_info": {"editable": True}}))
    stamp = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    (venv / ".agent-bridge-test-stamp").write_text(f"{ROOT} {stamp}\n")
    return site


def _venv_check(cache: Path) -> int:
    return subprocess.run(["bash", str(ROOT / "scripts" / "install-venv.sh"), "--check"], capture_output=True,
                          env={**os.environ, "AGENT_BRIDGE_CACHE": str(cache)}, timeout=TIMEOUT).returncode


def test_the_test_venv_is_current_only_with_this_checkout_and_every_requirement(tmp_path):
    site = _fake_venv(tmp_path / "current", f"file://{ROOT}")
    assert _venv_check(tmp_path / "current") == 0  # the hermes extra's requirement is not needed
    shutil.rmtree(site / "pytest-8.3.0.dist-info")
    assert _venv_check(tmp_path / "current") == 1  # a test requirement gone: install again

    _fake_venv(tmp_path / "elsewhere", "file:///work/another-checkout")
    assert _venv_check(tmp_path / "elsewhere") == 1  # installed from another checkout

    _fake_venv(tmp_path / "stale", f"file://{ROOT}")
    (tmp_path / "stale" / "venv" / ".agent-bridge-test-stamp").write_text(f"{ROOT} 0123456789abcdef\n")
    assert _venv_check(tmp_path / "stale") == 1  # pyproject.toml changed since
    assert _venv_check(tmp_path / "none") == 1  # no venv at all


def test_a_pytest_process_that_never_ends_is_stopped_at_the_limit_and_what_ran_is_shown(tmp_path):
    root = _checkout(tmp_path)
    assert _test(root, "tests/pheby").returncode == 0  # the fake venv in place
    python = root.parent / "cache" / "venv" / "bin" / "python"  # the beside process never ends
    python.write_text('#!/bin/sh\necho "ran: python $*"\ncase "$*" in *nemesis*) exec sleep 600;; esac\n')
    done = _test(root, "-q", AGENT_BRIDGE_CI="1", AGENT_BRIDGE_SUITE_LIMIT="2")
    assert done.returncode == 124, done.stdout + done.stderr
    assert done.stdout.splitlines()[-2:] == ["== tests/scale and tests/nemesis, run beside the rest:",
                                             "ran: python -m pytest -p no:cacheprovider -q tests/scale tests/nemesis"]
    assert "scripts/test: tests/scale and tests/nemesis were stopped after 2 s" in done.stderr
