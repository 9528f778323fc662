"""A conversation with a run active when a node reads back from the store after a gap is read back too, less
that run's unfinished message (bridge_core/bridge/transcripts.py ``refresh``, gone.py ``_refresh``; chaos seed
2024, ``nodes_disagree``; docs/scale-out.md "Catching up").

Node ``b`` is behind (its reads held) while, on node ``a``, an approval ``b`` saw asked is denied: its run ends with
its completion "Denied: make deploy". ``a`` keeps its last 2 entries only and Redis loses its keys: ``b`` gets the
end back from nobody, gone for good. The message after the gap starts a second run in that conversation, which
waits for its own approval, so it is active at both of ``b``'s read-back passes (the second brought forward).
Before, the read-back skipped a conversation with a run active: ``b`` settled the first approval (its run ended in
the store) but its transcript lacked the first run's completion for good, where ``a``'s had it. Two in-process
nodes on a private PostgreSQL and Redis, the spec-built phones over real sockets."""

from __future__ import annotations

from bridge_core.bridge.sqlite import Store
from bridge_core.bridge.transcripts import Transcripts
from bridge_core.model import events as ev
from bridge_core.model.state import ConversationState
from bridge_core.scale import catchup, gone
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.test_bus_catchup import Gate
from tests.scale.test_cluster import _nodes
from tests.scale.test_gone_truncated import _qr
from tests.waiting import until


def _ids(node, cid: str) -> list:
    return [m.message_id for m in node.bridge.conversations[cid].messages]


async def test_a_conversation_with_a_run_active_is_read_back_less_its_draft(service_factory, engines, tmp_path,
                                                                              redis_server, monkeypatch):  # fmt: skip
    monkeypatch.setattr(gone, "AGAIN", 1.0)  # b's second and last pass soon, the second run still active
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        await phone.pair(await _qr(b))
        await other.pair(await _qr(a))
        ack = await other.request("session.send", {"text": "/approve make deploy"})  # a run on node a
        cid, first = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
        required = await phone.wait_for("approval.required", run_id=first)  # b delivered the request
        aid = required["payload"]["approval_id"]

        a.bridge.cluster.bus._written = catchup.Written(keep=2)  # a keeps its last 2 entries only
        gate = Gate(b.bridge.cluster.bus)
        gate.close()  # b stops reading (a stopped or behind node)
        await until(lambda: gate.parked.is_set(), what="b's reads held")
        denied = await other.request("approval.resolve", {"approval_id": aid, "choice": "deny"})
        assert denied["type"] == "ack" and denied["payload"]["ok"] is True, denied
        await other.wait_for("run.completed", run_id=first)
        ack = await other.request("session.send", {"text": "/bench 30 200"})  # more than a keeps, elsewhere
        await other.wait_for("run.completed", run_id=ack["payload"]["result"]["run_id"])
        completion = next(m for m in a.bridge.conversations[cid].messages if m.text == "Denied: make deploy")
        redis_server.flush()  # Redis loses what b had not read
        gate.open.set()
        ack = await other.request("session.send", {"text": "/approve make release", "task_id": cid})  # b's gap
        second = ack["payload"]["result"]["run_id"]
        await other.wait_for("approval.required", run_id=second)
        await until(lambda: b.bridge.cluster.bus.gone > 0, timeout=20, what="events gone found on b")
        await until(lambda: b.bridge.cluster.gaps.refreshes == 2, what="b's two read-back passes")

        conv = b.bridge.conversations[cid]
        assert (conv.run.run_id, b.bridge.decisions.pending(aid)) == (second, None)  # active; the first settled
        # the first run's completion read back, in its place; the active run's message not (its draft streams)
        assert completion.message_id in _ids(b, cid), _ids(b, cid)
        assert conv.run.message_id not in _ids(b, cid)
        assert _ids(b, cid) == _ids(a, cid)
        assert [m.text for m in conv.messages] == [m.text for m in a.bridge.conversations[cid].messages]
    finally:
        await close_all()


T = 1_796_560_000.0


def _row(store, sql: str, *args) -> None:
    store.write_later(lambda c: c.execute(sql, args))
    store.flush()


def test_a_refresh_reads_back_before_an_active_run_less_its_draft(tmp_path):
    """The rule on the core's store (SQLite) alone: the active run's unfinished message (its draft row, drafts.py)
    stays out, even once the store shows the run ended before this node folds its end; what came before it is
    added in its place; once a user's message came after it, the run's row is kept, as ``load`` keeps it."""
    store = Store(str(tmp_path / "core.db")).open()
    try:
        msg = "INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1',?,?,?,?)"
        _row(store, "INSERT INTO conversations(id, name, source, created_at, updated_at) VALUES('c1','t','demo',?,?)",
             T, T)  # fmt: skip
        keeper = Transcripts(store)
        conv = ConversationState(conversation_id="c1", name="t", keeper=keeper)
        keeper.new(conv)
        for e in (ev.UserMessageSent(conversation_id="c1", message_id="u-1", text="/approve x", ts=T),
                  ev.UserMessageSent(conversation_id="c1", message_id="u-2", text="/approve y", ts=T + 1),
                  ev.RunStarted(conversation_id="c1", run_id="r2", message_id="draft-r2", ts=T + 1)):  # fmt: skip
            conv.apply(e)  # what this node folded: r1's completion and end lost to it
        _row(store, msg, "u-1", "user", "/approve x", T)
        _row(store, msg, "draft-r1", "assistant", "Denied: x", T + 0.1)
        _row(store, "INSERT INTO runs(run_id, conversation_id, status, started_at, finished_at) VALUES"
             "('r1','c1','failed',?,?)", T, T + 0.2)  # fmt: skip
        _row(store, msg, "u-2", "user", "/approve y", T + 1)
        _row(store, msg, "draft-r2", "assistant", "Ran", T + 1.1)
        _row(store, "INSERT INTO runs(run_id, conversation_id, status, started_at, finished_at) VALUES"
             "('r2','c1','completed',?,?)", T + 1, T + 1.2)  # fmt: skip
        # (r2's end and completion not folded here yet: this node is behind)
        assert conv.run.run_id == "r2" and keeper.refresh() == 1
        assert [m.message_id for m in conv.messages] == ["u-1", "draft-r1", "u-2"]
        _row(store, msg, "u-3", "user", "next", T + 3)  # a user's message after it: r2 has ended
        assert keeper.refresh() == 2
        assert [m.message_id for m in conv.messages] == ["u-1", "draft-r1", "u-2", "draft-r2", "u-3"]
    finally:
        store.close()
