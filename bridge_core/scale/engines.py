"""Which store a bridge runs on: SQLite in its data directory (the embedded default), or the
PostgreSQL that several nodes share (``--store postgresql://...``; docs/scale-out.md).

The choice sits above both engines: the SQLite store (``bridge_core/bridge/store.py``) knows
nothing of PostgreSQL, and the PostgreSQL one (``pgstore.py``) is imported only when named,
since its driver is the scale extra's.
"""

from __future__ import annotations

import os
from typing import Optional

from ..bridge.sqlite import Store
from ..bridge.store import BaseStore
from ..model.errors import ConfigError


def open_store(url: Optional[str], data_dir: str) -> BaseStore:
    """The store ``--store URL`` names (``postgresql://...``), or SQLite in ``data_dir`` without one."""
    if not url:
        return Store(os.path.join(data_dir, "bridge.db"))
    if url.startswith(("postgresql://", "postgres://")):
        try:
            from .pgstore import PostgresStore  # the driver is needed only here (the scale extra)
        except ImportError as exc:
            raise ConfigError(f"--store postgresql:// needs the PostgreSQL driver: pip install 'agent-bridge[scale]' ({exc})")
        return PostgresStore(url)
    raise ConfigError(f"unsupported store URL {url.split('://')[0]}://...: use postgresql://USER@HOST:PORT/DB")
