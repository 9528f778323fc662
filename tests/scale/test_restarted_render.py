"""A node killed (-9) mid-run and restarted at once renders the run's end as the node whose browser
watched it (issue 41, chaos seed 2000 ``view_diverged``; docs/scale-out.md "Durable before shown").

Every node stores a bridge conversation's lvmh events under the same seqs (``INSERT OR IGNORE``), so
their renderings must agree. The restarted origin closes its run as interrupted; its renderer must
hold the run and its open message as the stored events leave them (lvmh_adapter/book.py ``_rebuild``),
or it renders the completed message as one outside any run and the store gets, one seq past the
``message_end`` every browser saw, a second ``message_end`` of the same message no browser saw."""

from __future__ import annotations

import pytest

from tests.conformance.lvmh_client import Browser, Rest
from tests.hardening.proc import LVMH_TOKEN, BridgeProcess
from tests.waiting import until


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="lvmh")


def _http(proc: BridgeProcess) -> str:
    return f"http://127.0.0.1:{proc.ports['lvmh']}"


async def test_a_restarted_origin_stores_the_run_end_the_watching_browser_saw(nodes):
    n1, n2 = nodes("n1", "n2")
    rest1, rest2 = Rest(_http(n1), LVMH_TOKEN), Rest(_http(n2), LVMH_TOKEN)
    browser = Browser(_http(n2), LVMH_TOKEN)
    try:
        status, created = await rest1.call("POST", "/api/conversations", {"name": "Cut short"})
        assert status in (200, 201), (status, created)
        sid = created["id"]
        await browser.connect()
        await until(lambda: browser.listed(sid), what="the session listed on n2")
        await browser.subscribe(sid)
        status, _ = await rest1.prompt(sid, "/bench 20000 2000")  # a long run on n1 (10 s)
        assert status in (200, 202), status
        await until(lambda: sum(e["type"] == "message_update" for e in browser.view(sid).events) >= 400, timeout=15,
                    what="the run streaming in the browser on n2")
        n1.kill9()
        n1.start()  # under its own name, at once: it closes its run as interrupted
        await until(lambda: "notification" in browser.view(sid).types(), timeout=30,
                    what="the interrupted run closed in the browser on n2")
        stored = await rest2.events(sid)
        assistant = [(e["type"], e["message"]["id"]) for e in stored
                     if e["type"] in ("message_start", "message_end") and e["message"]["role"] == "assistant"]
        assert len(assistant) == 2 and assistant[0][0] == "message_start" and assistant[1][0] == "message_end" \
            and assistant[0][1] == assistant[1][1], assistant
        assert browser.view(sid).persisted() == stored and browser.twice == []
    finally:
        await browser.close()
        await rest1.close()
        await rest2.close()


async def test_a_run_completion_delivered_again_after_its_end_renders_nothing(service_factory, engines, tmp_path):
    """A run's completed message delivered a second time once the run ended here (a Redis restart right
    after it was published, as chaos seed 2000 had) renders nothing: before, it was rendered as a message
    outside any run, and the store got a second ``message_end`` of the message one seq past the one every
    browser was shown (lvmh_adapter/render.py ``_completed``)."""
    from bridge_core.model import commands as cmd
    from bridge_core.model import events as ev
    from tests.lvmh.helpers import Api
    from tests.scale.test_cluster import _nodes

    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=("lvmh",))
    delivered: list = []
    a.bridge.hub.subscribe(lambda n, e: delivered.append((n, e)))
    api = Api(a.ports["lvmh"])
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="delivered twice"), cmd.LOCAL)
        sid = conv.conversation_id
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "hello"})
        assert status == 200
        before = await api.wait_events(sid, lambda e: bool(e) and e[-1]["type"] == "agent_settled")
        for n, e in [(n, e) for n, e in delivered if getattr(e, "conversation_id", None) == sid]:
            if type(e) is ev.MessageCompleted:
                a.bridge.cluster.delivering_own = True  # this node's own event (its origin stores it)
                try:
                    a.bridge.fan_out(e, n)  # the same number again
                finally:
                    a.bridge.cluster.delivering_own = False
        await a.frontends["lvmh"].book.log.aflush()
        assert await api.events(sid) == before
    finally:
        await api.close()


async def test_a_node_that_missed_a_run_start_renders_the_run_from_the_store(service_factory, engines, tmp_path):
    """A node whose renderer never got a run's start (chaos seed 2003: paused, then Redis restarted and the
    stream lost the start) rendered the run's next delta as a new message ``assistant`` (no draft id) and
    its completion as a message outside any run: a browser got the message's end without any of its
    deltas (``deltas_incomplete``). It now rebuilds the run and its open message from the stored events."""
    from bridge_core.model import commands as cmd
    from tests.lvmh.helpers import Api
    from tests.scale.test_cluster import _nodes

    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=("lvmh",))
    api = Api(a.ports["lvmh"])
    try:
        conv = await a.bridge.execute(cmd.CreateConversation(name="start missed"), cmd.LOCAL)
        sid = conv.conversation_id
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "/approve make all"})
        assert status == 200
        evs = await api.wait_events(sid, lambda e: any(x["type"] == "approval_request" for x in e))
        draft = next(e["message"]["id"] for e in evs if e["type"] == "message_start" and e["message"]["role"] == "assistant")
        aid = next(e["approvalId"] for e in evs if e["type"] == "approval_request")
        a.frontends["lvmh"].book.renderer.forget(sid)  # the run's start never reached this renderer
        status, _ = await api.post(f"/api/approvals/{aid}", {"choice": "once"})
        assert status == 200
        evs = await api.wait_events(sid, lambda e: bool(e) and e[-1]["type"] == "agent_settled")
        await a.frontends["lvmh"].book.log.aflush()
        evs = await api.events(sid)
        assistant = [(e["type"], e["message"]["id"]) for e in evs
                     if e["type"] in ("message_start", "message_end") and e["message"]["role"] == "assistant"]
        assert assistant == [("message_start", draft), ("message_end", draft)], assistant
    finally:
        await api.close()
