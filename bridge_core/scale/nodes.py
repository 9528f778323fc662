"""The nodes on a shared store, and their heartbeats (docs/scale-out.md "Nodes").

Every node on a shared store (``BaseStore.shared``) keeps a row in ``bridge_nodes`` and
refreshes its heartbeat every ``HEARTBEAT_EVERY`` seconds; a node whose heartbeat is older
than ``NODE_TTL`` is dead. Without the bus between nodes (``--bus``), one bridge is one live
node per store: a second node starting on a store where another one is live is refused, since
its clients would miss the first one's events; with it, several nodes share the store
(``alone=False``; bridge_core/scale/cluster.py watches their liveness on the bus). The rule of who is live is ``live_nodes``
(pure); ``NodeHeartbeat`` only stores it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any, Iterable, Optional

from ..model.errors import Conflict
from ..bridge.store import BaseStore
from ..bridge.tasks import TaskSet

log = logging.getLogger("agent_bridge.nodes")

HEARTBEAT_EVERY = 5.0
NODE_TTL = 15.0  # the contract: a dead node is noticed within 15 s

MIGRATIONS = [
    """
    CREATE TABLE bridge_nodes(
        node_id TEXT PRIMARY KEY,
        started_at REAL NOT NULL,
        heartbeat_at REAL NOT NULL
    ) WITHOUT ROWID;
    """,
]


def new_life(node_id: str) -> str:
    """A name for this process's life as node ``node_id``: ``node_id:<random>``, taken at start. A node restarted
    under its own name is another life: what one life's delivery passed over (the holes of
    bridge_core/scale/gone.py) says nothing about the rows another life rendered (docs/scale-out.md "Catching up")."""
    return f"{node_id}:{secrets.token_hex(6)}"


def live_nodes(rows: Iterable[tuple[str, float]], now: float, ttl: float = NODE_TTL) -> list[str]:
    """The nodes of ``rows`` (node_id, heartbeat_at) whose heartbeat is younger than ``ttl``."""
    return sorted(nid for nid, beat in rows if now - beat < ttl)


class NodeHeartbeat:
    """This node's row on a shared store: claimed at start, refreshed, dropped at a clean stop."""

    def __init__(self, store: BaseStore, node_id: str, *, every: float = HEARTBEAT_EVERY, ttl: float = NODE_TTL,
                 alone: bool = True):
        self.store = store
        self.alone = alone  # no bus: the only live node on the store (with one: one of several)
        self.node_id = node_id
        self.every = every
        self.ttl = ttl
        self.tasks = TaskSet("nodes")
        self.started: Optional[float] = None

    async def start(self) -> None:
        """Claim this node's row; Conflict when another node is live on the store."""
        await self.store.amigrate("nodes", MIGRATIONS)
        now = time.time()

        def claim(c: Any) -> list[str]:
            self.store.lock_schema(c)  # two nodes starting together: one claims, then the other sees it
            rows = c.execute("SELECT node_id, heartbeat_at FROM bridge_nodes WHERE node_id!=?", (self.node_id,))
            others = live_nodes(rows.fetchall(), now, self.ttl) if self.alone else []
            if not others:
                c.execute(
                    "INSERT INTO bridge_nodes(node_id, started_at, heartbeat_at) VALUES(?, ?, ?) "
                    "ON CONFLICT(node_id) DO UPDATE SET started_at=excluded.started_at, "
                    "heartbeat_at=excluded.heartbeat_at",
                    (self.node_id, now, now),
                )
            return others

        others = await self.store.write(claim)
        if others:
            raise Conflict(
                f"node {others[0]} is live on the store {self.store.describe()}: several live nodes need the bus "
                "between them (--bus redis://...; docs/scale-out.md)"
            )
        self.started = now
        self.tasks.spawn(self._beat(), name="node-heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.store.write(lambda c: c.execute(
                    "UPDATE bridge_nodes SET heartbeat_at=? WHERE node_id=?", (time.time(), self.node_id)))
            except Exception as exc:  # the store is down: the next beat tries again
                log.warning("node heartbeat failed: %s", exc)

    async def stop(self) -> None:
        await self.tasks.close()
        if self.started is not None:
            try:
                await self.store.write(lambda c: c.execute("DELETE FROM bridge_nodes WHERE node_id=?", (self.node_id,)))
            except Exception as exc:
                log.warning("could not drop this node's row: %s", exc)
            self.started = None
