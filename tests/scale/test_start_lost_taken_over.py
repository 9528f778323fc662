"""A dead node's claim of a run its store never had, taken over by a survivor before the node's restart (issue 41:
under load the restart takes longer than the dead-node timeout). The survivor marks the claim its own and done
(``Cluster._take_over``), so the restart finds no claim of its own to read back from the stream
(``bridge_core/scale/started.py``), and the survivor closed only a run still running on it: a run that ended before
the kill, every phone having got it, was written by nobody. Now the take-over reads back the start, the user's
message and the end as the restart does (``started.restore_taken``); a run still running is closed as interrupted as
before, onto its restored row.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
locks the ``runs`` table (n1's batches wait) while n1 is killed, as ``test_start_lost.py`` does; n1 stays down until
n2 has taken its claim over."""

from __future__ import annotations

from typing import Any

from tests.scale.killed import after_restart, ended_unstored, pheby_pair, run_row, until_stored
from tests.waiting import until


async def _taken_over(reads: Any, run_id: str) -> None:
    async def taken() -> bool:
        cur = await reads.execute("SELECT node_id, state FROM cluster_runs WHERE run_id=%s", (run_id,))
        return await cur.fetchone() == ("n2", "done")

    await until(taken, 30, "n2 took n1's claim over")


async def _messages(reads: Any, cid: str) -> list:
    cur = await reads.execute("SELECT message_id, role, text FROM messages WHERE conversation_id=%s ORDER BY ts", (cid,))
    return [tuple(r) for r in await cur.fetchall()]


async def test_a_run_that_ended_before_its_store_had_it_is_written_by_the_node_taking_its_claim_over(
    serve_nodes, engines
):
    async with pheby_pair(serve_nodes, engines, "ended, taken over") as pair:
        n1, a2, reads, cid = pair.n1, pair.a2, pair.reads, pair.cid
        run_id, done = await ended_unstored(pair, "ended")  # the exchange in the stream, not in the store
        assert await run_row(reads, run_id) is None

        await _taken_over(reads, run_id)  # n1 still down: n2 took its claim over first
        await until_stored(reads, run_id, "completed",
                           "the run and its end written by the node that took its claim over")  # fmt: skip
        messages = await _messages(reads, cid)
        assert ("user" in [role for _, role, _ in messages]), messages  # the user's message that started it
        assert (f"draft-{run_id}", "assistant", done[0]["text"]) in messages, messages
        # no second end on any phone: the take-over wrote what every phone got, published nothing
        assert [f["status"] for f in a2.conn_frames if f["type"] == "run.finished" and f["run_id"] == run_id] == \
            ["completed"]  # fmt: skip

        n1.start()  # its restart finds no claim of its own: nothing to do, nothing written twice
        await after_restart(pair, run_id, done[0]["text"])


async def test_a_running_run_whose_store_never_had_it_is_closed_onto_its_row_by_the_node_taking_it_over(
    serve_nodes, engines
):
    async with pheby_pair(serve_nodes, engines, "running, taken over") as pair:
        n1, a1, a2, reads, cid = pair.n1, pair.a1, pair.a2, pair.reads, pair.cid
        await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")
        await a1.send({"type": "chat.send", "request_id": "running", "conversation_id": cid, "text": "/slow 10"})
        started = await a2.wait_frame(lambda f: f["type"] == "message.start" and f.get("conversation_id") == cid
                                      and f.get("run_id") is not None, 15)  # fmt: skip
        run_id = started["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "message.delta" and f.get("message_id") == started["message_id"], 15)
        n1.kill9()
        await pair.release()
        assert await run_row(reads, run_id) is None

        end = await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)
        assert end["status"] == "failed", end  # closed by n2, n1 never restarted
        await _taken_over(reads, run_id)

        await until_stored(reads, run_id, "failed", "the run's close stored, onto its row read back from the stream")
        messages = await _messages(reads, cid)
        assert "user" in [role for _, role, _ in messages], messages
        assert started["message_id"] in [m for m, _, _ in messages], messages
        after = (await a2.chat(cid, "after the take-over"))["run_id"]  # the conversation is free
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
