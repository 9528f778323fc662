"""A Loomi phone's steps straight against a node's ``ClusterRegistry`` (loomi_adapter/cluster.py), no socket: the
store with Loomi's and the cluster's tables, and a hello (authenticate, claim, attach) as the server makes it.
For the numbering rules tested on real rows and claims (tests/scale/test_rows_never_stored.py and others)."""

from __future__ import annotations

from typing import Any

import orjson

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


def delta_tail(n: int, t0: float) -> bytes:
    """Event ``n`` as a run.delta ``e<n>`` of run ``r1`` at ``t0 + n`` ms, stored (without its opening brace)."""
    body = orjson.dumps({"v": 1, "ts": t0 + n / 1000, "type": "run.delta", "task_id": "c1", "run_id": "r1",
                         "payload": {"run_id": "r1", "text": f"e{n}", "kind": "text", "iteration": 0}})
    return body[1:]


def texts(frames: list[bytes]) -> list[str]:
    """The texts of delta frames (``delta_tail``'s, numbered)."""
    return [orjson.loads(f)["payload"]["text"] for f in frames]
