"""A node whose delivery of a run's completion failed stores no second end of the run's message at the
run's end (issue 41, chaos seed 2018 ``view_diverged``: browser-1 on n1 holds 108 events of a session,
every node stores 109, the one it lacks a ``message_end`` at seq 537863425).

The run (``phone-1 says m25``, sent on n2) ended at once: its ``message_end`` under the completion's
seqs (event n, ``base + n * 256``), its ``agent_end``/``agent_settled`` under the run end's (event n + 1,
slots 254 and 255), shown to browser-1 on n1. n3, back from a ``kill -9`` 0.1 s before, as PostgreSQL
restarted, failed to deliver the completion (its fold read the transcript from the store, unreachable:
``bus: delivering event 2101028 failed``), so its renderer still held the message open at the run's end
and closed it there: a second ``message_end`` of the same message at slot 0 of event n + 1, stored by
n3 alone, below the ``agent_settled`` browser-1 had, which no ``after=`` fetch returns. The completion
always comes before a run's end on the bus (``Bridge.close_run``), so with several nodes a run's end
closes no message: its rows are the same on every node, whatever that node missed before.

Here b's delivery of the completion fails in its fold, as n3's did. n3's ``Unavailable`` now makes the
delivery wait for the store (bridge_core/scale/foldwait.py; tests/scale/test_fold_waits_for_store.py), so the
fold here raises another error: an event lost otherwise (a fold failing for another reason, events gone for
good from the stream) still leaves no second end.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.serialize import from_dict
from tests.lvmh.helpers import Api, Browser
from tests.scale.test_cluster import _nodes
from tests.waiting import until


def _fail_completion(svc, sid: str) -> list:
    """``svc``'s delivery of ``sid``'s message completion fails, as a fold reading an unreachable store."""
    cluster, failed = svc.bridge.cluster, []
    fold = cluster._fold

    def failing(node, data):
        e = from_dict(data)
        if type(e) is ev.MessageCompleted and e.conversation_id == sid:
            failed.append(e.message_id)
            raise RuntimeError("a fold failing otherwise than on the store")  # (Unavailable waits: foldwait.py)
        return fold(node, data)

    cluster._fold = failing
    return failed


async def test_a_node_that_missed_a_completion_stores_no_second_message_end(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("lvmh",))
    api, browser = Api(a.ports["lvmh"]), await Browser(a.ports["lvmh"]).open()
    book_a, book_b = a.frontends["lvmh"].book, b.frontends["lvmh"].book
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="completion lost"), cmd.LOCAL)
        sid = conv.conversation_id
        await until(lambda: sid in b.bridge.conversations, what="the conversation on b")
        failed = _fail_completion(b, sid)
        await browser.subscribe(sid)
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "phone-1 says m25"})
        assert status == 200
        got = await browser.events_until(sid, lambda e: e["type"] == "agent_settled", timeout=10)
        await until(lambda: failed and b.bridge.conversations[sid].run is None, timeout=10, what="the run's end on b")
        run_id = next(e["runId"] for e in got if e["type"] == "agent_start")
        assert book_b.renderer.knows(sid, run_id)  # b rendered the run from its start, its completion missed
        await book_b.log.aflush()
        await book_a.log.aflush()
        stored = await api.events(sid)
        shown = [e for e in got if e["type"] != "message_update"]
        seen = {e["seq"] for e in shown}
        only_stored = [(e["seq"], e["type"]) for e in stored if e["seq"] not in seen]
        assert only_stored == [], (only_stored, [(e["seq"], e["type"]) for e in shown[-4:]])
        assert [e["seq"] for e in stored] == [e["seq"] for e in shown]
        ends = [e for e in stored if e["type"] == "message_end" and e["message"]["role"] == "assistant"]
        assert len(ends) == 1 and ends[0]["message"]["text"] == "Echo: phone-1 says m25", ends
        assert [e["type"] for e in stored][-2:] == ["agent_end", "agent_settled"]
    finally:
        await browser.close()
        await api.close()
