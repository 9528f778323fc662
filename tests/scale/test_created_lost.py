"""A conversation whose node was killed before its store had the conversation's row is known to every node after
that node restarts (chaos seed 2100, issue 41: ``nodes_disagree``, conversation 06876e11... unknown to n1 and n2,
known to n3).

What the history showed: phone-1's send with no conversation went to n2 at 11.64 s; n2 created the conversation
(its ``ConversationCreated`` on the bus at once, its row queued for the writer's next batch) and was killed -9 at
11.83 s, 27 ms after the creation's time, while the send's claim (the same writer, after the row) waited: neither
committed. n1 and n3 folded the creation from the stream and showed the conversation (n1 until its own kill at
24.7 s); every start since (n2's five, n1's three) loaded a store without it, and the read-back after a gap
(``bridge_core/scale/reload.py``, n2 at 00:03:03) loads only what the store has. Only n3, never restarted, kept it.
Now a node's join writes the conversations the stream's last 40 s created (and did not delete) that the store lacks
(``bridge_core/scale/started.py`` ``restore_created``), and so does a survivor taking a dead node's runs over (the
node may stay down).

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
locks the ``conversations`` table (n1's row of the new conversation waits) while n1 is killed, as
``test_start_lost.py`` does with ``runs``."""

from __future__ import annotations

from tests.scale.killed import pheby_pair, reconnected
from tests.waiting import until


async def _listed(app) -> set:
    return {c["conversation_id"] for c in (await app.request("conversation.list"))["conversations"]}


async def _created_unstored(pair, name: str) -> str:
    """A conversation ``name`` created through n1 and folded by n2 while the store held n1's row of it back; then
    n1 killed -9 and the hold let go: the creation in the stream, not in the store. Its id."""
    await pair.hold("LOCK TABLE conversations IN EXCLUSIVE MODE")  # reads go on, n1's row of it waits
    await pair.a1.send({"type": "conversation.create", "request_id": "lost", "name": name})
    seen = await pair.a2.wait_frame(lambda f: f.get("name") == name and f.get("conversation_id"), 15)
    cid = seen["conversation_id"]
    assert cid in await _listed(pair.a2)  # n2 folded the creation from the stream
    pair.n1.kill9()
    await pair.release()
    cur = await pair.reads.execute("SELECT 1 FROM conversations WHERE id=%s", (cid,))
    assert await cur.fetchone() is None  # the store never had it
    return cid


async def _stored(reads, cid: str, name: str, what: str) -> None:
    async def stored() -> bool:
        cur = await reads.execute("SELECT name FROM conversations WHERE id=%s", (cid,))
        return await cur.fetchone() == (name,)

    await until(stored, 30, what)


async def test_a_conversation_whose_row_its_node_never_committed_is_known_after_that_node_restarts(
        serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "before") as pair:
        cid = await _created_unstored(pair, "created, never stored")
        pair.n1.start()
        a1 = await reconnected(pair)
        assert cid in await _listed(a1), "unknown to n1 after its restart (loaded from a store without it)"
        assert cid in await _listed(pair.a2)
        await _stored(pair.reads, cid, "created, never stored", "the conversation's row written by n1's restart")


async def test_a_conversation_whose_row_its_node_never_committed_is_written_by_the_node_taking_its_runs_over(
        serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "a run on n1") as pair:
        run = await pair.a1.chat(pair.cid, "/slow 60")  # n1 owns a running run: n2 takes it over once n1 is dead
        await pair.a2.wait_frame(lambda f: f["type"] == "message.start" and f.get("run_id") == run["run_id"], 15)
        cid = await _created_unstored(pair, "created, n1 stays down")
        await _stored(pair.reads, cid, "created, n1 stays down", "the row written by n2 taking n1's runs over")
        pair.n1.start()
        a1 = await reconnected(pair)
        assert cid in await _listed(a1)


async def test_a_conversation_deleted_since_its_creation_is_not_written_back_by_a_restart(serve_nodes, engines):
    """The legitimate path beside it: a creation the stream still holds whose deletion came after it stays deleted
    (the restart reads both back: never a deleted conversation brought back to the store and every node)."""
    async with pheby_pair(serve_nodes, engines, "deleted on n2") as pair:
        cid = pair.cid  # created through n1, stored
        reply = await pair.a2.request("conversation.delete", conversation_id=cid)
        assert reply["type"] == "conversation.deleted", reply  # answered once the deletion committed
        cur = await pair.reads.execute("SELECT 1 FROM conversations WHERE id=%s", (cid,))
        assert await cur.fetchone() is None
        pair.n1.kill9()
        pair.n1.start()
        a1 = await reconnected(pair)
        kept = await pair.a1.request("conversation.create", name="after the restart")  # the restart's writes done
        assert kept["type"] == "conversation.created", kept
        assert cid not in await _listed(a1)
        cur = await pair.reads.execute("SELECT 1 FROM conversations WHERE id=%s", (cid,))
        assert await cur.fetchone() is None
