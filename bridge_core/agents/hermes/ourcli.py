"""Import agent-bridge's command-line modules inside Hermes.

hermes-agent ships a top-level ``cli.py`` module, so agent-bridge's ``cli/``
folder installs as the package ``agent_bridge_cli``. From a source checkout
that was not installed, the modules are loaded from their files under that
same name (they only import ``bridge_core``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

import bridge_core

ALIAS = "agent_bridge_cli"


def cli_module(name: str) -> ModuleType:
    """``cli.<name>`` of agent-bridge (``serve``, ``main``)."""
    try:
        mod = importlib.import_module(f"{ALIAS}.{name}")
        if os.path.dirname(os.path.dirname(os.path.abspath(mod.__file__ or ""))) == _root():
            return mod
    except ImportError:
        pass
    alias = f"{ALIAS}.{name}"
    if alias in sys.modules:
        return sys.modules[alias]
    if ALIAS not in sys.modules:
        pkg = ModuleType(ALIAS)
        pkg.__path__ = [os.path.join(_root(), "cli")]  # type: ignore[attr-defined]
        sys.modules[ALIAS] = pkg
    path = os.path.join(_root(), "cli", f"{name}.py")
    spec = importlib.util.spec_from_file_location(alias, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"agent-bridge's cli/{name}.py not found next to bridge_core")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[alias] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(alias, None)
        raise
    return mod


def _root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(bridge_core.__file__)))
