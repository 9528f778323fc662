"""A send the source fails to start after the claim shows its message nowhere (chaos seed 2412, nodes_disagree),
over real sockets to two `agent-bridge serve` nodes on a private PostgreSQL and Redis.

The demo source reads the run's model from the shared store (``StoredSettings``) when it starts a run. In the
chaos run that read failed (PostgreSQL restarting) after the user's message had gone out on the bus: the send was
refused, no run ever started, yet every live node showed the message, while its row, lost with the batch the
restart broke, was in no store: the nodes that loaded later lacked it. Here the read fails on a setting the
test stores unreadable: the send is answered with an error, and neither node (nor the store) holds its message;
the next send, the setting repaired, runs as usual on both.
"""

from __future__ import annotations

from tests.scale.killed import pheby_pair
from tests.scale.test_nodes import _watching


async def test_a_send_failing_to_start_shows_its_message_on_no_node(serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "Refused") as pair:
        a1, a2, cid, db = pair.a1, pair.a2, pair.cid, pair.reads
        await _watching([a2], cid)
        key = f"agent.model:{cid}"
        await db.execute("INSERT INTO settings(key, value) VALUES(%s, %s)", (key, "{unreadable"))
        refused = await a1.chat(cid, "never shown")
        assert refused["type"] == "error", refused
        await db.execute("DELETE FROM settings WHERE key=%s", (key,))
        accepted = await a1.chat(cid, "shown")
        assert accepted["type"] == "run.accepted", accepted
        for app in (a1, a2):
            await app.wait_until(lambda: accepted["run_id"] in app.view(cid).finished)
            history = await app.open(cid)
            assert [(m["role"], m["text"]) for m in history["messages"]] == [
                ("user", "shown"), ("assistant", "Echo: shown")], history
        rows = await (await db.execute("SELECT text FROM messages WHERE conversation_id=%s", (cid,))).fetchall()
        assert sorted(t for (t,) in rows) == ["Echo: shown", "shown"], rows
