"""What a node's start sends again of a close its previous life stored and the stream may lack
(bridge_core/scale/unsent.py; docs/scale-out.md "A close the store has and the stream lacks"): exactly what the
store has and no event on the stream did, whatever the kill cut. On the real SQLite store; the stream is a list
read back as ``RedisBus.newest`` reads it (newest first, the first match ending the read). Over real processes:
tests/scale/test_close_unsent.py."""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from bridge_core.bridge.decisions import PENDING_KEY
from bridge_core.bridge.sqlite import Store
from bridge_core.model import events as ev
from bridge_core.model.serialize import to_dict
from bridge_core.scale import unsent as unsent_module
from bridge_core.scale.unsent import AGAIN, CLOSE, KEY, REACHED, Unsent

CID, RUN, AID = "c1", "r1", "a1"


class _Stream:
    """The stream's events (bus forms), read back newest first; what is published goes on it."""

    def __init__(self, events: list):
        self.events = list(events)

    async def newest(self, needle: bytes, match: Any, back: float) -> Any:
        for data in reversed(self.events):
            if needle in json.dumps(data).encode() and match(data):
                return data
        return None

    def publish(self, data: Any) -> None:
        self.events.append(data)


def _close(ts: float = 1000.0) -> list:
    """A restart's close of RUN: the completion, the approval denied by restart, the end, the notice."""
    return [to_dict(e) for e in (
        ev.MessageCompleted(conversation_id=CID, message_id=f"draft-{RUN}", text="so far", run_id=RUN, ts=ts),
        ev.ApprovalResolved(conversation_id=CID, run_id=RUN, approval_id=AID, choice="deny", accepted=False,
                            decided_by="restart", ts=ts + 0.001),
        ev.RunFinished(conversation_id=CID, run_id=RUN, status="failed", error=ev.RUN_INTERRUPTED, ts=ts + 0.002),
        ev.Notification(conversation_id=CID, message_id="n-1", text="interrupted", category="diagnostic",
                        source="bridge", ts=ts + 0.003))]  # fmt: skip


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "bridge.db")).open()
    yield s
    s.close()


async def _stored(store: Store, forms: list, *, finished: Any, pending: bool, node: str = "n1") -> None:
    def write(c: Any) -> None:
        c.execute("INSERT INTO runs(run_id, conversation_id, status, started_at, finished_at) VALUES(?,?,?,?,?)",
                  (RUN, CID, "failed" if finished else "running", 1.0, finished))  # fmt: skip
        if pending:
            c.execute("INSERT INTO settings(key, value) VALUES(?, '{}')", (PENDING_KEY + AID,))
        c.execute("INSERT INTO settings(key, value) VALUES(?, ?)",
                  (KEY + RUN, json.dumps({"node": node, "forms": forms})))  # fmt: skip

    await store.write(write)


async def _sent(store: Store, stream: _Stream) -> tuple[list, Unsent]:
    unsent = Unsent(store, "n1")
    before = len(stream.events)
    await unsent.read(stream)
    own: collections.deque = collections.deque()
    unsent.resend(own, stream)
    assert [tag for _, tag, _ in own] == [d["event"] for d in stream.events[before:]]  # each awaited back as own
    sent = stream.events[before:]
    assert all(d[AGAIN] is True for d in sent)  # marked: a node that holds it already drops it
    return [{k: v for k, v in d.items() if k != AGAIN} for d in sent], unsent


def _row(store: Store) -> Any:
    row = store.query_one("SELECT value FROM settings WHERE key=?", (KEY + RUN,))
    return None if row is None else json.loads(row[0])["forms"]


async def test_a_close_stored_whole_and_never_sent_is_sent_once_and_its_row_dropped_when_back(store):
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"], pending=False)
    stream = _Stream([])
    sent, unsent = await _sent(store, stream)
    assert sent == forms  # same ids and ts, in order
    assert _row(store) == forms
    for data in sent[:-1]:
        unsent.back(data)
    await store.synced()
    assert _row(store) == forms  # not all back yet
    unsent.back(sent[-1])
    await store.synced()
    assert _row(store) is None
    sent, _ = await _sent(store, stream)  # a next start: nothing left
    assert sent == []


async def test_a_notice_the_store_lacks_is_written_before_the_load_and_sent(store):
    """The kill came between the batch with the close's end and the one with its notice."""
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"], pending=False)
    await store.write(lambda c: c.execute("INSERT INTO conversations(id, name, source, created_at, updated_at) "
                                          "VALUES(?, 'c', 'demo', 1, 1)", (CID,)))  # fmt: skip
    sent, _ = await _sent(store, _Stream(forms[:3]))
    assert sent == forms[3:]
    assert store.query("SELECT message_id, role, text FROM messages WHERE conversation_id=?", (CID,)) == [
        ("n-1", "assistant", "interrupted")]


async def test_what_the_stream_holds_of_a_close_is_not_sent_again(store):
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"], pending=False)
    sent, _ = await _sent(store, _Stream(forms[:2]))  # the kill cut the bus after two forms
    assert sent == forms[2:]


async def test_a_decision_another_node_resolved_on_the_stream_is_not_resolved_again(store):
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"], pending=False)
    theirs = dict(forms[1], decided_by="remote", choice="once", accepted=True, ts=forms[1]["ts"] + 5)
    sent, _ = await _sent(store, _Stream([theirs]))
    assert [d["event"] for d in sent] == ["MessageCompleted", "RunFinished", "Notification"]


async def test_a_kill_mid_close_sends_only_the_resolutions_the_store_has(store):
    """The run's end not stored (the run open: this start closes it again, resolving only what is still pending):
    the resolution whose pending row is gone is sent; the rest is the new close's."""
    forms = _close()
    await _stored(store, forms, finished=None, pending=False)
    sent, _ = await _sent(store, _Stream([]))
    assert sent == [forms[1]]
    assert _row(store) == [forms[1]]  # the new close appends its own forms to it


async def test_a_kill_before_anything_of_the_close_was_stored_sends_nothing(store):
    forms = _close()
    await _stored(store, forms[:1], finished=None, pending=True)  # only the first form's row write committed
    sent, _ = await _sent(store, _Stream([]))
    assert sent == [] and _row(store) is None


async def test_a_run_another_node_closed_gets_none_of_this_close(store):
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"] + 7, pending=False)  # another end stored
    theirs = dict(forms[1], decided_by="restart", ts=forms[1]["ts"] + 7)
    sent, _ = await _sent(store, _Stream([theirs]))
    assert sent == []


async def test_another_nodes_row_is_left_alone(store):
    forms = _close()
    await _stored(store, forms, finished=forms[2]["ts"], pending=False, node="n2")
    sent, _ = await _sent(store, _Stream([]))
    assert sent == [] and _row(store) == forms


def test_a_close_sent_again_is_dropped_by_a_node_that_delivered_it_and_only_then(store):
    """A form sent again (marked) that this node delivered already is dropped; its first delivery (not marked),
    and one this node never delivered, are folded."""
    forms = _close()
    unsent = Unsent(store, "n1")
    again = [{**f, AGAIN: True} for f in forms]
    assert not any(unsent.again(f) for f in again + forms)
    unsent.folded(forms[2], "n2")  # the end delivered once
    assert [unsent.again(f) for f in again] == [False, False, True, False]
    assert not unsent.again(forms[2])  # a first delivery is never dropped
    assert not unsent.again({**again[2], "ts": again[2]["ts"] + 1})  # another event (its ts differs)


def _reached(store: Store) -> list:
    return sorted(k for (k,) in store.query("SELECT key FROM settings WHERE key LIKE ?", (REACHED + "%",)))


async def test_what_a_node_recorded_delivered_is_not_sent_again_though_the_stream_lost_it(store):
    """Chaos seed 2918: the close reached n2 and n3, Redis lost it, both restarted (their memory of it gone): n1's
    start finds it missing from the stream and recorded delivered, sends none of it, drops its row and the records.
    A form nobody recorded (the notice here) is sent."""
    forms = [{**f, CLOSE: RUN} for f in _close()]  # as ``note`` marks them
    await _stored(store, forms, finished=forms[2]["ts"], pending=False)
    n2 = Unsent(store, "n2")
    for data in forms[:3]:
        n2.folded(data, "n1")
    n2.folded(forms[0], "n1")  # (delivered twice, one record)
    await store.synced()
    assert len(_reached(store)) == 3
    sent, _ = await _sent(store, _Stream([]))
    assert sent == forms[3:]
    assert _row(store) == forms[3:]
    n2.folded(forms[3], "n1")  # the notice sent again reached n2: the next start finds it recorded
    await store.synced()
    sent, _ = await _sent(store, _Stream([]))
    assert sent == [] and _row(store) is None and _reached(store) == []  # the row and its records gone


async def test_a_nodes_own_close_and_an_unmarked_form_are_not_recorded(store):
    forms = _close()
    n1 = Unsent(store, "n1")
    n1.folded({**forms[2], CLOSE: RUN}, "n1")  # its own, back from the bus
    n1.folded(forms[2], "n2")  # not a close's (a run's own end)
    await store.synced()
    assert _reached(store) == []


async def test_records_whose_run_has_no_row_go_once_old(store, monkeypatch):
    forms = [{**f, CLOSE: RUN} for f in _close()]
    other = [{**f, CLOSE: "r2"} for f in _close(2000.0)]
    n2 = Unsent(store, "n2")
    for data in (forms[2], other[2]):
        n2.folded(data, "n1")
    await _stored(store, forms, finished=forms[2]["ts"], pending=False, node="n3")  # RUN's row: n3's, kept
    await store.synced()
    await _sent(store, _Stream([]))
    assert len(_reached(store)) == 2  # recent: kept (a row may not be committed yet)
    monkeypatch.setattr(unsent_module, "REACHED_KEEP", -1.0)  # every record old
    await _sent(store, _Stream([]))
    assert _reached(store) == [f"{REACHED}{RUN}:RunFinished:{forms[2]['ts']!r}"]  # r2's went: no row


async def test_a_close_only_other_nodes_delivered_is_read_back_from_their_records(store):
    """Chaos seed 3409: a restart's close went out and its rows never committed, then Redis lost it; the records of
    the nodes that delivered it hold it whole (``reached_close``): once each, in publish order, only while its end
    is among them, only that run's; in the order a restart folds a close (resolutions, completion, end, notice), not
    by ts: the end is made first and published after the others (``Bridge.close_run``), so its ts is the oldest, and
    folded first it closed the run before the completion was written (the store kept the older draft)."""
    forms = [{**f, CLOSE: RUN} for f in _close()]
    forms[2]["ts"] = forms[0]["ts"] - 0.001  # (as Bridge.interrupt makes them)
    other = [{**f, CLOSE: "r2", "run_id": "r2"} for f in _close(2000.0)]
    n2, n3 = Unsent(store, "n2"), Unsent(store, "n3")
    for data in reversed(forms[:2]):  # (any order)
        n2.folded(data, "n1")
    n2.folded(other[2], "n1")
    await store.synced()
    assert unsent_module.reached_close(store, RUN) == []  # no end recorded: nothing to end the run with
    for data in forms:
        n3.folded(data, "n1")
    await store.synced()
    assert unsent_module.reached_close(store, RUN) == [forms[1], forms[0], forms[2], forms[3]]
    assert unsent_module.reached_close(store, "r2") == [other[2]]
