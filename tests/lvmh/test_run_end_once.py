"""A run's end is rendered into lvmh's stored events once per run, whichever way(s) it arrives, under the same
seqs on every node (issue 41: "agent_end once but agent_settled twice" in a restarted node's stored events;
lvmh_adapter/render.py ``_run_finished``, registry.py ``END_SLOTS``).

Every node stores the lvmh events it renders of a bridge conversation (``INSERT OR IGNORE`` by seq). A node
restarted right after a kill -9 meets its run's end more than once (the end its previous life published, read
back or delivered again, and the restart's close) and closes first what its restored run showed open (a
decision the store lacked, the open message). Before: a second ``agent_end``/``agent_settled`` for the second
arrival, and the run's end one seq further on that node than on the others, so the store kept both nodes'
``agent_settled``.
"""

from __future__ import annotations

from types import SimpleNamespace

from bridge_core.model import events as ev
from lvmh_adapter.book import SessionBook
from lvmh_adapter.render import OpenRun, Renderer

CID = "c-end-once"


def _finished(status: str = "completed", error=None) -> ev.RunFinished:
    return ev.RunFinished(conversation_id=CID, run_id="r1", status=status, error=error)


def _started() -> ev.RunStarted:
    return ev.RunStarted(conversation_id=CID, run_id="r1", message_id="draft-r1")


def test_the_same_runs_end_twice_renders_it_once():
    """The end its previous life published (read back), then the restart's interrupted close of the same run."""
    r = Renderer(lambda cid: {"id": cid})
    r.render(_started())
    first = [t for t, _ in r.render(_finished())]
    assert first == ["message_end", "agent_end", "agent_settled"]
    assert r.render(_finished("failed", ev.RUN_INTERRUPTED)) == []
    r.render(ev.RunStarted(conversation_id=CID, run_id="r2", message_id="draft-r2"))  # the next run's end renders
    assert [t for t, _ in r.render(ev.RunFinished(conversation_id=CID, run_id="r2", status="completed"))] == [
        "message_end", "agent_end", "agent_settled"]


def test_a_restored_run_ends_once_after_its_restart_close():
    """A restart restores the run the store left open; its end closes it, a second end renders nothing."""
    run = OpenRun()
    run.feed("agent_start", {"runId": "r1"})
    run.feed("approval_request", {"approvalId": "a1"})
    r = Renderer(lambda cid: {"id": cid})
    r.restore(CID, run)
    assert [t for t, _ in r.render(_finished("failed", ev.RUN_INTERRUPTED))] == [
        "approval_resolved", "agent_end", "agent_settled"]
    assert r.render(_finished()) == []


def test_an_end_the_store_holds_renders_nothing_on_a_renderer_that_never_saw_the_run():
    ended = Renderer(lambda cid: {"id": cid})
    ended.rebuild(CID, "r1", None, ended=True)
    assert ended.render(_finished()) == []
    unknown = Renderer(lambda cid: {"id": cid})  # the store shows neither the run open nor its end: as before
    unknown.rebuild(CID, "r1", None)
    assert [t for t, _ in unknown.render(_finished())] == ["agent_end", "agent_settled"]


class _SharedLog:
    """The shared store of lvmh events, as ``persistence.EventLog`` keeps it: one row per (session, seq)."""

    def __init__(self, rows: dict):
        self.rows = rows
        self.committed: dict = {}

    def append(self, sid, seq, ts, etype, raw, charged=0):
        self.rows.setdefault((sid, seq), (etype, raw))  # INSERT OR IGNORE

    def upsert_session(self, *args, **kw):
        pass

    def reserve(self, *args):
        pass

    def open_run(self, sid):
        import orjson

        run = OpenRun()
        for (s, _), (etype, raw) in sorted(self.rows.items()):
            if s == sid:
                run.feed(etype, orjson.loads(raw))
        return run

    def run_ended(self, sid, run_id):
        return any(s == sid and t == "agent_end" and f'"runId":"{run_id}"' in raw
                   for (s, _), (t, raw) in self.rows.items())


def _node(rows: dict) -> SessionBook:
    bridge = SimpleNamespace(conversations={CID: SimpleNamespace(source="demo", name="n", created_at=0.0)},
                             source_for=lambda conv: None)
    book = SessionBook(bridge, _SharedLog(rows))
    book.browsers = SimpleNamespace(subs={}, last={}, push=lambda *a: None, entry_changed=lambda *a: None)
    book.link = SimpleNamespace(shared=True, writes=lambda: True)
    book.seq_base = 1000
    book._models[CID] = (None, None)
    return book


def _stored(rows: dict) -> list:
    return [t for (_, _), (t, _) in sorted(rows.items())]


def test_two_nodes_closing_different_things_first_store_the_runs_end_once():
    """n2 saw the run (the message completed: nothing open at the end); n1, restarted, restored the run from a
    store that still showed its message open, so it renders a ``message_end`` before the same end (event 7)."""
    rows: dict = {}
    n2 = _node(rows)
    n2.on_event(3, _started())
    n1 = _node(rows)
    n1.on_event(3, _started())  # (both stored the start: the same rows)
    n2.on_event(5, ev.MessageCompleted(conversation_id=CID, run_id="r1", message_id="draft-r1", text="done"))
    n2.on_event(7, _finished())
    n1.renderer.forget(CID)  # n1 restarted: it rebuilt the run from the store as it was before event 5
    n1.renderer.rebuild(CID, "r1", _open_message())
    n1.on_event(7, _finished())
    types = _stored(rows)
    assert types.count("agent_end") == types.count("agent_settled") == 1, types
    assert types[-2:] == ["agent_end", "agent_settled"], types


def test_a_restored_run_closing_its_open_tool_stores_the_restart_close_once():
    """The scale test's failure: n1 restored its run from the store (a tool started, not ended), n2 renders the
    restart's close (event 8) with nothing open; n1 closes the tool first. Before: the store kept n2's
    ``agent_end``/``agent_settled`` at +0/+1 and n1's ``agent_settled`` at +2."""
    rows: dict = {}
    n2 = _node(rows)
    n2.on_event(3, _started())
    n2.on_event(6, ev.ToolStarted(conversation_id=CID, run_id="r1", call_id="t1", tool_name="terminal", args={}))
    n2.on_event(7, ev.MessageCompleted(conversation_id=CID, run_id="r1", message_id="draft-r1", text=""))
    run = OpenRun()
    for etype, obj in [("agent_start", {"runId": "r1"}), ("tool_execution_start", {"toolCallId": "t1"})]:
        run.feed(etype, obj)
    n1 = _node(rows)
    n1.renderer.restore(CID, run)  # cutshort.restore_open_runs
    close = _finished("failed", ev.RUN_INTERRUPTED)
    n2.on_event(8, close)
    n1.on_event(8, close)
    types = _stored(rows)
    assert types.count("agent_end") == types.count("agent_settled") == 1, types
    assert types[-2:] == ["agent_end", "agent_settled"], types


def test_a_restarted_node_meeting_its_runs_end_twice_stores_it_once():
    """n1's restart: the end its previous life published (event 7, delivered again), then its own close of the
    run (event 9): one ``agent_end``, one ``agent_settled``; a node that never saw the run, whose store holds
    the end, renders nothing for either."""
    rows: dict = {}
    n1 = _node(rows)
    n1.on_event(3, _started())
    n1.on_event(7, _finished())
    n1.on_event(9, _finished("failed", ev.RUN_INTERRUPTED))
    fresh = _node(rows)
    fresh.on_event(9, _finished("failed", ev.RUN_INTERRUPTED))
    types = _stored(rows)
    assert types.count("agent_end") == types.count("agent_settled") == 1, types


def _open_message() -> OpenRun:
    run = OpenRun()
    run.feed("agent_start", {"runId": "r1"})
    run.feed("message_start", {"message": {"role": "assistant", "id": "draft-r1"}})
    return run
