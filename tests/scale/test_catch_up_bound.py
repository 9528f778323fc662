"""Read-your-writes has a bound (bridge_core/scale/catchup.py ``CATCH_UP_WAIT``, the bus's
``catch_up_wait``): a node whose reading of the stream is held back answers a command with
``unavailable`` once the bound has passed (Pheby: ``not_found`` with its message, the spec's closed
set), never from the view it knows is behind, and carries out the same command as soon as it has read
on. Over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

from tests.scale.test_cluster import _app, _nodes
from tests.scale.test_read_your_writes import _behind

BOUND = 0.5  # s: the test's own bound (10 s by default)


async def test_a_node_that_cannot_catch_up_answers_unavailable_after_the_bound(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    b.bridge.cluster.bus.catch_up_wait = BOUND
    pa, pb = await _app(a), await _app(b)
    try:
        gate = await _behind(b)
        cid = await pa.create("made on a")  # acknowledged by a: in the stream b does not read
        reply = await pb.chat(cid, "hello from b")
        # the core's ``unavailable``; Pheby's closed set of codes has none, it says ``not_found`` with the
        # core's message (pheby_adapter/errors.py), never ``conversation_not_found`` from the stale view
        assert reply["type"] == "error", reply
        assert reply["error"] == {"code": "not_found", "message": "This node is catching up with the others; try again"}
        assert cid not in b.bridge.conversations  # nothing was done from the stale view
        assert not any(f.get("type") == "run.accepted" for f in pb.conn_frames)
        gate.open.set()  # b reads on: the same command, sent again, is carried out
        again = await pb.chat(cid, "hello from b")
        assert again["type"] == "run.accepted", again
        await pb.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == again["run_id"])
        assert pb.violations == [] and pa.violations == []
    finally:
        await pa.close()
        await pb.close()
