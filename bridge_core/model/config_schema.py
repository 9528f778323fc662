"""The config file's schema at work: which sections and keys exist, checked both ways.

The schema itself (section -> the keys its parser reads) is the core's sections
(``bridge_core/kit/config.py`` ``CORE_SCHEMA``) and each front end's (its ``config.py``
``PART``), assembled by the host (``cli/config.py`` ``SCHEMA``). Here are the two checks
that keep it true (docs/usage.md, "The config file"):

- a file naming a section or key the schema lacks is refused with the nearest valid name
  (``unknown_name``): a misspelt ``[phebby]`` never passes silently;
- a parser reading a key the schema lacks fails at once (``Section``, and ``config.Source.pick``): ``UndeclaredKey``, a programming error any test that reaches the read shows. So a key
  cannot be read without being declared, and a declared key is one some parser reads.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping, Optional

TOP = ""  # the schema's name for the file's top level (keys before any [section])
WHERE = "the schema (bridge_core/kit/config.py CORE_SCHEMA, or its front end's config.py PART)"


class UndeclaredKey(AssertionError):
    """A parser read a config key the schema does not declare (a bug, never a user's error)."""


def declared(schema: Mapping[str, frozenset], path: tuple) -> None:
    """``UndeclaredKey`` unless ``path`` (``("host",)`` or ``("pheby", "port")``) is in ``schema``."""
    section, key = (TOP, path[0]) if len(path) == 1 else (path[0], path[1])
    if len(path) > 2 or key not in schema.get(section, ()):
        raise UndeclaredKey(f"config key {'.'.join(path)} is read but not declared in {WHERE}")


class Section(dict):
    """One ``[section]`` of the file as its parser reads it: ``get`` / ``[]`` of an undeclared key
    raise ``UndeclaredKey`` (whether or not the file sets it)."""

    def __init__(self, name: str, values: Mapping[str, Any], schema: Mapping[str, frozenset]):
        if name not in schema or name == TOP:
            raise UndeclaredKey(f"config section [{name}] is read but not declared in {WHERE}")
        super().__init__(values)
        self.name, self._keys = name, schema[name]

    def _check(self, key: Any) -> None:
        if key not in self._keys:
            raise UndeclaredKey(f"config key {self.name}.{key} is read but not declared in {WHERE}")

    def get(self, key: Any, default: Any = None) -> Any:
        self._check(key)
        return super().get(key, default)

    def __getitem__(self, key: Any) -> Any:
        self._check(key)
        return super().__getitem__(key)


def _nearest(name: str, choices: Any, show: Any) -> str:
    match = difflib.get_close_matches(name, sorted(choices), n=1, cutoff=0.6) or sorted(
        c for c in choices if c.startswith(name) or name.startswith(c))  # grace -> grace_seconds
    if match:
        return f"did you mean {show(match[0])}?"
    return "known: " + ", ".join(show(c) for c in sorted(choices))


def unknown_name(toml: Mapping[str, Any], schema: Mapping[str, frozenset], path: str) -> Optional[str]:
    """Why ``toml`` (the file at ``path``) does not fit ``schema``, in one line naming the nearest
    valid name, or None. A name that is both a top-level key and a section (``public_url``) may be
    either; a section's own tables are keys like any other."""
    top = schema[TOP]
    sections = {name for name in schema if name != TOP}
    for name, value in toml.items():
        if name in sections and isinstance(value, dict):
            keys = schema[name]
            for key in value:
                if key not in keys:
                    return f"unknown key {name}.{key} in {path}; " + _nearest(key, keys, lambda k: f"{name}.{k}")
        elif name in sections and name not in top:
            return f"{name} in {path} is a section: write it as [{name}] with its keys below"
        elif name not in top:
            if isinstance(value, dict):
                return f"unknown section [{name}] in {path}; " + _nearest(name, sections, lambda s: f"[{s}]")
            return f"unknown key {name} in {path}; " + _nearest(name, top, str)
    return None


__all__ = ["Section", "TOP", "UndeclaredKey", "declared", "unknown_name"]
