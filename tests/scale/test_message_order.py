"""A conversation's messages in one order on every node (chaos seed 2004, ``nodes_disagree``: two nodes
held a conversation's messages in different orders, for good).

A node folds the stream in order; a node that reads a transcript from the store (restarted, or its copy
dropped by the bound on transcripts in memory) read it in the store's row order, which is the writers'
commit order. With several nodes the origin's write of a run's completion can commit after another
node's write of the next user message (the origin's writer held: a PostgreSQL restart, a stop, a starved
CPU), and the completion replaces its row at the end. The one order is the messages' ``ts``
(bridge_core/bridge/transcripts.py ``in_order``, ``place``). Over real Pheby sockets on a private
PostgreSQL and Redis."""

from __future__ import annotations

import threading

from bridge_core.model import events as ev
from bridge_core.model.ids import draft_message_id
from bridge_core.model.state import Transcript
from tests.scale.test_cluster import _app, _nodes
from tests.waiting import until


def _hold_writer(svc) -> threading.Event:
    """``svc``'s store writer waits (everything it writes after this commits later) until the event is set."""
    go = threading.Event()
    svc.bridge.store.write_later(lambda c: go.wait(30), barrier=False)
    return go


async def test_a_completion_committed_after_the_next_message_on_another_node_keeps_its_place(
        service_factory, engines, tmp_path):  # fmt: skip
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    pa, pb = await _app(a), await _app(b)
    go = None
    try:
        cid = await pa.create("ordered")
        await until(lambda: cid in b.bridge.conversations, what="the conversation on b")
        run = (await pa.chat(cid, "/slow 1"))["run_id"]
        mid = draft_message_id(run)
        await until(lambda: a.bridge.store.message_text(cid, mid), what="the run's first words stored on a")
        go = _hold_writer(a)  # a's write of the completion waits: it commits after b's next message
        on_b = b.bridge.conversations[cid]
        await until(lambda: any(m.message_id == mid for m in on_b.messages) and on_b.run is None,
                    timeout=15, what="the run's end folded on b")  # fmt: skip
        later = (await pb.chat(cid, "later, on b"))["run_id"]
        await until(lambda: b.bridge.store.message_text(cid, draft_message_id(later)), what="b's run stored")
        go.set()
        done = next(m.text for m in on_b.messages if m.message_id == mid)
        await until(lambda: a.bridge.store.message_text(cid, mid) == done, what="a's completion committed")
        on_a, reply = a.bridge.conversations[cid], draft_message_id(later)
        await until(lambda: b.bridge.conversations[cid].run is None
                    and _text(on_a, reply) is not None and _text(on_a, reply) == _text(on_b, reply),
                    timeout=15, what="b's later run ended and folded on a too")  # fmt: skip
        want = [(m.message_id, m.text) for m in on_a.messages]
        assert [(m.message_id, m.text) for m in on_b.messages] == want
        # b reads the transcript from the store again (as after a restart, or the bound dropping it)
        b.bridge.transcripts.forget(cid)
        on_b.transcript = None
        assert [(m.message_id, m.text) for m in on_b.messages] == want
        snap = await pb.open(cid)
        assert [(m["message_id"], m["text"]) for m in snap["messages"]] == want
    finally:
        if go is not None:
            go.set()
        await pa.close()
        await pb.close()


def _text(conv, message_id: str):
    return next((m.text for m in conv.messages if m.message_id == message_id), None)


def _m(mid: str, ts) -> ev.Message:
    return ev.Message(message_id=mid, role="assistant", text=mid, ts=ts)


def test_the_one_order_is_by_ts_equal_ones_and_those_without_as_they_came():
    from bridge_core.bridge.transcripts import in_order, place

    rows = [("u1", "user", "", 1.0), ("u2", "user", "", 3.0), ("a1", "assistant", "", 2.0),
            ("x", "assistant", "", None), ("a2", "assistant", "", 3.0)]  # fmt: skip
    assert [r[0] for r in in_order(rows)] == ["u1", "a1", "x", "u2", "a2"]
    t = Transcript([_m("u1", 1.0), _m("u2", 3.0)])
    late = _m("a1", 2.0)
    t.append(late)
    place(t, late)  # folded after a message it came before
    assert [m.message_id for m in t] == ["u1", "a1", "u2"]
    again = _m("a1", 4.0)
    t[1] = again  # completed again, later (bridge_core/scale/seen.py ``completes``)
    place(t, again)
    assert [m.message_id for m in t] == ["u1", "u2", "a1"]
    same = _m("b", 3.0)
    t.append(same)
    place(t, same)  # equal times: as they came
    assert [m.message_id for m in t] == ["u1", "u2", "b", "a1"]
