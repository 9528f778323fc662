"""Two Pheby nodes over one PostgreSQL and Redis, a conversation both have seen, and a hold on the store:
the setting of the kill -9 tests whose store write the kill loses (tests/scale/test_start_lost.py,
test_closed_notice.py, test_closed_once.py, test_decided_once.py; docs/scale-out.md "Joining")."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Optional

import psycopg

from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import PHEBY_SECRET
from tests.waiting import until


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


async def ended_unstored(pair: Pair, request_id: str) -> tuple[str, list]:
    """A short run sent through n1 and ended on every phone while the store held n1's rows of it back; then n1
    killed -9 and the hold let go: the exchange in the stream, not in the store. The run's id and the
    ``message.complete`` frames n2's client got for its message."""
    await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")  # n1's rows of the exchange wait
    await pair.a1.send({"type": "chat.send", "request_id": request_id, "conversation_id": pair.cid, "text": "/slow 1"})
    end = await pair.a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("conversation_id") == pair.cid, 15)
    run_id = end["run_id"]
    done = [f for f in pair.a2.conn_frames
            if f["type"] == "message.complete" and f.get("message_id") == f"draft-{run_id}"]
    pair.n1.kill9()  # the exchange in the stream, not in the store
    await pair.release()
    return run_id, done


async def run_row(reads: Any, run_id: str) -> Any:
    """The run's (status, finished_at) in the store; None where it has no row."""
    cur = await reads.execute("SELECT status, finished_at FROM runs WHERE run_id=%s", (run_id,))
    return await cur.fetchone()


async def until_stored(reads: Any, run_id: str, status: str, what: str) -> None:
    """Until the store has the run with ``status`` and its end's time."""

    async def stored() -> bool:
        row = await run_row(reads, run_id)
        return row is not None and row[0] == status and row[1] is not None

    await until(stored, 20, what)


async def reconnected(pair: Pair) -> PhebyApp:
    """n1's client connected again to n1 (restarted): the old one closed, the new one closed with the pair."""
    await pair.a1.close()
    pair.a1 = pheby_app(pair.n1)
    await pair.a1.connect()
    return pair.a1


async def alike(pair: Pair) -> bool:
    """Do both nodes show the conversation alike (its messages' ids and texts)? For ``until``."""
    on_n1, on_n2 = (await pair.a1.open(pair.cid))["messages"], (await pair.a2.open(pair.cid))["messages"]
    return [(m["message_id"], m["text"]) for m in on_n1] == [(m["message_id"], m["text"]) for m in on_n2]


async def agreed(pair: Pair, run_id: str, text: str) -> list:
    """After n1's restart both nodes show the conversation alike, the run's message with ``text`` in it. Its
    (message_id, text) pairs as n1 shows them."""
    on_n1, on_n2 = (await pair.a1.open(pair.cid))["messages"], (await pair.a2.open(pair.cid))["messages"]
    assert [(m["message_id"], m["text"]) for m in on_n1] == [(m["message_id"], m["text"]) for m in on_n2]
    assert (f"draft-{run_id}", text) in [(m["message_id"], m["text"]) for m in on_n1], on_n1
    return [(m["message_id"], m["text"]) for m in on_n1]


async def after_restart(pair: Pair, run_id: str, text: str) -> None:
    """n1 restarted: its client connected again, a send through it runs to its end, the run ``run_id`` ended once on
    n2's client (completed), and both nodes show the conversation alike with the run's message ``text``."""
    a1, a2 = await reconnected(pair), pair.a2
    after = (await a1.chat(pair.cid, "after the restart"))["run_id"]
    await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
    assert [f["status"] for f in a2.conn_frames if f["type"] == "run.finished" and f["run_id"] == run_id] == \
        ["completed"]  # fmt: skip
    await agreed(pair, run_id, text)
