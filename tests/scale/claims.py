"""A Loomi phone's steps straight against a node's ``ClusterRegistry`` (loomi_adapter/cluster.py), no socket: the
store with Loomi's and the cluster's tables, and a hello (authenticate, claim, attach) as the server makes it.
For the numbering rules tested on real rows and claims (tests/scale/test_rows_never_stored.py and others)."""

from __future__ import annotations

from typing import Any

from bridge_core.scale.cluster import MIGRATIONS as CLUSTER_MIGRATIONS
from loomi_adapter.cluster import ClusterRegistry
from loomi_adapter.devices import MIGRATIONS


def with_tables(store: Any) -> Any:
    """``store`` (opened) with Loomi's tables and the cluster's."""
    store.migrate("loomi", MIGRATIONS)
    store.migrate("cluster", CLUSTER_MIGRATIONS)
    return store


async def hello(reg: ClusterRegistry, did: str, credential: str, last_seq) -> tuple:
    """The device and what its hello with ``last_seq`` gets (``attach``: the replay and its seq)."""
    d = reg.authenticate(did, credential)
    assert d is not None
    claim = await reg.claim(d, last_seq)
    assert claim is not None
    return d, reg.attach(d, claim, last_seq)
