"""The rules of what a node reads back from the store after a gap (bridge_core/scale/reload.py), on one bridge
and its store: what is never read back (a conversation deleted here lately, a decision this node asked, one
asked too lately for its row to be committed) beside what is. The whole path over real sockets on two nodes:
tests/scale/test_gone_read_back.py."""

from __future__ import annotations

from bridge_core.bridge.decisions import PENDING_KEY
from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.scale import reload
from tests.core.test_bridge import PHEBY, bridge  # noqa: F401  (bridge: the fixture, a started bridge)
from tests.waiting import until


def _fold(bridge):
    def fold(e):
        conv = bridge.conversations.get(e.conversation_id)
        if conv is not None:
            conv.apply(e)
        bridge.decisions.fold(e, conv)
        folded.append(e)

    folded: list = []
    return fold, folded


async def _asked(bridge):
    """An approval asked in a run of its own, its row flushed: the send's result, the conversation, the approval's
    id, and a fold of the read back (``_fold``) with what it folded."""
    res = await bridge.execute(cmd.SendMessage(text="/approve ls"), PHEBY)
    conv = bridge.conversation(res.conversation_id)
    await until(lambda: conv.approvals, what="the approval asked")
    (aid,) = conv.approvals
    await bridge.store.aflush()
    fold, folded = _fold(bridge)
    return res, conv, aid, fold, folded


def _add_row(c, cid: str) -> None:
    c.execute("INSERT INTO conversations(id, name, source, created_at, updated_at) VALUES(?,?,?,?,?)",
              (cid, "elsewhere", "demo", 1.0, 1.0))  # fmt: skip


async def test_a_conversation_created_elsewhere_is_loaded_one_deleted_here_is_not(bridge):
    res = await bridge.execute(cmd.SendMessage(text="hello"), PHEBY)
    await until(lambda: bridge.conversation(res.conversation_id).run is None, what="the run's end")
    bridge.publish(ev.ConversationDeleted(conversation_id=res.conversation_id))
    await bridge.store.aflush()
    # its deletion's write not committed yet (another node's, held): the store still has its row
    await bridge.store.write(lambda c: (_add_row(c, res.conversation_id), _add_row(c, "made-elsewhere")))
    assert bridge.load_conversations() == ["made-elsewhere"]
    conv = bridge.conversations["made-elsewhere"]
    assert (conv.name, conv.source, list(conv.messages)) == ("elsewhere", "demo", [])
    assert bridge.load_conversations() == []  # known now


async def test_a_decision_whose_row_is_gone_is_settled_once_old_enough_and_only_another_nodes(bridge):
    _, conv, aid, fold, folded = await _asked(bridge)
    # its row there: pending still
    assert reload.settled_decisions(bridge, fold, {aid}, {}, float("inf")) == 0
    await bridge.store.write(lambda c: c.execute("DELETE FROM settings WHERE key=?", (PENDING_KEY + aid,)))
    # this node's own (not another node's): its agent settles it, never the read back
    assert reload.settled_decisions(bridge, fold, set(), {}, float("inf")) == 0
    # asked after ``before``: its row may not be committed yet
    assert reload.settled_decisions(bridge, fold, {aid}, {}, conv.approvals[aid].ts) == 0
    assert folded == [] and bridge.decisions.pending(aid) == conv.conversation_id
    assert reload.settled_decisions(bridge, fold, {aid}, {}, float("inf")) == 1
    (resolved,) = folded
    assert (type(resolved), resolved.approval_id, resolved.choice, resolved.accepted, resolved.decided_by) == \
        (ev.ApprovalResolved, aid, "deny", False, "remote")  # fmt: skip
    assert bridge.decisions.pending(aid) is None and conv.approvals == {} and aid in bridge.decisions.resolved
    assert reload.settled_decisions(bridge, fold, {aid}, {}, float("inf")) == 0  # once


async def test_a_decision_whose_run_ended_is_settled_as_the_end_says(bridge):
    res, conv, aid, fold, folded = await _asked(bridge)
    ends = {res.run_id: ("cancelled", None, 2.0)}
    # its row still there, asked just now, in no node's ``theirs`` (put back at a start): its run's end settles it
    assert reload.settled_decisions(bridge, fold, set(), ends, 0.0) == 1
    assert folded[0].decided_by == "cancelled" and bridge.decisions.pending(aid) is None
