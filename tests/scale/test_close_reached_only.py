"""A restart's close that only the other nodes kept is not made again (chaos seed 3409: ``event_twice``,
``nodes_disagree``, ``transcript_contradicts_client``; bridge_core/scale/unsent.py ``reached_close``,
docs/scale-out.md "A close only the other nodes kept").

n1 streams a run, its draft saves held (the test's transaction holds the run's message row) while the stream goes
on, and is killed -9; its restart closes the run as interrupted with the text the stream's last delta holds,
longer than the saved draft; every node folds that close and n2's client gets it, but n1's writes of it wait on
the same row, and n1 is killed again; then Redis loses its keys. The close is in no
store and no stream: only n2 delivered it. Before, n1's next life found the run open and closed it a second time,
with its saved draft (older, shorter): a second end on n2's client, and n1 and the store holding another text than
n2. Now n2's record of each form of the close it delivered holds the form, and n1's next life ends the run as
that close did, once.

Over real sockets to two `agent-bridge serve` processes on a private PostgreSQL and Redis."""

from __future__ import annotations

import redis.asyncio as aioredis

from tests.scale.killed import alike, pheby_pair, reconnected, run_row
from tests.waiting import until


async def test_a_close_only_the_other_nodes_delivered_is_not_made_again(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "closed, kept by n2 only") as pair:
        n1, a2, reads, cid = pair.n1, pair.a2, pair.reads, pair.cid
        run_id = (await pair.a1.chat(cid, "/slow 30"))["run_id"]
        draft = f"draft-{run_id}"

        async def saved() -> bool:  # the run stored and its draft saved (at least once)
            cur = await reads.execute("SELECT text FROM messages WHERE message_id=%s", (draft,))
            row = await cur.fetchone()
            return row is not None and len(row[0].split()) >= 2 and (await run_row(reads, run_id)) is not None

        await until(saved, 15, "the run's row and a saved draft")
        # n1's next draft saves wait, then its restart's close rows: the close's text (the stream's last delta) goes
        # past the saved draft, as in the chaos run (three words against one)
        await pair.hold("SELECT 1 FROM messages WHERE message_id=%s FOR UPDATE", (draft,))
        cur = await reads.execute("SELECT text FROM messages WHERE message_id=%s", (draft,))
        old = (await cur.fetchone())[0]

        def streamed() -> int:  # the words of the run's message n2's client got (a draft is the text so far)
            return max((len(f["text"].split()) for f in a2.conn_frames
                        if f["type"] == "message.delta" and f.get("message_id") == draft), default=0)  # fmt: skip

        await a2.wait_until(lambda: streamed() >= len(old.split()) + 3, 15)
        n1.kill9()
        n1.start()
        end = await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 45)
        assert end["status"] == "failed", end
        closed = [f for f in a2.conn_frames if f["type"] == "message.complete" and f.get("message_id") == draft]
        assert closed, "n2's client got the close's completion"
        text = closed[-1]["text"]

        async def recorded() -> bool:  # n2 recorded the close's end as delivered (committed)
            cur = await reads.execute("SELECT count(*) FROM settings WHERE key LIKE %s",
                                      (f"reached:{run_id}:RunFinished:%",))  # fmt: skip
            return (await cur.fetchone())[0] > 0

        await until(recorded, 15, "n2's record of the close")
        n1.kill9()  # the close in no store
        await pair.release()
        r = aioredis.Redis.from_url(engines[1])
        try:
            await r.flushall()  # and in no stream
        finally:
            await r.aclose()
        row = await run_row(reads, run_id)
        assert row is not None and row[1] is None, row  # the store has the run open
        n1.start()

        async def ended() -> bool:
            row = await run_row(reads, run_id)
            return row is not None and row[1] is not None

        await until(ended, 45, "the run's end written by n1's next life")
        a1 = await reconnected(pair)
        after = (await a1.chat(cid, "after the restarts"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        ends = [f["status"] for f in a2.conn_frames if f["type"] == "run.finished" and f.get("run_id") == run_id]
        assert ends == ["failed"], ends  # once
        assert len(text.split()) > len(old.split()), (text, old)  # (the close went past the saved draft)
        cur = await reads.execute("SELECT text FROM messages WHERE message_id=%s", (draft,))
        assert (await cur.fetchone())[0] == text  # the store holds the text n2's client got

        await until(lambda: alike(pair), 15, "both nodes show one transcript")
        assert (draft, text) in [(m["message_id"], m["text"]) for m in (await a1.open(cid))["messages"]]
