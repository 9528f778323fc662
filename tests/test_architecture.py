"""The layering of docs/architecture.md, checked: import-linter's contracts in pyproject.toml.

Hosts (``agent_bridge_cli``: the CLI and the Hermes plugin) above the front ends above
``bridge_core``; the three front ends independent; the modules a "forbidden" contract names
(protocol logic without sockets) free of what it forbids. A crossing import fails this test with
import-linter's report. The contracts are run against this checkout's code (a folder of
links with the import names, as ``cli/`` installs as ``agent_bridge_cli``), and once against
a tree with deliberate crossings, so a contract that no longer checks anything fails too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"bridge_core": "bridge_core", "pheby_adapter": "pheby_adapter", "loomi_adapter": "loomi_adapter",
            "lvmh_adapter": "lvmh_adapter", "agent_bridge_cli": "cli"}
LINT = (
    "import sys\n"
    "from importlinter.cli import lint_imports\n"
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))\n"
)

try:  # part of the test extra like pytest itself: missing, this fails rather than skips (CI must check layers)
    import importlinter  # noqa: F401
except ImportError as exc:  # pragma: no cover
    raise ImportError("import-linter is missing: pip install -e '.[test]'") from exc


def lint(cwd: str, pythonpath: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": pythonpath}
    return subprocess.run([sys.executable, "-c", LINT], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_import_contracts_hold(tmp_path):
    links = tmp_path / "packages"
    links.mkdir()
    for name, folder in PACKAGES.items():
        os.symlink(os.path.join(ROOT, folder), links / name)
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    done = lint(str(tmp_path), str(links))
    report = done.stdout + done.stderr
    assert done.returncode == 0, f"a layering contract is broken (docs/architecture.md):\n{report}"
    assert f"{len(contracts())} kept, 0 broken" in report, report


def contracts() -> list[dict]:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["tool"]["importlinter"]["contracts"]


def module_file(tree, module: str):
    """The file of ``module`` in ``tree`` (its packages made), for a tree of deliberate crossings."""
    *packages, name = module.split(".")
    folder = tree
    for part in packages:
        folder = folder / part
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "__init__.py").touch()
    return folder / f"{name}.py"


def test_contracts_catch_crossings(tmp_path):
    tree = tmp_path / "packages"
    crossings = {
        "bridge_core": "import pheby_adapter\n",  # the core reaching up
        "pheby_adapter": "import bridge_core\n",
        "loomi_adapter": "import bridge_core\n",
        "lvmh_adapter": "import loomi_adapter\n",  # one front end using another
        "agent_bridge_cli": "import bridge_core, pheby_adapter\n",
    }
    for name, body in crossings.items():
        module_file(tree, f"{name}.mod").write_text(body)
    forbidden = [c for c in contracts() if c["type"] == "forbidden"]
    for c in forbidden:  # every module a "forbidden" contract names, its first one importing what is forbidden
        for module in c["source_modules"] + [m for m in c["forbidden_modules"] if m.split(".")[0] in PACKAGES]:
            f = module_file(tree, module)
            if not f.exists():
                f.write_text("")
        module_file(tree, c["source_modules"][0]).write_text(f"import {c['forbidden_modules'][0]}\n")
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), tmp_path / "pyproject.toml")
    done = lint(str(tmp_path), str(tree))
    report = done.stdout + done.stderr
    assert done.returncode != 0, report
    assert "hosts above the front ends above the core BROKEN" in report, report
    assert "the front ends never import each other BROKEN" in report, report
    assert "bridge_core.mod -> pheby_adapter" in report, report
    assert "lvmh_adapter.mod -> loomi_adapter" in report, report
    for c in forbidden:
        assert f"{c['name']} BROKEN" in report, report
