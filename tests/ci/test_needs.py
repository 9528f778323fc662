"""The peers a selection needs (tests/needs.py): the rule scripts/test asks before installing anything.

Pure: pytest command lines in, peer names out, against this checkout's tests/ folder. The last
tests check the table against the tree, so a new test folder (or a new peer marker) without an
entry fails here.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import pytest

from tests.needs import ALL, MARKED, NEEDS, TESTS, judge

ROOT = TESTS.parent
TIMEOUT = 60  # upper bound for a subprocess to finish; never a timing assertion


def peers(*args: str) -> set[str]:
    verdict = judge(args, ROOT)
    assert verdict.note == "", verdict.note
    return set(verdict.peers)


def test_a_pheby_selection_needs_no_peer():
    assert peers("tests/pheby", "-q") == set()
    assert peers("tests/pheby/test_chat.py::test_chat_streams", "-x") == set()
    assert peers("-p", "no:cacheprovider", "tests/pheby", "tests/conformance", "tests/core") == set()


def test_the_several_nodes_suites_need_postgresql_and_redis():
    assert peers("tests/scale") == {"postgresql", "redis"}
    assert peers("tests/store") == {"postgresql"}  # its Redis is a dead port (tests/store/test_service.py)
    assert peers("tests/scale", "tests/pheby") == {"postgresql", "redis"}


@pytest.mark.parametrize("args", [(), ("-q",), ("tests",), ("tests/",), (".",), (str(ROOT),), ("-k", "pheby"),
                                  ("-m", "not hardening"), ("-x", "-q", "-p", "no:cacheprovider")])
def test_the_whole_suite_needs_every_peer(args):
    verdict = judge(args, ROOT)
    assert list(verdict.peers) == list(ALL) and verdict.note == ""


def test_the_whole_suite_says_which_tests_need_each_peer():
    where = judge(["-q"], ROOT).peers  # what .ci/run's ./scripts/test -q installs
    assert where["hermes"] == ["tests/hermes/test_gateway_data_dir.py", "tests/hermes/test_gateway_e2e.py"]
    assert where["pi"] == ["tests/lvmh/test_extension_interop.py", "tests/pi"]
    assert where["caddy"] == ["tests/remote/test_proxies.py"]


def test_a_file_refines_its_folder():
    assert peers("tests/lvmh") == {"pi"}  # one file runs the pi extension under Node 22
    assert peers("tests/lvmh/test_rest.py") == set()
    assert peers("tests/lvmh/test_extension_interop.py::test_x") == {"pi"}
    assert peers("tests/hermes/test_plugin_unit.py") == set()
    assert peers("tests/hermes") == {"hermes"}
    assert peers("tests/remote/test_proxy_browser.py::test_web_ui_and_its_socket_through_nginx") == {"browser", "nginx"}
    assert peers("tests/remote") == {"browser", "caddy", "nginx"}


def test_option_values_are_not_paths():
    assert peers("-k", "tests/scale", "tests/pheby") == set()
    assert peers("-ktests/scale", "--tb=short", "-rs", "-xq", "--maxfail", "2", "tests/pheby") == set()
    assert peers("--deselect", "tests/scale/test_bus.py", "tests/pheby") == set()
    assert peers("-o", "testpaths=tests/scale", "tests/pheby") == set()
    assert peers("--", "tests/scale") == {"postgresql", "redis"}


def test_a_peer_marker_narrows_and_other_expressions_leave_the_paths():
    assert peers("-m", "pi") == {"pi"}
    assert peers("-mhermes") == {"hermes"}
    assert peers("-m", "hermes or pi") == {"hermes", "pi"}
    assert peers("-m", "browser") == {"browser", "nginx"}  # tests/remote's browser test goes through nginx
    assert peers("-m", "browser", "tests/remote") == {"browser", "nginx"}
    assert peers("-m", "pi", "tests/pheby") == set()
    assert peers("-m", "hardening", "tests/scale") == {"postgresql", "redis"}
    assert peers("-m", "not pi", "tests/pi") == {"pi"}  # not judged: the paths' peers stand
    assert peers("-m", "pi", "-m", "hermes") == {"hermes"}  # pytest keeps the last -m


@pytest.mark.parametrize("args, why", [
    (("--no-such-option", "tests/pheby"), "--no-such-option is not an option the table knows"),
    (("-Z", "tests/pheby"), "-Z is not an option the table knows"),
    (("--debug", "tests/pheby"), "--debug is not an option the table knows"),  # its value is optional
    (("--pyargs", "tests.pheby"), "--pyargs names modules"),
    (("tests/no-such-folder",), "tests/no-such-folder does not exist"),
    (("/proc",), "/proc is not below"),  # outside the checkout, wherever it lies
    (("bench",), "bench is not below"),
])
def test_what_it_cannot_judge_needs_every_peer_and_says_why(args, why):
    verdict = judge(args, ROOT)
    assert list(verdict.peers) == list(ALL)
    assert verdict.note.startswith("cannot judge the selection (") and why in verdict.note, verdict.note


def test_a_folder_without_an_entry_is_every_peer(tmp_path, monkeypatch):
    monkeypatch.delitem(NEEDS, "pheby")
    verdict = judge(["tests/pheby"], ROOT)
    assert list(verdict.peers) == list(ALL) and "tests/pheby has no entry in the table" in verdict.note


def test_every_test_file_is_covered_by_the_table():
    files = sorted(p.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py"))
    assert files
    uncovered = [f for f in files if f.split("/", 1)[0] not in NEEDS]
    assert not uncovered, f"add an entry to tests/needs.py NEEDS for: {uncovered}"
    folders = {p.parent.relative_to(TESTS).as_posix() for p in TESTS.rglob("test_*.py") if p.parent != TESTS}
    assert folders <= set(NEEDS)


def test_every_entry_names_a_real_path_and_known_peers():
    for key, needed in NEEDS.items():
        assert (TESTS / key).exists(), key
        assert set(needed) <= set(ALL), key
    for marker, keys in MARKED.items():
        assert all(any(k == key or k.startswith(key + "/") for key in NEEDS) for k in keys), marker


def test_every_peer_marker_is_in_the_table_with_every_test_carrying_it():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    names = {line.split(":", 1)[0] for line in declared} - {"hardening"}
    assert set(MARKED) == names
    for path in TESTS.rglob("test_*.py"):
        rel = path.relative_to(TESTS).as_posix()
        for marker in set(re.findall(r"pytest\.mark\.(\w+)", path.read_text())) & names:
            assert any(rel == key or rel.startswith(key + "/") for key in MARKED[marker]), (rel, marker)


def test_install_peers_default_is_every_peer():
    text = (ROOT / "scripts" / "install-peers").read_text()
    default = re.search(r"AGENT_BRIDGE_PEERS:-([a-z ]+)\}", text).group(1).split()
    assert default == list(ALL)
    for peer in ALL:
        assert (ROOT / "scripts" / f"install-{peer}.sh").exists(), peer


def test_it_runs_without_pytest_before_the_test_venv_exists():
    """scripts/test runs ``python3 -m tests.needs ARGS``: -S keeps site-packages (and so pytest) away."""
    done = subprocess.run([sys.executable, "-S", "-m", "tests.needs", "-q", "tests/scale"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "postgresql=tests/scale\nredis=tests/scale\n" and done.stderr == ""
    done = subprocess.run([sys.executable, "-S", "-m", "tests.needs", "--bogus"], cwd=ROOT,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0 and len(done.stdout.splitlines()) == len(ALL)
    assert done.stderr == "tests.needs: cannot judge the selection (--bogus is not an option the table knows): every peer\n"
