"""lvmh: a run closes what it opened, whatever ends it (completed, cancelled, failed).

The session's events, as the web UI reads them, never leave a message open, a decision
pending or the session running once the run has ended.
"""

from __future__ import annotations

from tests.conformance.conftest import LVMH_TOKEN, PHEBY_SECRET
from tests.conformance.lvmh_client import Rest, SessionView, create_conversation, eventually


def view_of(events: list) -> SessionView:
    v = SessionView()
    for e in events:
        v.add(e)
    return v


async def _run(server, prompt: str, *, abort_when=None) -> list:
    sid = await create_conversation(server.url("pheby", "/ws", scheme="ws"), PHEBY_SECRET, "run end")
    rest = Rest(server.url("lvmh"), LVMH_TOKEN)
    try:
        got, body = await rest.prompt(sid, prompt)
        assert got == 200, body
        if abort_when is not None:
            async def ready():
                return abort_when(await rest.events(sid))

            await eventually(ready, what="the moment to abort")
            got, body = await rest.abort(sid)
            assert got == 200, body
        return await rest.settled(sid)
    finally:
        await rest.close()


def _ended(events: list, status: str) -> None:
    v = view_of(events)
    assert not v.running() and v.open_messages() == [], v.types()
    ends = [e for e in events if e["type"] == "agent_end"]
    assert len(ends) == 1 and ends[0].get("status", status) == status
    assert v.types()[-1] == "agent_settled"


async def test_a_completed_run(server):
    events = await _run(server, "hello there")
    _ended(events, "completed")
    assert view_of(events).texts() == ["Echo: hello there"]


async def test_a_cancelled_run_completes_its_message(server):
    events = await _run(server, "/slow 30", abort_when=lambda evs: any(e["type"] == "message_start" and
                                                                        e["message"]["role"] == "assistant"
                                                                        for e in evs))
    _ended(events, "cancelled")
    settled = [e for e in events if e["type"] == "agent_settled"]
    assert settled[0].get("aborted") is True


async def test_a_failed_run(server):
    events = await _run(server, "/fail")
    _ended(events, "failed")


async def test_a_cancelled_run_resolves_its_pending_approval(server):
    events = await _run(server, "/approve make deploy",
                        abort_when=lambda evs: any(e["type"] == "approval_request" for e in evs))
    _ended(events, "cancelled")
    assert view_of(events).pending_decisions() == []
    resolved = [e for e in events if e["type"] == "approval_resolved"]
    assert len(resolved) == 1 and resolved[0]["choice"] == "deny" and resolved[0]["accepted"] is False


async def test_a_cancelled_run_resolves_its_pending_clarification(server):
    events = await _run(server, "/clarify ship it?",
                        abort_when=lambda evs: any(e["type"] == "clarify_request" for e in evs))
    _ended(events, "cancelled")
    assert view_of(events).pending_decisions() == []
    resolved = [e for e in events if e["type"] == "clarify_resolved"]
    assert len(resolved) == 1 and resolved[0]["accepted"] is False
