"""A node behind in the stream that read a conversation's transcript, the run's saved draft row and all,
before it folded that run's start (chaos seed 2010, docs/performance.md "Chaos": n2 behind after a Redis
restart, a Pheby ``conversation.open`` there at 43.6 s while the run streamed). The store holds a streaming
run's draft as its message's row (bridge_core/bridge/drafts.py); the node took it for a message, then folded
the start and showed the run twice: in ``messages`` with its first words ('w1') and as the active ``run``
with its draft so far ('w1 ... w12'), its messages short of the message the store holds at the end
(transcript_contradicts_client). While a run streams its message is its draft, shown in ``run`` only, as a
transcript loaded with the run known leaves it out (bridge_core/bridge/transcripts.py ``unfinished_out``).
Over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

from tests.scale.test_behind_transcript import streaming_while_behind
from tests.scale.test_cluster import _app, _nodes
from tests.waiting import until


async def test_a_node_behind_shows_a_streaming_run_once_in_its_snapshot(service_factory, engines, tmp_path):
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    pb = None
    try:
        b, pb, cid, gate, run_id, mid = await streaming_while_behind(service_factory, engines, tmp_path, pa, 5)
        gate.open.set()  # b reads on: the user's message folded loads the transcript, draft row and all
        conv = b.bridge.conversations[cid]
        await until(lambda: conv.run is not None and conv.run.run_id == run_id, what="the run's start on b")
        snap = await pb.open(cid)
        assert snap["run"] is not None and snap["run"]["message_id"] == mid, "the run ended before the open"
        assert mid not in [m["message_id"] for m in snap["messages"]], [m["text"] for m in snap["messages"]]
        done = await pa.wait_frame(lambda f: f["type"] == "message.complete" and f["message_id"] == mid, 20)
        await until(lambda: conv.run is None, what="the run's end folded on b")
        snap = await pb.open(cid)
        assert {m["message_id"]: m["text"] for m in snap["messages"]}[mid] == done["text"]
        assert [m.message_id for m in conv.messages] == [m.message_id for m in a.bridge.conversations[cid].messages]
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()
