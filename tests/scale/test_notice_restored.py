"""An interrupted run's notice is restored with its end, under one id on every node (chaos seed 2103,
``nodes_disagree``: "n2 holds 3 messages, another node 4"; issue 41; docs/performance.md "Chaos").

What the history showed: n2's restart closed its run as interrupted (its end failed, then a notice "This run was
interrupted by a restart..." under a random id); the other nodes got both on the bus, then Redis lost its keys and
n2 was killed before its store had them. Its next start ended the run as another node's Loomi frames hold it
(``Bridge.restore_end``) but not the notice: every other node's transcript held one message more. Now the notice
has one id per run (``drafts.notice_id``) and the record's notification frame after the end gives its text back
(loomi_adapter/journal.py ``run_end``), written with the end.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
holds the conversation's row (the restarted owner's batch with its close waits on it) while the owner is killed, and
the stream deleted (the entries Redis lost; the counter and the nodes' liveness keys stay)."""

from __future__ import annotations

import asyncio

import psycopg

from tests.conformance.loomi_client import LoomiApp
from tests.scale.killed import pheby_app, run_row
from tests.scale.phones import loomi_ws, pair_qr
from tests.scale.test_end_rendered_only import _framed_end, _lose_stream
from tests.waiting import until

ADAPTERS = "pheby,loomi"
NOTICE = "This run was interrupted by a restart of the bridge and did not finish."


async def _finished(reads, run_id: str) -> bool:
    row = await run_row(reads, run_id)
    return row is not None and row[1] is not None


async def _row(reads, message_id: str) -> bool:
    cur = await reads.execute("SELECT 1 FROM messages WHERE message_id=%s", (message_id,))
    return await cur.fetchone() is not None


def _shown(history: dict) -> list:
    return [(m["message_id"], m["text"]) for m in history["messages"]]


async def test_a_restored_interrupted_end_brings_its_notice_under_one_id(serve_nodes, engines):
    phone = LoomiApp("Watcher")
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    n1, n2 = serve_nodes("n1", "n2", adapters=ADAPTERS)
    await phone.pair(dict(await pair_qr(n2), url=loomi_ws(n2)))  # n2 renders (and stores) Loomi frames
    a1, a2 = pheby_app(n1), pheby_app(n2)
    lock = None
    try:
        await a1.connect()
        await a2.connect()
        cid = await a1.create("interrupted, its close lost by its node")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        run_id = (await a1.chat(cid, "/slow 600"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("conversation_id") == cid, 15)
        await until(lambda: run_row(reads, run_id), 15, "the run's row committed")
        draft = f"draft-{run_id}"
        await until(lambda: _row(reads, draft), 15, "the run's draft saved")
        n1.kill9()  # the run open on every node and in the store
        lock = await psycopg.AsyncConnection.connect(engines[0])
        await lock.execute("UPDATE messages SET text=text WHERE message_id=%s", (draft,))  # the close's batch waits
        await asyncio.to_thread(n1.start)  # closes its run as interrupted: the end and the notice on the bus
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)
        await until(lambda: _framed_end(reads, run_id), 15, "n2's Loomi frames hold the run's end")
        n1.kill9()  # before its store had the close
        await lock.rollback()
        assert not await _finished(reads, run_id)
        await _lose_stream(engines[1])  # the stream lost it too

        n1.start()  # finds the run's close pending, nothing of it in the stream: ends it as n2's frames hold it
        await until(lambda: _finished(reads, run_id), 20, "n1's start ended the run in the store")
        after = (await a2.chat(cid, "after the restart"))["run_id"]  # (after whatever n1's start sent)
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        await a1.close()
        a1 = pheby_app(n1)
        await a1.connect()
        on_n1, on_n2 = _shown(await a1.open(cid)), _shown(await a2.open(cid))
        assert on_n1 == on_n2, (on_n1, on_n2)  # the same messages, ids and texts, on every node
        notices = [(mid, text) for mid, text in on_n1 if text == NOTICE]
        assert notices == [(f"n-{run_id}", NOTICE)], on_n1  # once, under the run's one notice id
    finally:
        if lock is not None:
            await lock.close()
        await a1.close()
        await a2.close()
        await reads.close()
        await phone.disconnect()
