"""Which real peers a pytest selection needs: the table scripts/test asks before installing anything.

    python3 -m tests.needs [pytest arguments]     # one line per needed peer: <peer>=<the tests needing it>

``NEEDS`` maps every folder of tests/ (and every test file directly in it) to the peers its tests run
against; a file named on its own refines its folder (the folder's entry covers its other files). A
peer is a name of scripts/install-peers (scripts/install-<peer>.sh). tests/ci/test_needs.py checks
that every test file is covered, so a new folder without an entry fails there.

The rule, from the pytest command line:

- the named paths and node ids below tests/ select the entries they overlap; no path, tests/ itself
  or a folder above it is the whole suite (every peer);
- ``-m`` with a peer marker (``-m pi``, ``-m "hermes or browser"``) keeps only the entries of
  ``MARKED``; any other expression, and ``-k``, only deselect tests, so the paths' peers stand;
- what it cannot judge (an option it does not know, ``--pyargs``, a path that is not there or lies
  outside tests/) is every peer, with the reason on stderr: never fewer peers than the tests need.

Pure and standard library only: it runs with the system's python3 before the test venv exists.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple, Sequence

TESTS = Path(__file__).resolve().parent

# scripts/install-peers' order
ALL = ("hermes", "pi", "browser", "postgresql", "redis", "caddy", "nginx")

NEEDS: dict[str, tuple[str, ...]] = {
    "bench": (),
    "browser": ("browser",),
    "ci": (),
    "cli": (),
    "conformance": (),
    "core": (),
    "fakes": (),
    "hardening": (),
    "hermes": (),  # the plugin's unit tests import no Hermes
    "hermes/test_gateway_data_dir.py": ("hermes",),
    "hermes/test_gateway_e2e.py": ("hermes",),
    "loomi": (),
    "lvmh": (),
    "lvmh/test_extension_interop.py": ("pi",),  # Node 22, which scripts/install-pi.sh installs
    "nemesis": ("postgresql", "redis"),
    "pheby": (),
    "pi": ("pi",),
    "push": (),
    "remote": (),
    "remote/test_proxies.py": ("caddy", "nginx"),
    "remote/test_proxy_browser.py": ("browser", "nginx"),
    "scale": ("postgresql", "redis"),
    "security": (),
    "store": ("postgresql",),
    "test_architecture.py": (),
    "test_docs.py": (),
    "test_hangs.py": (),
    "test_sizes.py": (),
}

# the peer markers of pyproject.toml: the entries holding the tests that carry each one
MARKED: dict[str, tuple[str, ...]] = {
    "hermes": ("hermes/test_gateway_data_dir.py", "hermes/test_gateway_e2e.py"),
    "pi": ("pi",),
    "browser": ("browser", "remote/test_proxy_browser.py"),
}

# pytest's options (its own and its plugins' here): those taking no value, and those taking one
FLAGS = frozenset("""
    -h -l -q -s -v -x -V --help --version --verbose --quiet --exitfirst --showlocals --no-showlocals --pdb --trace
    --co --collect-only --collectonly --fixtures --funcargs --fixtures-per-test --markers --lf --last-failed --ff
    --failed-first --nf --new-first --sw --stepwise --sw-skip --stepwise-skip --sw-reset --stepwise-reset
    --cache-clear --setup-only --setuponly --setup-plan --setupplan --setup-show --setupshow --runxfail
    --strict --strict-config --strict-markers --full-trace --fulltrace --force-short-summary --no-header
    --no-summary --no-fold-skipped --xfail-tb --disable-warnings --disable-pytest-warnings --noconftest
    --keep-duplicates --keepduplicates --collect-in-virtualenv --continue-on-collection-errors --trace-config
    --traceconfig --disable-plugin-autoload --doctest-modules --doctest-continue-on-failure
    --doctest-ignore-import-errors --asyncio-debug --hypothesis-explain --hypothesis-show-statistics
""".split())
VALUED = frozenset("""
    -c -k -m -o -p -r -W --assert --asyncio-mode --basetemp --capture --code-highlight --color --confcutdir
    --config-file --deselect --doctest-glob --doctest-report --durations --durations-min --hypothesis-profile
    --hypothesis-seed --hypothesis-verbosity --ignore --ignore-glob --import-mode --junit-prefix --junitprefix
    --junit-xml --junitxml --last-failed-no-failures --lfnf --log-auto-indent --log-cli-date-format
    --log-cli-format --log-cli-level --log-date-format --log-disable --log-file --log-file-date-format
    --log-file-format --log-file-level --log-file-mode --log-format --log-level --max-warnings --maxfail
    --override-ini --pastebin --pdbcls --pythonwarnings --report-chars --rootdir --show-capture --tb --verbosity
""".split())


class Verdict(NamedTuple):
    peers: dict[str, list[str]]  # peer -> the entries needing it, as tests/... paths; in ALL's order
    note: str  # why every peer is needed when the command line could not be judged, else ""


class _Unjudged(Exception):
    pass


def _parse(args: Sequence[str]) -> tuple[list[str], str]:
    """The positional arguments and the last ``-m`` expression of a pytest command line."""
    paths: list[str] = []
    markexpr = ""
    it = iter(args)
    for arg in it:
        if arg == "--":
            paths.extend(it)
            break
        if not arg.startswith("-") or arg == "-":
            paths.append(arg)
            continue
        name, value = _option(arg, it)
        if name == "-m":
            markexpr = value
    return paths, markexpr


def _option(arg: str, rest) -> tuple[str, str]:
    """(name, value) of the option ``arg`` (its value taken from ``rest`` when it is the next argument)."""
    if arg.startswith("--"):
        name, eq, value = arg.partition("=")
        if name in FLAGS and not eq:
            return name, ""
        if name not in VALUED:
            raise _Unjudged(f"{name} is not an option the table knows")
        return name, value if eq else next(rest, "")
    for i, letter in enumerate(arg[1:], 1):  # a cluster of short options: -xq, -rs, -kname, -m pi
        name = "-" + letter
        if name in VALUED:
            return name, arg[i + 1:] or next(rest, "")
        if name not in FLAGS:
            raise _Unjudged(f"{name} is not an option the table knows")
    return arg, ""


def _region(arg: str, cwd: Path) -> str:
    """The path below tests/ a positional argument names ("" for tests/ itself or a folder above it)."""
    path = (cwd / arg.split("::", 1)[0]).resolve()
    if path == TESTS or path in TESTS.parents:
        return ""
    if TESTS not in path.parents:
        raise _Unjudged(f"{arg} is not below {TESTS}")
    if not path.exists():
        raise _Unjudged(f"{arg} does not exist")
    rel = path.relative_to(TESTS).as_posix()
    if rel.split("/", 1)[0] not in NEEDS:
        raise _Unjudged(f"tests/{rel} has no entry in the table (tests/needs.py NEEDS)")
    return rel


def _overlap(key: str, region: str) -> bool:
    return region == "" or key == region or key.startswith(region + "/") or region.startswith(key + "/")


def _markers(markexpr: str) -> tuple[str, ...] | None:
    """The entries a peer-marker expression keeps (``pi``, ``hermes or browser``), else None (all)."""
    names = re.split(r"\s+or\s+", markexpr.strip())
    if not markexpr.strip() or not all(name in MARKED for name in names):
        return None
    return tuple(key for name in names for key in MARKED[name])


def _gather(keys) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key in keys:
        for peer in NEEDS[key]:
            out.setdefault(peer, []).append(f"tests/{key}")
    return {peer: out[peer] for peer in ALL if peer in out}


def judge(args: Sequence[str], cwd: Path | str = ".") -> Verdict:
    """The peers the tests a pytest command line (``args``, run from ``cwd``) selects need."""
    try:
        if "--pyargs" in args:
            raise _Unjudged("--pyargs names modules, not paths")
        paths, markexpr = _parse(args)
        regions = [_region(arg, Path(cwd)) for arg in paths] or [""]
    except _Unjudged as why:
        return Verdict(_gather(NEEDS), f"cannot judge the selection ({why}): every peer")
    marked = _markers(markexpr)
    keys = [key for key in NEEDS if any(_overlap(key, r) for r in regions)
            and (marked is None or any(_overlap(key, m) for m in marked))]
    return Verdict(_gather(keys), "")


def main(argv: Sequence[str]) -> int:
    verdict = judge(argv, Path.cwd())
    if verdict.note:
        print(f"tests.needs: {verdict.note}", file=sys.stderr)
    for peer, where in verdict.peers.items():
        print(f"{peer}={', '.join(where)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
