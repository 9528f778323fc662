"""Every node closes alike what a restart cut short and the core no longer knows (chaos seed 2304
``view_diverged``: browser-1 on n1 holds 69 events of a session, every node stores 70, the one it lacks an
``approval_resolved`` at seq 537984769, slot 0 of the run's end).

The run (``/approve cmd-phone-1-21``, started on n2) asked an approval; n2 was killed 0.4 s later, before the
decision it had pending reached the store (its core's record of it, ``decisions.py``), with the run's start
(read back from the bus at its return: ``its start, lost with its node's previous life``). Back, n2's lvmh
front end restored the run from the stored events (``cutshort.restore_open_runs``: the approval open), its
core closed the run as interrupted (``report_interrupted``) without resolving the approval it had lost, and
n2's renderer resolved it itself (decidedBy ``restart``) in the run's end: slot 0 of the end's event, below
its ``agent_end``/``agent_settled`` (slots 254, 255). n1, which rendered the run from its start, had no
restored run: it rendered the end without it, and browser-1 on n1 got the end's rows live without it, then
asked ``after=`` the ``notification`` that followed: the row n2 alone rendered and stored was never shown.
Now every renderer holds what the run has open (tools, decisions) as it rendered or rebuilt it, and an
interrupted run's end closes it on every node.

Here b plays n2: its core loses the pending approval and its renderer restores the run from the store, as a
restart leaves them, then b closes the run as a restart does; the browser watches on a.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from tests.lvmh.helpers import Api, Browser
from tests.scale.test_cluster import _nodes
from tests.waiting import until


def _as_restarted(svc, sid: str, approval_id: str) -> None:
    """``svc`` as a restart leaves it: its core lost the pending ``approval_id``, its lvmh renderer restored
    ``sid``'s run from the stored events (``cutshort.restore_open_runs``)."""
    svc.bridge.conversations[sid].approvals.pop(approval_id)
    svc.bridge.decisions.approvals.pop(approval_id, None)
    book = svc.frontends["lvmh"].book
    run = book.log.open_run(sid)
    assert run.open and run.approvals == [approval_id], (run.run_id, run.approvals)
    book.renderer.restore(sid, run)


async def test_an_interrupted_run_s_lost_decision_is_resolved_alike_on_every_node(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("lvmh",))
    api_a, api_b = Api(a.ports["lvmh"]), Api(b.ports["lvmh"])
    browser = await Browser(a.ports["lvmh"]).open()
    book_a, book_b = a.frontends["lvmh"].book, b.frontends["lvmh"].book
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="decision lost"), cmd.LOCAL)
        sid = conv.conversation_id
        await until(lambda: sid in b.bridge.conversations, what="the conversation on b")
        await browser.subscribe(sid)
        status, _ = await api_b.post(f"/api/sessions/{sid}/prompt", {"message": "/approve cmd-phone-1-21"})
        assert status == 200
        got = await browser.events_until(sid, lambda e: e["type"] == "approval_request", timeout=10)
        aid, run_id = got[-1]["approvalId"], got[-1]["runId"]
        await book_b.log.aflush()
        await book_a.log.aflush()
        _as_restarted(b, sid, aid)
        b.bridge.interrupt(sid, run_id, "This run was interrupted by a restart of the bridge and did not finish.")
        got += await browser.events_until(sid, lambda e: e["type"] == "notification", timeout=10)
        await book_b.log.aflush()
        await book_a.log.aflush()
        stored = await api_a.events(sid)
        shown = [e for e in got if e["type"] != "message_update"]
        seen = {e["seq"] for e in shown}
        only_stored = [(e["seq"], e["type"]) for e in stored if e["seq"] not in seen]
        assert only_stored == [], (only_stored, [(e["seq"], e["type"]) for e in shown[-5:]])
        assert [e["seq"] for e in stored] == [e["seq"] for e in shown]
        resolved = [e for e in stored if e["type"] == "approval_resolved"]
        assert [(e["approvalId"], e["decidedBy"], e["accepted"]) for e in resolved] == [(aid, "restart", False)]
        assert [e["type"] for e in stored][-4:] == ["approval_resolved", "agent_end", "agent_settled", "notification"]
    finally:
        await browser.close()
        await api_a.close()
        await api_b.close()
