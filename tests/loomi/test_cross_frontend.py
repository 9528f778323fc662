"""One bridge, two front ends: a Pheby client's run on a paired Loomi device, and back."""

from __future__ import annotations

from tests.pheby.client import PhebyClient

from .helpers import pair


async def test_a_pheby_run_streams_to_loomi_and_the_device_answers_its_approval(service_factory):
    svc = await service_factory(adapters=("pheby", "loomi"))
    phone, _ = await pair(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    cid = await pheby.create("From Pheby")
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve make deploy", "request_id": "p1"})
    accepted = await pheby.recv_type("run.accepted")
    run_id = accepted["run_id"]
    assert accepted["request_id"] == "p1"

    # the device sees the run, started elsewhere, and the approval
    started = await phone.recv_type("run.started")
    assert started["task_id"] == cid and started["run_id"] == run_id
    assert started["payload"]["surface"] is None and started["payload"]["title"] == "From Pheby"
    required = await phone.recv_type("approval.required")
    request = await pheby.recv_type("approval.request")
    assert required["payload"]["approval_id"] == request["approval_id"]
    assert required["payload"]["command"] == request["command"] == "make deploy"

    # answered on the phone: resolved for the Pheby client too, first answer wins
    ack = await phone.request("approval.resolve", {"approval_id": request["approval_id"], "choice": "once",
                                                   "request_id": "l1"})
    assert ack["type"] == "ack"
    resolved = await pheby.recv_type("approval.resolved")
    assert resolved["approval_id"] == request["approval_id"] and resolved["choice"] == "once"
    assert resolved["accepted"] is True and resolved["decided_by"] == "remote" and resolved["surface"] == "loomi"
    late = await pheby.request({"type": "approval.respond", "approval_id": request["approval_id"], "choice": "deny",
                                "request_id": "p2"}, "approval.resolved")
    # Pheby's code list has no already_resolved: its adapter says approval_not_found
    assert late["type"] == "error" and late["error"]["code"] == "approval_not_found"
    assert late["error"]["message"] == "Approval already resolved"

    # the run goes on and both see it end the same way
    pheby_frames = await pheby.collect_until("run.finished", run_id=run_id)
    phone_frames = await phone.recv_until(lambda f: f["type"] == "run.completed")
    assert [f["text"] for f in pheby_frames if f["type"] == "message.complete"] == ["Ran: make deploy"]
    assert phone_frames[-1]["payload"]["text"] == "Ran: make deploy"
    deltas = [f["payload"]["text"] for f in phone_frames if f["type"] == "run.delta"]
    assert "".join(deltas) == "Ran: make deploy"
    tools = [f["type"] for f in phone_frames if f["type"].startswith("run.tool_")]
    assert tools == ["run.tool_started", "run.tool_finished"]
    assert phone.frames[0]["seq"] == 0 and [f["seq"] for f in phone.frames] == sorted({f["seq"] for f in phone.frames})
    await pheby.close()
    await phone.close()


async def test_a_loomi_message_streams_to_pheby(service_factory):
    svc = await service_factory(adapters=("pheby", "loomi"))
    phone, _ = await pair(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    ack = await phone.request("session.send", {"text": "from the phone", "request_id": "r1"})
    run_id = ack["payload"]["result"]["run_id"]
    frames = await pheby.collect_until("run.finished", run_id=run_id)
    assert [f["text"] for f in frames if f["type"] == "message.complete"] == ["Echo: from the phone"]
    started = await phone.recv_type("run.started")
    assert started["payload"]["surface"] == "loomi"
    await pheby.close()
    await phone.close()


async def test_another_front_ends_request_id_never_reaches_pheby(service_factory):
    svc = await service_factory(adapters=("pheby", "loomi"))
    phone, _ = await pair(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    ack = await phone.request("session.send", {"text": "hi", "request_id": "loomi-r1"})
    result = ack["payload"]["result"]
    accepted = await pheby.recv_type("run.accepted")
    assert accepted == {"type": "run.accepted", "conversation_id": result["task_id"], "run_id": result["run_id"]}
    frames = await pheby.collect_until("run.finished", run_id=result["run_id"])
    assert frames[-1] == {"type": "run.finished", "conversation_id": result["task_id"],
                          "run_id": result["run_id"], "status": "completed"}
    await pheby.close()
    await phone.close()
