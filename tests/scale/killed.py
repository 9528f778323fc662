"""Two Pheby nodes over one PostgreSQL and Redis, a conversation both have seen, and a hold on the store:
the setting of the kill -9 tests whose store write the kill loses (tests/scale/test_start_lost.py,
test_closed_notice.py, test_closed_once.py, test_decided_once.py; docs/scale-out.md "Joining")."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Optional

import psycopg

from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import PHEBY_SECRET


def pheby_app(proc) -> PhebyApp:
    return PhebyApp(f"ws://127.0.0.1:{proc.ports['pheby']}/ws", PHEBY_SECRET)


class Pair:
    """The two nodes and their clients, ``reads`` (autocommit) and at most one held transaction."""

    def __init__(self, nodes: tuple, dsn: str, reads: Any):
        self.n1, self.n2 = nodes
        self.a1, self.a2 = pheby_app(self.n1), pheby_app(self.n2)
        self.dsn, self.reads = dsn, reads
        self.cid = ""
        self.held: Optional[Any] = None

    async def hold(self, sql: str, params: tuple = ()) -> None:
        """Take the locks ``sql`` takes in a transaction left open: the node's batch needing them waits."""
        self.held = await psycopg.AsyncConnection.connect(self.dsn)
        await self.held.execute(sql, params)

    async def release(self) -> None:
        """Roll the held transaction back: what waited on it goes on."""
        held, self.held = self.held, None
        await held.rollback()
        await held.close()


@contextlib.asynccontextmanager
async def pheby_pair(serve_nodes, engines, title: str) -> AsyncIterator[Pair]:
    """Nodes n1 and n2 (Pheby only), both clients connected, a conversation ``title`` made on n1 and seen on n2."""
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    pair = Pair(serve_nodes("n1", "n2", adapters="pheby"), engines[0], reads)
    try:
        await pair.a1.connect()
        await pair.a2.connect()
        pair.cid = await pair.a1.create(title)
        await pair.a2.wait_frame(lambda f: f.get("conversation_id") == pair.cid)
        yield pair
    finally:
        if pair.held is not None:
            await pair.held.close()
        await reads.close()
        await pair.a1.close()
        await pair.a2.close()
