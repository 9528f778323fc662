"""Provenance: the events a command causes carry the Origin it entered the core with, and
front ends learn whose request an event answers from it, never from the request id."""

from __future__ import annotations

import attrs

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.serialize import from_dict, to_dict
from tests.loomi.helpers import pair
from tests.pheby.client import PhebyClient

STAMPED = (ev.UserMessageSent, ev.RunStarted, ev.RunFinished, ev.ApprovalResolved, ev.ClarifyResolved)


def of(events, t, run_id):
    return [e for e in events if type(e) is t and getattr(e, "run_id", None) == run_id]


async def test_runs_carry_the_origin_of_the_command_that_caused_them(service_factory):
    svc = await service_factory(adapters=("pheby", "loomi"))
    seen: list = []
    svc.bridge.hub.subscribe(lambda _s, e: seen.append(e))
    phone, creds = await pair(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    cid = await pheby.create("provenance")

    # a Pheby request: its own request id comes back on run.accepted; the phone sees no surface
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/slow 30", "request_id": "p1"})
    accepted = await pheby.recv_type("run.accepted")
    assert accepted["request_id"] == "p1"
    run_id = accepted["run_id"]
    started = await phone.recv_type("run.started")
    assert started["run_id"] == run_id and started["payload"]["surface"] is None

    # cancelled from the phone: the run's end is the phone's doing, and Pheby is shown no foreign id
    ack = await phone.request("run.cancel", {"run_id": run_id, "request_id": "c1"})
    assert ack["type"] == "ack", ack
    finished = await pheby.recv_type("run.finished")
    assert finished["status"] == "cancelled" and "request_id" not in finished

    (user,) = of(seen, ev.UserMessageSent, run_id)
    (start,) = of(seen, ev.RunStarted, run_id)
    (end,) = of(seen, ev.RunFinished, run_id)
    assert user.origin == start.origin
    assert start.origin.surface == "pheby" and start.origin.connection is not None and start.request_id == "p1"
    assert end.origin == cmd.Origin(surface="loomi", connection=creds["device_id"], decided_by="remote")
    assert end.request_id == "c1"

    # a Loomi request: the phone's run.started says loomi; Pheby's run.accepted has no request id
    await phone.send("session.send", {"text": "hello", "task_id": cid, "request_id": "r1"})
    mine = await phone.recv_type("run.started")
    assert mine["payload"]["surface"] == "loomi"
    other = await pheby.recv_type("run.accepted")
    assert other["run_id"] == mine["run_id"] and "request_id" not in other
    await pheby.recv_type("run.finished")
    (start2,) = of(seen, ev.RunStarted, mine["run_id"])
    (end2,) = of(seen, ev.RunFinished, mine["run_id"])
    assert start2.origin.surface == end2.origin.surface == "loomi" and start2.request_id == "r1"

    # request ids travel as they came: nothing is namespaced into them any more
    rids = [e.request_id for e in seen if getattr(e, "request_id", None) is not None]
    assert rids and not any(r.startswith(("pheby:", "loomi:")) for r in rids)
    await phone.close()
    await pheby.close()


async def test_an_answer_carries_who_gave_it(service_factory):
    svc = await service_factory(adapters=("pheby",))
    seen: list = []
    svc.bridge.hub.subscribe(lambda _s, e: seen.append(e))
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    cid = await pheby.create("decide")
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls", "request_id": "p1"})
    request = await pheby.recv_type("approval.request")
    await pheby.send({"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once",
                      "request_id": "p2"})
    resolved = await pheby.recv_type("approval.resolved")
    assert resolved["request_id"] == "p2"
    (e,) = [x for x in seen if type(x) is ev.ApprovalResolved]
    assert e.origin.surface == "pheby" and e.surface == "pheby"
    await pheby.recv_type("run.finished")
    await pheby.close()


def test_origin_survives_the_events_json_form():
    o = cmd.Origin(surface="lvmh", connection="127.0.0.1")
    for e in (ev.RunStarted(conversation_id="c", run_id="r", message_id="m", origin=o),
              ev.UserMessageSent(conversation_id="c", message_id="u", text="hi", origin=o),
              ev.RunFinished(conversation_id="c", run_id="r", status="completed")):
        assert from_dict(to_dict(e)) == e
    assert to_dict(ev.RunStarted(conversation_id="c", run_id="r", message_id="m", origin=o))["origin"] == {
        "surface": "lvmh", "connection": "127.0.0.1", "decided_by": "remote"}
    assert all("origin" in attrs.fields_dict(t) for t in STAMPED)
