"""Runs a restart left open (pure): REST bodies' depth, OpenRun over stored events, and the
renderer closing a restored run on the core's RunFinished."""

from __future__ import annotations

import pytest

from bridge_core.model import events as ev
from bridge_core.model.errors import BadRequest
from lvmh_adapter import codec
from lvmh_adapter.render import RESTART, OpenRun, Renderer

CID = "c-restored"


@pytest.mark.parametrize(
    "data, fragment",
    [
        (b"[" * 100_000, "deep"),
        (b"[" * 2000 + b"]" * 2000, "deep"),
        (b'{"a":' * 40 + b"1" + b"}" * 40, "deep"),
        (b"[1]", "object"),
        (b"nope", "not valid JSON"),
        (b"", "object"),
    ],
)
def test_json_body_refuses_with_a_reason(data, fragment):
    with pytest.raises(BadRequest) as info:
        codec.json_body(data)
    assert fragment in info.value.message


def test_json_body_accepts_what_routes_need():
    assert codec.json_body(b'{"message": "hi", "x": {"y": [1, {"z": 2}]}}')["message"] == "hi"
    assert codec.json_body(b"  ", allow_empty=True) == {}


def stored_run(*extra: tuple) -> OpenRun:
    run = OpenRun()
    events = [
        ("agent_start", {"runId": "r1"}),
        ("message_start", {"message": {"role": "user", "id": "u1"}}),
        ("message_end", {"message": {"role": "user", "id": "u1", "text": "q"}}),
        ("message_start", {"message": {"role": "assistant", "id": "m1"}}),
        *extra,
    ]
    for etype, obj in events:
        run.feed(etype, obj)
    return run


def test_open_run_tracks_what_is_left_open():
    run = stored_run(
        ("tool_execution_start", {"toolCallId": "t1", "toolName": "bash"}),
        ("tool_execution_start", {"toolCallId": "t2", "toolName": "read"}),
        ("tool_execution_end", {"toolCallId": "t2", "toolName": "read"}),
        ("approval_request", {"approvalId": "a1"}),
        ("approval_request", {"approvalId": "a2"}),
        ("approval_resolved", {"approvalId": "a2"}),
        ("clarify_request", {"clarifyId": "c1"}),
    )
    assert run.open and run.run_id == "r1" and run.open_id == "m1" and run.messages == 1
    out = run.settle(RESTART)
    assert [t for t, _ in out] == ["message_end", "tool_execution_end", "approval_resolved", "clarify_resolved",
                                   "agent_settled"]
    assert out[0][1]["message"] == {"role": "assistant", "id": "m1", "text": "", "thinking": None,
                                    "toolCalls": [], "toolCallId": None}
    assert out[1][1]["toolCallId"] == "t1" and out[1][1]["isError"] is True
    assert out[2][1]["approvalId"] == "a1" and out[2][1]["choice"] == "deny" and out[2][1]["accepted"] is False
    assert out[3][1]["clarifyId"] == "c1" and out[3][1]["accepted"] is False
    assert out[4][1]["aborted"] is True
    assert not run.open


def test_a_settled_run_is_not_open():
    run = stored_run(("message_end", {"message": {"role": "assistant", "id": "m1", "text": "a"}}),
                     ("agent_end", {}), ("agent_settled", {}))
    assert not run.open and run.closing(RESTART) == []


def test_the_renderer_closes_a_restored_run_once_on_run_finished():
    r = Renderer(lambda cid: {"id": cid})
    run = stored_run(("approval_request", {"approvalId": "a1"}), ("approval_request", {"approvalId": "a2"}))
    r.restore(CID, run)
    assert r.restored(CID) == "r1"
    # the core resolves one itself (it knew it): that one is not resolved twice
    got = r.render(ev.ApprovalResolved(conversation_id=CID, approval_id="a2", choice="deny", accepted=False,
                                       decided_by="timeout", run_id="r1"))
    assert [t for t, _ in got] == ["approval_resolved"]
    got = r.render(ev.RunFinished(conversation_id=CID, run_id="r1", status="failed", error="interrupted"))
    types = [t for t, _ in got]
    assert types == ["message_end", "approval_resolved", "agent_end", "agent_settled"]
    assert got[0][1]["message"]["id"] == "m1"
    assert got[1][1]["approvalId"] == "a1"
    assert r.restored(CID) is None
    # a later run renders as usual, with nothing of the old one
    got = r.render(ev.RunStarted(conversation_id=CID, run_id="r2", message_id="m2"))
    got += r.render(ev.RunFinished(conversation_id=CID, run_id="r2", status="completed", text="x"))
    assert [t for t, _ in got] == ["agent_start", "message_start", "message_end", "agent_end", "agent_settled"]


async def test_a_run_the_core_does_not_report_is_closed_by_lvmh_itself(service_factory, tmp_path):
    """Stored lvmh events show a run open, but the runs table says it ended (its end was lost
    to the crash before lvmh's rows were written): lvmh closes it on start, once."""
    from bridge_core.model import commands as cmd
    from tests.lvmh.helpers import Api

    data = tmp_path / "shared"
    svc = await service_factory(adapters=("lvmh",), data_dir=data)
    conv = await svc.bridge.execute(cmd.CreateConversation(name="unreported"), cmd.LOCAL)
    sid = conv.conversation_id
    api = Api(svc.ports["lvmh"])
    try:
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "/approve make clean"})
        assert status == 200
        await api.wait_events(sid, lambda evs: any(e["type"] == "approval_request" for e in evs))
    finally:
        await api.close()
    await svc.bridge.store.aflush()
    svc.bridge.store.submit(lambda c: c.execute("UPDATE runs SET status='completed'")).result(timeout=10)
    await svc.stop()

    svc2 = await service_factory(adapters=("lvmh",), data_dir=data)
    assert svc2.bridge.interrupted_runs == []
    api = Api(svc2.ports["lvmh"])
    try:
        evs = await api.wait_events(sid, lambda evs: evs and evs[-1]["type"] == "agent_settled")
        types = [e["type"] for e in evs]
        assert types.count("agent_settled") == 1 and types.count("approval_resolved") == 1
        end = next(e for e in evs if e["type"] == "agent_end")
        assert end["status"] == "failed"
        resolved = next(e for e in evs if e["type"] == "approval_resolved")
        assert resolved["choice"] == "deny" and resolved["accepted"] is False and resolved["decidedBy"] == RESTART
    finally:
        await api.close()
