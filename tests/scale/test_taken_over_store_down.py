"""A survivor's take-over whose read-backs find the store failing still closes every run it won, once (review of
issue 41's take-over read-backs, bridge_core/scale/started.py ``restore_taken``). The take-over marks the dead
node's claims this node's and done, then reads back what the dead node's store may lack (the conversations created
lately, each run's row and end); a PostgreSQL restarting (``Unavailable``) there aborted the take-over: the dead
node's run stayed running on every node, its phones streaming it for good, and nobody would close it again.

n1 is an `agent-bridge serve` process, killed -9 with a run streaming; n2 runs in this process (its store made to
raise in the read-backs only: the take-over's own claim and its close go through), on a private PostgreSQL and
Redis; the clients are spec-built Pheby clients over real sockets."""

from __future__ import annotations

import logging

import psycopg

from bridge_core.model.errors import Unavailable
from tests.scale.killed import pheby_app, run_row, until_stored
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET
from tests.scale.test_cluster import _nodes
from tests.waiting import until

DOWN = "cannot reach the store: FATAL: the database system is shutting down"


def _read_backs_fail(store) -> list:
    """``store``'s writes from started.py and its reads of a run's row raise ``Unavailable`` (the calls, kept)."""
    write, query_one, calls = store.write, store.query_one, []

    async def failing_write(fn):
        if fn.__code__.co_filename.endswith("started.py"):
            calls.append("write")
            raise Unavailable(DOWN)
        return await write(fn)

    def failing_query_one(sql, params=()):
        if sql.startswith("SELECT 1 FROM runs WHERE run_id=?"):
            calls.append(sql)
            raise Unavailable(DOWN)
        return query_one(sql, params)

    store.write, store.query_one = failing_write, failing_query_one
    return calls


async def test_a_take_over_whose_read_backs_find_the_store_down_still_closes_the_run_once(
        serve_nodes, service_factory, engines, tmp_path, caplog):  # fmt: skip
    (n1,) = serve_nodes("n1", adapters="pheby")
    (n2,) = await _nodes(service_factory, engines, tmp_path, "n2",  # (n1's secrets: one cluster key)
                         env={"PHEBY_SECRET": PHEBY_SECRET, "LVMH_TOKEN": LVMH_TOKEN})  # fmt: skip
    a1, a2 = pheby_app(n1), pheby_app(n2)
    reads = await psycopg.AsyncConnection.connect(engines[0], autocommit=True)
    try:
        await a1.connect()
        await a2.connect()
        cid = await a1.create("taken over, store down")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        await a1.send({"type": "chat.send", "request_id": "running", "conversation_id": cid, "text": "/slow 10"})
        started = await a2.wait_frame(lambda f: f["type"] == "message.start" and f.get("conversation_id") == cid
                                      and f.get("run_id") is not None, 15)  # fmt: skip
        run_id = started["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("message_id") == started["message_id"], 15)
        await until(lambda: run_row(reads, run_id), 15, "n1's row of the run committed")  # (n2 closes onto it)
        calls = _read_backs_fail(n2.bridge.store)
        with caplog.at_level(logging.WARNING):
            n1.kill9()
            end = await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 40)
        assert end["status"] == "failed", end  # closed by n2 as interrupted, n1 never restarted
        assert "write" in calls and len(calls) > 1, calls  # the read-backs were tried, and failed
        assert any("at a take-over failed" in r.getMessage() for r in caplog.records)
        await until_stored(reads, run_id, "failed", "n2's close stored, onto n1's row")
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() == ("n2", "done")
        assert n2.bridge.conversations[cid].run is None

        after = (await a2.chat(cid, "after the take-over"))["run_id"]  # the conversation is free
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        assert [f["status"] for f in a2.conn_frames if f["type"] == "run.finished" and f["run_id"] == run_id] == \
            ["failed"]  # fmt: skip
        assert a2.violations == [], a2.violations
    finally:
        await reads.close()
        await a1.close()
        await a2.close()
