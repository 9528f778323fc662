"""A run a node ended, whose end its store never had (the node killed as its writes waited: a batch
is held up to ``pgstore.RIDE_OUT`` through a PostgreSQL restart, or the kill came first), is closed
once (chaos seed 2003: event_twice, docs/performance.md "Chaos"). The node's next start found the
run open in the store and closed it as interrupted: a second run end (run.failed after the
run.completed) on every front end. It does not fold its previous life's entries (busauth.py: not
live), so the end it published never reached its state. Now it reads that end back from the stream
(bridge_core/scale/cluster.py ``read_ends``), folds it and writes it (``_restore``).

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's
own transaction holds the run's row lock (the batch with its end waits) while the node is killed."""

from __future__ import annotations

from tests.conformance.pheby_client import PhebyApp
from tests.scale.killed import pheby_app, pheby_pair
from tests.waiting import until


def _ends(app: PhebyApp, run_id: str) -> list:
    return [f for f in app.frames if f["type"] == "run.finished" and f.get("run_id") == run_id]


async def test_a_run_whose_end_the_store_lost_in_a_kill_is_closed_once(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "ended before the kill") as pair:
        n1, n2, a1, a2, reads, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.reads, pair.cid
        run_id = (await a1.chat(cid, "/slow 1"))["run_id"]

        async def stored(want: tuple) -> bool:  # (status, whether finished_at is set)
            cur = await reads.execute("SELECT status, finished_at FROM runs WHERE run_id=%s", (run_id,))
            row = await cur.fetchone()
            return row is not None and (row[0], row[1] is not None) == want

        await until(lambda: stored(("running", False)), what="the run's row committed")
        await pair.hold("UPDATE runs SET status=status WHERE run_id=%s", (run_id,))  # n1's end waits for it
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 15)
        n1.kill9()  # its end in the stream, not in the store
        await pair.release()
        assert await stored(("running", False))

        n1.start()  # finds the run open in the store and its end in the stream
        await until(lambda: stored(("completed", True)), 20, "the run's end written by n1's next start")
        n1.kill9()
        n1.start()  # a later start: nothing left open to close
        await a1.close()
        a1 = pair.a1 = pheby_app(n1)  # closed with the pair
        await a1.connect()
        after = (await a1.chat(cid, "after the restarts"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        assert len(_ends(a2, run_id)) == 1, _ends(a2, run_id)
        assert await stored(("completed", True))
        texts = [m["text"] for m in (await a2.open(cid))["messages"] if m["role"] == "assistant"]
        assert texts[0].startswith("w1 ") and len(texts) == 2, texts  # the run's message, once
        cur = await reads.execute("SELECT message_id, text FROM messages WHERE conversation_id=%s ORDER BY rowid",
                                  (cid,))  # fmt: skip
        stored_texts = [t for mid, t in await cur.fetchall() if mid.startswith("draft-")]
        assert stored_texts == texts, stored_texts  # the completion written, in its place
