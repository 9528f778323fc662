"""Bridge commands on the demo agent, without a front end."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.bridge.demo import DemoAgent, demo_png
from bridge_core.bridge.bridge import Bridge
from bridge_core.model.errors import AlreadyResolved, ApprovalNotFound, BadRequest, ConversationNotFound, RunActive
from tests.waiting import turns, until

PHEBY = cmd.Origin(surface="pheby")
LOOMI = cmd.Origin(surface="loomi", decided_by="remote")


@pytest.fixture
async def bridge(tmp_path):
    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=None))
    await b.start()
    yield b
    await b.stop()


async def run_to_end(bridge, text, cid=None):
    events = []
    unsub = bridge.hub.subscribe(lambda s, e: events.append(e))
    res = await bridge.execute(cmd.SendMessage(text=text, conversation_id=cid), PHEBY)
    await until(lambda: any(isinstance(e, ev.RunFinished) and e.run_id == res.run_id for e in events), what="the run's end")
    unsub()
    return res, events


async def test_send_without_conversation_creates_one(bridge):
    res, events = await run_to_end(bridge, "hello   world")
    assert res.created and bridge.conversation(res.conversation_id).name == "hello world"
    assert [type(e).__name__ for e in events][:3] == ["ConversationCreated", "UserMessageSent", "RunStarted"]
    assert events[-2].text == "Echo: hello   world"


async def test_bench_text_is_exact(bridge):
    res, events = await run_to_end(bridge, "/bench 1000")
    deltas = [e for e in events if isinstance(e, ev.TextDelta)]
    assert len(deltas) == 1000 and all(d.delta == "tok " for d in deltas)
    assert [e for e in events if isinstance(e, ev.MessageCompleted)][0].text == "tok " * 1000


async def test_one_run_at_a_time(bridge):
    res = await bridge.execute(cmd.SendMessage(text="/slow 5"), PHEBY)
    with pytest.raises(RunActive):
        await bridge.execute(cmd.SendMessage(text="x", conversation_id=res.conversation_id), PHEBY)
    await bridge.execute(cmd.CancelRun(conversation_id=res.conversation_id, run_id=res.run_id), PHEBY)
    assert bridge.conversation(res.conversation_id).run is None


async def test_approval_first_answer_wins_across_surfaces(bridge):
    res = await bridge.execute(cmd.SendMessage(text="/approve ls"), PHEBY)
    await until(lambda: bridge.conversation(res.conversation_id).approvals, what="the approval request")
    conv = bridge.conversation(res.conversation_id)
    (aid,) = conv.approvals
    assert conv.status == "waiting"
    first = await bridge.execute(cmd.ResolveApproval(approval_id=aid, choice="once"), LOOMI)
    assert first.surface == "loomi" and first.decided_by == "remote"
    with pytest.raises(AlreadyResolved):
        await bridge.execute(cmd.ResolveApproval(approval_id=aid, choice="deny"), PHEBY)
    with pytest.raises(ApprovalNotFound):
        await bridge.execute(cmd.ResolveApproval(approval_id="zzz", choice="deny"), PHEBY)
    with pytest.raises(BadRequest):
        await bridge.execute(cmd.ResolveApproval(approval_id=aid, choice="perhaps"), PHEBY)


async def test_approval_timeout_resolves_as_timeout(tmp_path):
    b = Bridge(str(tmp_path / "d"), DemoAgent(approval_timeout=0.05))
    await b.start()
    try:
        res, events = await run_to_end(b, "/approve rm x")
        resolved = [e for e in events if isinstance(e, ev.ApprovalResolved)]
        assert len(resolved) == 1 and resolved[0].decided_by == "timeout" and resolved[0].choice == "deny"
        assert resolved[0].accepted is False
        assert [e for e in events if isinstance(e, ev.MessageCompleted)][0].text.startswith("Approval timed out")
        with pytest.raises(AlreadyResolved):
            await b.execute(cmd.ResolveApproval(approval_id=resolved[0].approval_id, choice="once"), PHEBY)
    finally:
        await b.stop()


async def _crash_mid_run(tmp_path):
    """A bridge whose ``/slow 30`` run has streamed its first words when the process "dies"
    (the store closed with the run unfinished). Returns the data dir, the dead bridge and the run."""
    d = str(tmp_path / "d")
    b = Bridge(d, DemoAgent())
    await b.start()
    res = await b.execute(cmd.SendMessage(text="/slow 30"), PHEBY)
    await until(lambda: b.conversation(res.conversation_id).run.text, what="the first streamed words (saved at once)")
    b.store.flush()
    b.store.close()
    return d, b, res


async def test_interrupted_run_is_failed_after_restart(tmp_path):
    d, b, res = await _crash_mid_run(tmp_path)
    b2 = Bridge(d, DemoAgent())
    await b2.start()
    try:
        assert b2.interrupted_runs == [(res.conversation_id, res.run_id)]
        assert b2.store.query("SELECT status, error FROM runs WHERE run_id=?", (res.run_id,)) == [("failed", "interrupted by a restart")]
        # back as the active run until report_interrupted closes it (Service.start, once front ends listen)
        assert b2.conversation(res.conversation_id).run.run_id == res.run_id
        assert [m.text for m in b2.conversation(res.conversation_id).messages] == ["/slow 30"]
    finally:
        await b2.stop()
        for t in list(b.tasks._tasks):
            t.cancel()


async def test_restart_marks_interrupted_runs_without_blocking_the_loop(tmp_path):
    d, b, res = await _crash_mid_run(tmp_path)
    b2 = Bridge(d, DemoAgent())
    b2.store.open()
    # the writer is held until the loop itself opens the gate: were the start to wait for the
    # failed-run write by blocking the loop, the gate would never open (the wait gives up)
    gate = threading.Event()
    opened: list[bool] = []
    b2.store.submit(lambda c: opened.append(gate.wait(30)))
    starting = asyncio.ensure_future(b2.start())
    try:
        await turns()
        assert not starting.done()  # waiting on the writer, with the loop free
        asyncio.get_running_loop().call_soon(gate.set)
        await starting
        assert opened == [True]
        assert b2.store.query("SELECT status, error FROM runs WHERE run_id=?", (res.run_id,)) == [("failed", "interrupted by a restart")]
    finally:
        gate.set()
        if not starting.done():
            await starting
        await b2.stop()
        for t in list(b.tasks._tasks):
            t.cancel()


async def test_unknown_conversation(bridge):
    with pytest.raises(ConversationNotFound):
        await bridge.execute(cmd.OpenConversation(conversation_id="nope"), PHEBY)


async def test_task_list_status(bridge):
    a = await bridge.execute(cmd.SendMessage(text="/approve ls"), PHEBY)
    b, _ = await run_to_end(bridge, "hi")
    await until(lambda: bridge.conversation(a.conversation_id).approvals, what="the approval request")
    waiting = await bridge.execute(cmd.ListTasks(status_filter="waiting"), PHEBY)
    assert [c.conversation_id for c in waiting] == [a.conversation_id]
    idle = await bridge.execute(cmd.ListTasks(status_filter="idle"), PHEBY)
    assert [c.conversation_id for c in idle] == [b.conversation_id]


def test_demo_png_is_valid():
    data = demo_png()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


async def test_interrupted_run_is_reported_failed_once_front_ends_listen(tmp_path):
    """report_interrupted (called by Service.start after the front ends start): a notice and RunFinished failed."""
    d, b, res = await _crash_mid_run(tmp_path)
    b2 = Bridge(d, DemoAgent())
    await b2.start()
    try:
        seen = []
        b2.hub.subscribe(lambda s, e: seen.append(e))
        assert b2.report_interrupted() == 1
        assert b2.report_interrupted() == 0  # once
        completed, finished, notice = seen  # the run closes what it opened, then a notice says why
        assert isinstance(completed, ev.MessageCompleted) and completed.message_id == f"draft-{res.run_id}"
        assert isinstance(notice, ev.Notification) and "interrupted by a restart" in notice.text
        assert notice.conversation_id == res.conversation_id and notice.category == "diagnostic"
        assert isinstance(finished, ev.RunFinished)
        assert (finished.run_id, finished.status, finished.error) == (res.run_id, "failed", "interrupted by a restart")
        # completed with the draft saved before the crash (a prefix of what was streamed)
        assert completed.text.startswith("w1") and "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10".startswith(completed.text)
        assert [m.text for m in b2.conversation(res.conversation_id).messages] == ["/slow 30", completed.text, notice.text]
        assert b2.conversation(res.conversation_id).run is None
    finally:
        await b2.stop()
        for t in list(b.tasks._tasks):
            t.cancel()


async def test_a_finished_run_leaves_no_pending_decision_ids(bridge):
    res = await bridge.execute(cmd.SendMessage(text="/approve ls"), PHEBY)
    await until(lambda: bridge.conversation(res.conversation_id).approvals, what="the approval request")
    (aid,) = bridge.conversation(res.conversation_id).approvals
    await bridge.execute(cmd.CancelRun(conversation_id=res.conversation_id, run_id=res.run_id), PHEBY)
    assert aid not in bridge.decisions.approvals
    with pytest.raises(AlreadyResolved):  # the run's end resolved it (deny, decided_by cancelled)
        await bridge.execute(cmd.ResolveApproval(approval_id=aid, choice="once"), PHEBY)
