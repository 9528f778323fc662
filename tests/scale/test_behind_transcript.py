"""A node behind in the stream that reads a conversation's transcript from the store while another
node's run streams there (chaos seeds 2001 and 2003, docs/performance.md "Chaos": a node continued
after a stop, or restarted): the store holds the run's saved draft as its message's row (bridge_core/
bridge/drafts.py), and the node, which has not folded the run's start yet, takes that row for a
message. The run's completion, folded later, found a message with its id and was taken as seen
(bridge_core/scale/seen.py): the node kept the draft's first words for good, its Pheby
``conversation.open`` short of what every client got (transcript_contradicts_client) and its
transcript short of the other nodes' (nodes_disagree). The completion replaces that row's text, as
it replaces the row in the store. Over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

from bridge_core.model.ids import draft_message_id
from tests.scale.test_cluster import _app, _nodes
from tests.scale.test_read_your_writes import _behind
from tests.waiting import until


async def _cold(b, pa, pb, cid: str) -> None:
    """``cid``'s transcript out of ``b``'s memory, as the bound on transcripts in memory drops it (one kept
    here): another conversation opened on ``b`` (bridge_core/bridge/transcripts.py)."""
    b.bridge.transcripts.max_conversations = 1
    other = await pa.create("another one")
    await until(lambda: other in b.bridge.conversations, what="the other conversation on b")
    for _ in range(100):  # a transcript goes once the store has its writes (the next use tries again)
        await pb.open(other)
        if cid not in b.bridge.transcripts:
            break
    assert cid not in b.bridge.transcripts and b.bridge.conversations[cid].transcript is None


async def streaming_while_behind(service_factory, engines, tmp_path, pa, seconds: int) -> tuple:
    """A conversation made and answered on a, then node b started, its transcript cold and b held behind
    the stream while a streams ``/slow seconds`` into it, until the run's first words are in the store as
    the message's row (the saved draft): ``(b, pb, cid, gate, run_id, mid)``."""
    cid = await pa.create("made before b started")
    first = (await pa.chat(cid, "first"))["run_id"]
    await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == first)
    (b,) = await _nodes(service_factory, engines, tmp_path, "b")
    pb = await _app(b)
    await _cold(b, pa, pb, cid)
    gate = await _behind(b)
    run_id = (await pa.chat(cid, f"/slow {seconds}"))["run_id"]
    mid = draft_message_id(run_id)
    await until(lambda: b.bridge.store.message_text(cid, mid), what="the run's draft saved")
    return b, pb, cid, gate, run_id, mid


async def test_a_node_behind_loading_a_transcript_mid_run_keeps_the_completion_not_the_draft(
        service_factory, engines, tmp_path):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    pb = None
    try:
        b, pb, cid, gate, run_id, mid = await streaming_while_behind(service_factory, engines, tmp_path, pa, 2)
        gate.open.set()  # b reads on: the user's message folded loads the transcript, draft row and all
        done = await pa.wait_frame(lambda f: f["type"] == "message.complete" and f["message_id"] == mid, 15)
        await until(lambda: b.bridge.conversations[cid].run is None, what="the run's end folded on b")
        on_b = {m.message_id: m.text for m in b.bridge.conversations[cid].messages}
        assert on_b.get(mid) == done["text"], (len(on_b.get(mid) or ""), len(done["text"]))
        snap = await pb.open(cid)
        texts = {m["message_id"]: m["text"] for m in snap["messages"]}
        assert texts[mid] == done["text"], (len(texts[mid]), len(done["text"]))
        assert [m.message_id for m in b.bridge.conversations[cid].messages] == \
            [m.message_id for m in a.bridge.conversations[cid].messages]  # fmt: skip
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()


async def test_a_node_behind_loading_a_transcript_after_a_run_it_still_shows_active_keeps_the_order(
        service_factory, engines, tmp_path):  # fmt: skip
    """Chaos seed 2001 (nodes_disagree, the messages in another order on one node): ``b`` has folded a run's
    start, not its end, when it reads the transcript, which by then holds the run's completed message and
    later ones. The load left the run's message out (while a run streams, its row is its draft); its
    completion, folded after, went to the end, after messages that came later. Only a newest row can be a
    streaming draft: one with rows after it is kept where it is (bridge_core/bridge/transcripts.py)."""
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa = await _app(a)
    pb = None
    try:
        cid = await pa.create("made before b started")
        (b,) = await _nodes(service_factory, engines, tmp_path, "b")
        pb = await _app(b)
        run_id = (await pa.chat(cid, "/slow 1"))["run_id"]
        conv = b.bridge.conversations[cid]
        await until(lambda: conv.run is not None and conv.run.run_id == run_id, what="the run's start on b")
        gate = await _behind(b)
        # the state a start of b would leave now (Bridge._load: transcripts cold; _load_running: the run the
        # store has running, active): its transcript out of memory (the bound keeps none with a run active)
        b.bridge.transcripts.forget(cid)
        conv.transcript = None
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run_id, 15)
        later = (await pa.chat(cid, "later"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == later)
        gate.open.set()
        want = [(m.message_id, m.text) for m in a.bridge.conversations[cid].messages]
        await until(lambda: conv.run is None and len(conv.messages) == len(want), what="b caught up")
        assert [(m.message_id, m.text) for m in conv.messages] == want
        snap = await pb.open(cid)
        assert [(m["message_id"], m["text"]) for m in snap["messages"]] == want
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()
