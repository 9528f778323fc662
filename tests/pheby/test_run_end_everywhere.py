"""The core's run-end resolutions as each front end renders them, over real sockets.

A Pheby client cancels a run with a pending approval: the Pheby clients get
``approval.resolved {choice: "deny", accepted: false, decided_by: "cancelled"}``,
a paired Loomi device its ``approval.resolved`` (``decided_by`` from Loomi's set:
the agent's side), the lvmh web UI its ``approval_resolved`` extension event;
every front end sees the started message completed before the run's end.
"""

from __future__ import annotations

from tests.loomi.helpers import pair
from tests.lvmh.helpers import Browser
from tests.pheby.client import PhebyClient


async def test_cancel_with_pending_approval_is_resolved_on_every_front_end(service_factory):
    svc = await service_factory()
    phone, _ = await pair(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    cid = await pheby.create("Everywhere")
    browser = await Browser(svc.ports["lvmh"]).open()
    await browser.send({"type": "subscribe", "sessionId": cid})
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve rm -rf /", "request_id": "s"})
    request = await pheby.recv_type("approval.request")
    run_id = request["run_id"]
    await phone.recv_type("approval.required")
    await pheby.send({"type": "run.cancel", "conversation_id": cid, "run_id": run_id, "request_id": "c"})
    frames = await pheby.collect_until("run.finished", run_id=run_id)

    (resolved,) = [f for f in frames if f["type"] == "approval.resolved"]
    assert (resolved["approval_id"], resolved["choice"], resolved["accepted"], resolved["decided_by"]) == (
        request["approval_id"], "deny", False, "cancelled")  # fmt: skip
    kinds = [f["type"] for f in frames if f["type"] in ("message.complete", "approval.resolved", "run.finished")]
    assert kinds == ["message.complete", "approval.resolved", "run.finished"], kinds

    phone_frames = await phone.recv_until(lambda f: f["type"] == "run.completed")
    (lr,) = [f for f in phone_frames if f["type"] == "approval.resolved"]
    assert lr["payload"]["approval_id"] == request["approval_id"]
    assert (lr["payload"]["choice"], lr["payload"]["accepted"], lr["payload"]["decided_by"]) == ("deny", False, "agent")
    assert phone_frames[-1]["payload"]["status"] == "cancelled"

    events = await browser.events_until(cid, lambda e: e["type"] == "agent_end")
    (br,) = [e for e in events if e["type"] == "approval_resolved"]
    assert (br["approvalId"], br["choice"], br["accepted"], br["decidedBy"]) == (
        request["approval_id"], "deny", False, "cancelled")  # fmt: skip
    ends = [e["type"] for e in events if e["type"] in ("message_end", "approval_resolved", "agent_end")]
    assert ends[-3:] == ["message_end", "approval_resolved", "agent_end"], ends
    await browser.close()
    await pheby.close()
    await phone.close()
