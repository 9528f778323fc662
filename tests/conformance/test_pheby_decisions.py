"""Pheby: approvals and clarifications always end, on every client, and leave the snapshot.

"The single resolution event is broadcast to every connected client"; a run
that ends (cancelled, failed, a restart) or an approval that times out resolves
what is still pending with a choice from the spec's set (``deny``),
``accepted: false`` and ``decided_by`` saying why.
"""

from __future__ import annotations

from tests.conformance.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp, count

CHOICES = ["once", "session", "always", "deny"]


async def two_apps(server) -> tuple[PhebyApp, PhebyApp]:
    a = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    b = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    await a.connect()
    await b.connect()
    return a, b


async def test_approval_answered_once_is_one_frame_for_every_client(server):
    a, b = await two_apps(server)
    try:
        cid = await a.create("Ask")
        run_id = (await a.chat(cid, "/approve ls -la"))["run_id"]
        req = await b.wait_frame(lambda f: f["type"] == "approval.request")
        assert req["conversation_id"] == cid and req["run_id"] == run_id and req["choices"] == CHOICES
        assert req["command"] == "ls -la" and isinstance(req["session_key"], str) and req["description"]
        reply = await a.request("approval.respond", approval_id=req["approval_id"], choice="once")
        assert reply["type"] == "approval.resolved", reply
        assert (reply["approval_id"], reply["choice"], reply["accepted"]) == (req["approval_id"], "once", True)
        for app in (a, b):
            await app.wait_until(lambda app=app: run_id in app.view(cid).finished)
            assert count(app.frames, type="approval.resolved") == 1  # a single resolution event
            assert app.view(cid).approvals == {} and app.violations == []
        resolved_b = next(f for f in b.frames if f["type"] == "approval.resolved")
        assert resolved_b["request_id"] == reply["request_id"]  # the responder's id is on the broadcast
        stale = await b.request("approval.respond", approval_id=req["approval_id"], choice="deny")
        assert stale["type"] == "error" and stale["error"]["code"] == "approval_not_found"
    finally:
        await a.close()
        await b.close()


async def cancel_with_pending(server, command: str, kind: str) -> None:
    a, b = await two_apps(server)
    try:
        cid = await a.create("Pending")
        run_id = (await a.chat(cid, command))["run_id"]
        request = await b.wait_frame(lambda f: f["type"] == f"{kind}.request")
        key = "approval_id" if kind == "approval" else "clarify_id"
        reply = await b.request("run.cancel", conversation_id=cid, run_id=run_id)
        assert reply["type"] == "run.finished" and reply["status"] == "cancelled", reply
        for app in (a, b):
            await app.wait_until(lambda app=app: run_id in app.view(cid).finished)
            resolved = [f for f in app.frames if f["type"] == f"{kind}.resolved"]
            assert len(resolved) == 1, resolved  # every client, once
            r = resolved[0]
            assert r[key] == request[key] and r["accepted"] is False and r["decided_by"] == "cancelled", r
            if kind == "approval":
                assert r["choice"] == "deny"  # the spec's set, never an invented choice
            # the resolution came before the run's end, and the started message was completed before it
            order = [f["type"] for f in app.frames if f.get("type") in (
                f"{kind}.resolved", "message.complete", "run.finished")]  # fmt: skip
            assert order[-1] == "run.finished" and "message.complete" in order, order
            assert count(app.frames, type="run.finished", run_id=run_id) == 1  # exactly one cancelled event
            assert app.view(cid).open_bubbles() == [] and app.violations == []
        hist = await a.open(cid)
        assert hist["run"] is None and hist["approvals"] == [] and hist["clarifications"] == []
        late = await a.request(f"{kind}.respond", **{key: request[key]},
                               **({"choice": "once"} if kind == "approval" else {"response": "yes"}))
        assert late["type"] == "error" and late["error"]["code"] == f"{kind if kind == 'approval' else 'clarify'}_not_found"
    finally:
        await a.close()
        await b.close()


async def test_cancel_with_pending_approval_resolves_it_everywhere(server):
    await cancel_with_pending(server, "/approve rm -rf /tmp/build-output", "approval")


async def test_cancel_with_pending_clarification_resolves_it_everywhere(server):
    await cancel_with_pending(server, "/clarify Deploy to staging or production?", "clarify")


async def test_delete_with_pending_approval_resolves_it(server):
    a, b = await two_apps(server)
    try:
        cid = await a.create("Doomed")
        await a.chat(cid, "/approve shutdown")
        req = await b.wait_frame(lambda f: f["type"] == "approval.request")
        reply = await a.request("conversation.delete", conversation_id=cid)
        assert reply["type"] == "conversation.deleted"
        r = await b.wait_frame(lambda f: f["type"] == "approval.resolved")
        assert r["approval_id"] == req["approval_id"] and r["choice"] == "deny" and r["accepted"] is False
        await b.wait_frame(lambda f: f["type"] == "conversation.deleted")
        assert b.view(cid).approvals == {} and b.violations == []
    finally:
        await a.close()
        await b.close()


async def test_approval_timeout_resolves_deny_with_timeout(server_factory):
    server = server_factory(config="[demo]\napproval_timeout = 1\n")
    a, b = await two_apps(server)
    try:
        cid = await a.create("Nobody answers")
        run_id = (await a.chat(cid, "/approve rm -rf /"))["run_id"]
        req = await b.wait_frame(lambda f: f["type"] == "approval.request")
        for app in (a, b):
            r = await app.wait_frame(lambda f: f["type"] == "approval.resolved", timeout=15)
            assert (r["approval_id"], r["choice"], r["accepted"], r["decided_by"]) == (
                req["approval_id"], "deny", False, "timeout")  # fmt: skip
            await app.wait_until(lambda app=app: run_id in app.view(cid).finished)
            assert app.view(cid).approvals == {} and app.violations == []
            assert count(app.frames, type="approval.resolved") == 1
        hist = await b.open(cid)
        assert hist["approvals"] == [] and hist["run"] is None
        assert "did not run" in hist["messages"][-1]["text"]  # the agent was told no
    finally:
        await a.close()
        await b.close()


async def test_failed_run_completes_its_message_before_run_finished(server):
    a, b = await two_apps(server)
    try:
        cid = await a.create("Fail")
        run_id = (await a.chat(cid, "/fail"))["run_id"]
        for app in (a, b):
            await app.wait_until(lambda app=app: run_id in app.view(cid).finished)
            fin = app.view(cid).finished[run_id]
            assert fin["status"] == "failed" and fin["error"] == "demo failure"
            seq = [f["type"] for f in app.frames if f.get("conversation_id") == cid and f["type"].startswith(("run.", "message."))]
            assert seq == ["run.accepted", "message.start", "message.complete", "run.finished"], seq
            assert app.view(cid).open_bubbles() == [] and app.violations == []
        hist = await a.open(cid)
        assert hist["run"] is None
    finally:
        await a.close()
        await b.close()
