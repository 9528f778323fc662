"""Read-your-writes across nodes (bridge_core/scale/catchup.py; the nemesis scenarios of seeds 4104
and 4106 run it as processes under SIGSTOP): a node behind in the stream answers a command only once
it has read the stream to where it ended, over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

import asyncio

from tests.scale.gates import Gate
from tests.scale.test_cluster import _app, _nodes


async def _behind(b) -> Gate:
    """``b`` stops reading the stream (as a node stopped): what comes next stays unread until ``open``."""
    gate = Gate(b.bridge.cluster.bus)
    gate.close()
    await asyncio.wait_for(gate.parked.wait(), 10)  # the read under way when it closed has come back
    return gate


async def test_a_send_into_a_conversation_created_on_another_node_while_this_one_is_behind(
        service_factory, engines, tmp_path):  # fmt: skip
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    pa, pb = await _app(a), await _app(b)
    try:
        gate = await _behind(b)
        cid = await pa.create("made on a")  # acknowledged: a's event is in the stream
        assert cid not in b.bridge.conversations  # b has not read it
        sent = asyncio.ensure_future(pb.chat(cid, "hello from b"))
        gate.open.set()  # b goes on reading; its answer waited for it
        reply = await sent
        assert reply["type"] == "run.accepted", reply  # not conversation/task not found
        assert pb.violations == []
    finally:
        await pa.close()
        await pb.close()


async def test_a_run_another_node_ran_meanwhile_is_folded_before_this_nodes_run(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    pa, pb = await _app(a), await _app(b)
    try:
        cid = await pa.create("one order")
        await pb.wait_until(lambda: cid in b.bridge.conversations)
        gate = await _behind(b)
        run_a = (await pa.chat(cid, "first, on a"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_a)
        sent = asyncio.ensure_future(pb.chat(cid, "second, on b"))
        gate.open.set()
        reply = await sent
        assert reply["type"] == "run.accepted", reply
        run_b = reply["run_id"]
        for app in (pa, pb):
            await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_b)
        texts = [[m.text for m in svc.bridge.conversations[cid].messages] for svc in (a, b)]
        assert texts[0] == texts[1] and texts[0][0] == "first, on a" and texts[0][2] == "second, on b"
    finally:
        await pa.close()
        await pb.close()
