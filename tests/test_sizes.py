"""Sizes one can hold in one's head (DESIGN, "Layering"; docs/architecture.md): no module of the five
packages over 600 lines, no function over 60 (from its ``def`` to its last line, docstring and blank
lines included).

Two lists, each entry with its reason: ``DECLARATIVE``, functions that are a table or declarative data
rather than logic (none today); ``SPLITTING``, the modules other work is splitting, each with the issue
that splits it. A temporary exception whose module or function has come under the limit fails the test
until it is removed, and nothing in bridge_core or cli may have one.
"""

from __future__ import annotations

import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = ("bridge_core", "pheby_adapter", "loomi_adapter", "lvmh_adapter", "cli")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60

DECLARATIVE: dict[str, str] = {}  # "path:function" -> why it is a table, not logic
SPLITTING: dict[str, str] = {}  # "path" (a module) or "path:function" -> the issue splitting it (none now)


def sources() -> list[str]:
    out = []
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(ROOT, package)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out += [os.path.relpath(os.path.join(folder, f), ROOT) for f in sorted(files) if f.endswith(".py")]
    return out


def oversized() -> dict[str, int]:
    """Every module and function over its limit: ``path`` or ``path:function`` -> its lines."""
    found = {}
    for path in sources():
        with open(os.path.join(ROOT, path), encoding="utf-8") as f:
            text = f.read()
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES:
            found[path] = lines
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found[f"{path}:{node.name}"] = length
    return found


def test_no_module_or_function_over_its_limit():
    over = {name: n for name, n in oversized().items() if name not in DECLARATIVE and name not in SPLITTING}
    assert over == {}, (f"over {MAX_MODULE_LINES} lines a module, {MAX_FUNCTION_LINES} a function "
                        f"(split it by concern: docs/architecture.md):\n"
                        + "\n".join(f"  {name}: {n} lines" for name, n in sorted(over.items())))


def test_every_exception_is_still_needed_and_none_in_the_core_or_the_hosts():
    found = oversized()
    stale = [name for name in [*DECLARATIVE, *SPLITTING] if name not in found]
    assert stale == [], f"under the limit now: remove from tests/test_sizes.py: {stale}"
    assert not [n for n in SPLITTING if n.startswith(("bridge_core/", "cli/"))]


def test_the_measure(tmp_path, monkeypatch):
    """A function counts from its ``def`` to its last line; a module, every line."""
    (tmp_path / "pkg").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    (tmp_path / "pkg" / "m.py").write_text(f"def fits():\n{body}\n\ndef over():\n{body}    x = 0\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", str(tmp_path))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGES", ("pkg",))
    assert oversized() == {"pkg/m.py:over": 61}
