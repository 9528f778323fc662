"""A node that meets a run first at its end stores no second end of the run's message (issue 41, chaos
seed 2019 ``view_diverged``: browser-1 on n1 holds 151 events of a session, every node stores 152).

The run (``/approve cmd-pheby-1-52``, denied) ended on n1: its ``message_end`` under the completion's
seqs (event n, ``base + n * 256``), its ``agent_end``/``agent_settled`` under the run end's (event n + 1,
slots 254 and 255), shown to browser-1 once n1's rows committed. The shared store also held a second
``message_end`` of the same message, same text, at slot 0 of event n + 1: a node rendered the run's end
with the message still open, its run rebuilt from stored events (``book._rebuild``) that did not hold
the completion's rows yet (n1 was committing them). Below the ``agent_settled`` browser-1 had, no
``after=`` fetch ever returned it. The completion always comes before the run's end on the bus
(``Bridge.close_run``), so a run rebuilt at its end has its message closed: the rows of its end are
the same on every node.

Here b's front end never meets the run before its end (the stream lost them on their way to it, as in
test_lvmh_lost_deltas.py) and a's rows of the completion wait while b renders the end (a's batch held,
as a commit in flight): b reads the store without them.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from lvmh_adapter.persistence import EventLog
from tests.lvmh.helpers import Api, Browser
from tests.scale.test_cluster import _nodes
from tests.waiting import until


def _lose_run_until_its_end(svc, sid: str) -> None:
    """``svc``'s front end gets none of ``sid``'s run events but the run's end."""
    on_event = svc.frontends["lvmh"].book.on_event

    def lossy(n, e):
        if getattr(e, "conversation_id", None) == sid and getattr(e, "run_id", None) and type(e) is not ev.RunFinished:
            return
        on_event(n, e)

    subs = svc.bridge.hub._subs
    subs[subs.index(on_event)] = lossy


async def test_a_node_rebuilding_a_run_at_its_end_stores_no_second_message_end(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("lvmh",))
    api, browser = Api(a.ports["lvmh"]), await Browser(a.ports["lvmh"]).open()
    log_a, book_b = a.frontends["lvmh"].book.log, b.frontends["lvmh"].book
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="end rebuilt"), cmd.LOCAL)
        sid = conv.conversation_id
        await until(lambda: sid in b.bridge.conversations, what="the conversation on b")
        _lose_run_until_its_end(b, sid)
        await browser.subscribe(sid)
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "/approve cmd-pheby-1-52"})
        assert status == 200
        got = await browser.events_until(sid, lambda e: e["type"] == "approval_request", timeout=10)
        aid, run_id = got[-1]["approvalId"], got[-1]["runId"]
        await log_a.aflush()
        log_a.flush = lambda: None  # a's rows from here wait (a commit in flight)
        status, body = await api.post(f"/api/approvals/{aid}", {"choice": "deny"})
        assert status == 200, (status, body)
        await until(lambda: b.bridge.conversations[sid].run is None, timeout=10, what="the run's end on b")
        assert book_b.renderer.knows(sid, run_id)  # b rendered the end, the run rebuilt from the store
        await book_b.log.aflush()
        del log_a.flush
        EventLog.flush(log_a)  # a's rows commit; a shows them
        got += await browser.events_until(sid, lambda e: e["type"] == "agent_settled", timeout=10)
        await log_a.aflush()
        stored = await api.events(sid)
        shown = [e for e in got if e["type"] != "message_update"]
        seen = {e["seq"] for e in shown}
        only_stored = [(e["seq"], e["type"]) for e in stored if e["seq"] >= shown[0]["seq"] and e["seq"] not in seen]
        assert only_stored == [], (only_stored, [(e["seq"], e["type"]) for e in shown[-4:]])
        assert [e["seq"] for e in stored if e["seq"] >= shown[0]["seq"]] == [e["seq"] for e in shown]
        ends = [e for e in stored if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
        assert len(ends) == 1 and ends[0]["message"]["text"] == "Denied: cmd-pheby-1-52", ends
        assert [e["type"] for e in stored][-2:] == ["agent_end", "agent_settled"]
    finally:
        await browser.close()
        await api.close()
