"""The configuration as a host reads it: the core's sections and the front ends' (docs/usage.md).

Each front end declares its part (``pheby_adapter/config.py``, ``loomi_adapter/config.py``,
``lvmh_adapter/config.py``: its section's keys, its port, the form of its URL, its secret,
its settings); the core reads the rest (``bridge_core/kit/config.py``). Here the parts this
build has are assembled, in the order the front ends are listed everywhere, into the one
schema a config file is checked against, and ``build_config`` reads flags, environment and
file with them. Every command of the hosts reads its configuration here; the front ends'
own commands get ``build_config`` from the host (``add_parser``).
"""

from __future__ import annotations

import importlib
from typing import Any, Mapping, Optional

from bridge_core.kit import config as core
from bridge_core.kit.config import Config, FrontEndPart
from bridge_core.kit.remote import validate_public_url as _validate

PART_MODULES = ("pheby_adapter.config", "loomi_adapter.config", "lvmh_adapter.config")


def _parts() -> tuple[FrontEndPart, ...]:
    out = []
    for name in PART_MODULES:
        try:
            out.append(importlib.import_module(name).PART)
        except ImportError:  # a build without that front end
            continue
    return tuple(out)


PARTS = _parts()
PART = {p.name: p for p in PARTS}
SCHEMA = core.schema_for(PARTS)


def build_config(args: dict, environ: Optional[Mapping[str, str]] = None, *, with_secrets: bool = True) -> Config:
    """Flags (``args``: None means not given), environment and file, with every front end's part."""
    return core.build_config(args, environ, parts=PARTS, with_secrets=with_secrets)


def validate_public_url(name: str, url: Any) -> str:
    """``--public-url name=url`` as a client is told it (ConfigError, one line, when it cannot be)."""
    return _validate(name, url, {p.name: p.public for p in PARTS})
