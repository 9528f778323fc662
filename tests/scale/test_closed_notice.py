"""A run a node's restart closed as interrupted, the node killed again before its store had that close, keeps the
close's notice on every node (chaos seed 2003: ``nodes_disagree``, a node without the "Run interrupted" message
the others hold; docs/performance.md "Chaos").

The next start reads the close back from the stream and writes it (``Cluster.read_ends``, test_closed_once.py),
but the notice ``Bridge.interrupt`` publishes right after it carries no run id: it was neither read back nor
written, so that node's transcript and the store lacked the message every other node got from the stream. Now
it is read back with the end, folded and written.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
holds the lock of the run's draft row (the batch with the close waits) while the node is killed."""

from __future__ import annotations

from tests.scale.killed import pheby_app, pheby_pair
from tests.waiting import until


def _shown(opened: dict) -> list:
    return [(m["message_id"], m["text"]) for m in opened["messages"]]


async def test_a_close_whose_store_write_a_kill_lost_keeps_its_notice_on_every_node(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "closed by a restart") as pair:
        n1, n2, a1, a2, reads, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.reads, pair.cid
        run_id = (await a1.chat(cid, "/slow 3"))["run_id"]

        async def stored(want: tuple) -> bool:  # (status, whether finished_at is set)
            cur = await reads.execute("SELECT status, finished_at FROM runs WHERE run_id=%s", (run_id,))
            row = await cur.fetchone()
            return row is not None and (row[0], row[1] is not None) == want

        async def draft_saved() -> bool:
            cur = await reads.execute("SELECT 1 FROM messages WHERE message_id=%s", (f"draft-{run_id}",))
            return await cur.fetchone() is not None

        await until(draft_saved, 15, "the run's draft saved")
        n1.kill9()  # mid-run: its next start closes it as interrupted
        # the close's batch (its message first) waits
        await pair.hold("UPDATE messages SET text=text WHERE message_id=%s", (f"draft-{run_id}",))
        n1.start()
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 20)
        notice = await a2.wait_frame(lambda f: f["type"] == "message.complete" and f.get("conversation_id") == cid
                                     and f.get("message_id", "").startswith("n-"), 10)  # fmt: skip
        n1.kill9()  # the close and its notice in the stream, not in the store
        await pair.release()
        assert await stored(("failed", False))  # marked failed at start, its close pending (CLOSE_PENDING)

        n1.start()  # finds the run open in the store, its close and the notice in the stream
        await until(lambda: stored(("failed", True)), 20, "the run's close written by n1's next start")
        await a1.close()
        a1 = pair.a1 = pheby_app(n1)  # closed with the pair
        await a1.connect()
        on_n1, on_n2 = _shown(await a1.open(cid)), _shown(await a2.open(cid))
        assert (notice["message_id"], notice["text"]) in on_n2, on_n2
        assert on_n1 == on_n2, (on_n1, on_n2)  # before: n1 without the notice
        cur = await reads.execute("SELECT 1 FROM messages WHERE conversation_id=%s AND message_id=%s",
                                  (cid, notice["message_id"]))  # fmt: skip
        assert await cur.fetchone() is not None  # and the store has it (a node loading later shows it too)
