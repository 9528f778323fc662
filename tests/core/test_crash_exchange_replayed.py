"""A kill -9 of the embedded node (one `serve` process, SQLite) while Loomi's journal holds a whole
exchange the core's store never got (issue 41, chaos: `transcript_contradicts_client` on the embedded
default): the journal's records are durable at once, the core's rows a writer's batch later.

Before: the phone replayed the task, the user's message, the run and its end from the journaled rows
after the restart, while the transcript (Pheby's ``conversation.open``) lacked all of it. Now the start
writes back what the journaled rows hold and the store lacks, in order, once
(``Bridge._restore_rows``, loomi_adapter/journal.py ``stored_rows``): the transcript, the phone's
replay and its closing frames agree.

Over real sockets to a real process; the test's own SQLite transaction holds the store's write lock
(every batch after it waits, and so does every frame behind them: the phone gets nothing live) while
the process is killed.
"""

from __future__ import annotations

import glob
import os
import sqlite3

import orjson
import pytest

from loomi_adapter.journal import decode
from tests.hardening.clients import LoomiClient, PhebyClient
from tests.hardening.proc import process_factory
from tests.waiting import until


@pytest.fixture
def serve(tmp_path):
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def _journaled(data_dir: str) -> list[dict]:
    """Every frame body the journal's files hold, in order."""
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, "loomi-journal.*"))):
        with open(path, "rb") as f:
            out += [orjson.loads(body if body.startswith(b"{") else b"{" + body) for _, body in decode(f.read())[0]]
    return out


def _first(frames: list[dict], type_: str, **match) -> dict | None:
    for f in frames:
        if f.get("type") == type_ and all(f.get(k) == v for k, v in match.items()):
            return f
    return None


def _deltas(frames: list[dict], run_id: str) -> str:
    return "".join(f["payload"]["text"] for f in frames if f.get("type") == "run.delta" and f.get("run_id") == run_id
                   and f["payload"].get("kind", "text") == "text")


class _Held:
    """The store's write lock, held by the test (the node's writer waits behind it)."""

    def __init__(self, db: str):
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None


async def _restart_and_replay(srv, device, phone: LoomiClient, held: _Held, run_id: str) -> LoomiClient:
    srv.kill9()
    held.release()
    last_seq = phone.last_seq
    await phone.close()
    srv.start()
    phone = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
    await phone.until(lambda f: f.get("type") == "run.completed" and f.get("run_id") == run_id, 15)
    return phone


def _transcript(history: dict) -> list[tuple]:
    return [(m["role"], m["message_id"], m["text"]) for m in history["messages"]]


async def test_an_exchange_a_phone_replays_after_a_kill_is_in_the_transcript(serve):
    srv = serve("embedded", adapters="pheby,loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    held = None
    try:
        await phone.send("session.send", {"text": "first", "request_id": "m1"})
        first = (await phone.until(lambda f: f.get("type") == "run.completed", 15))[-1]
        task_id = first["task_id"]
        await until(lambda: _first(_journaled(srv.data_dir), "run.completed", run_id=first["run_id"]) is not None,
                    what="the first run's end journaled")
        held = _Held(srv.db_path())
        await phone.send("session.send", {"text": "second", "request_id": "m2", "task_id": task_id})
        end = await until(lambda: _first(_journaled(srv.data_dir), "run.completed", task_id=task_id,
                                         **{"run_id": _second_run(srv.data_dir, first["run_id"])}),
                          20, "the second exchange journaled, to its end")
        run_id = end["run_id"]
        assert _first(phone.frames, "run.started", run_id=run_id) is None  # nothing of it left live
        phone = await _restart_and_replay(srv, device, phone, held, run_id)

        user = _first(phone.frames, "session.message", task_id=task_id, run_id=run_id)
        assert user is not None and user["payload"]["text"] == "second"
        replayed = [f for f in phone.frames if f.get("run_id") == run_id and f.get("type") == "run.completed"]
        assert [f["payload"]["status"] for f in replayed] == ["completed"]  # once, as it ended
        text = replayed[0]["payload"]["text"]
        assert text and _deltas(phone.frames, run_id) == text
        pheby = await PhebyClient.connect(srv.ports["pheby"])
        try:
            got = _transcript(await pheby.open(task_id))
        finally:
            await pheby.close()
        assert got[-2:] == [("user", user["payload"]["message_id"], "second"),
                            ("assistant", f"draft-{run_id}", text)]
        assert [r for r, _, _ in got] == ["user", "assistant", "user", "assistant"]
    finally:
        if held is not None:
            held.release()
        await phone.close()


def _second_run(data_dir: str, first_run: str):
    started = [f["run_id"] for f in _journaled(data_dir) if f.get("type") == "run.started" and f["run_id"] != first_run]
    return started[0] if started else "(none yet)"


async def test_a_new_task_interrupted_mid_stream_a_phone_replays_is_in_the_transcript(serve):
    srv = serve("embedded", adapters="pheby,loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    held = _Held(srv.db_path())  # from before the task: its row is not committed either
    try:
        await phone.send("session.send", {"text": "/slow 30", "request_id": "m1"})

        def streamed():
            frames = _journaled(srv.data_dir)
            started = _first(frames, "run.started")
            return started if started and len(_deltas(frames, started["run_id"])) > 20 else None

        started = await until(streamed, 20, "the task, its message and a few deltas journaled")
        run_id, task_id = started["run_id"], started["task_id"]
        assert not phone.frames or _first(phone.frames, "run.started") is None
        phone = await _restart_and_replay(srv, device, phone, held, run_id)

        assert _first(phone.frames, "task.created", task_id=task_id) is not None
        user = _first(phone.frames, "session.message", task_id=task_id)
        assert user is not None and user["payload"]["text"] == "/slow 30"
        closing = [f for f in phone.frames if f.get("run_id") == run_id and f.get("type") == "run.completed"]
        assert [f["payload"]["status"] for f in closing] == ["failed"]  # interrupted by the restart
        text = closing[0]["payload"]["text"]
        assert len(text) > 20 and _deltas(phone.frames, run_id) == text
        pheby = await PhebyClient.connect(srv.ports["pheby"])
        try:
            got = _transcript(await pheby.open(task_id))
        finally:
            await pheby.close()
        assert got[:2] == [("user", user["payload"]["message_id"], "/slow 30"), ("assistant", f"draft-{run_id}", text)]
    finally:
        held.release()
        await phone.close()


# --- the core's rule, on the store: once, in order, nothing into a conversation the store does not hold ---


async def test_rows_a_durable_record_holds_are_restored_once_in_order(tmp_path):
    from bridge_core.bridge.bridge import Bridge
    from bridge_core.bridge.demo import DemoAgent
    from bridge_core.model import events as ev

    record = [
        ev.ConversationCreated(conversation_id="c1", name="kept", ts=1.0),
        ev.UserMessageSent(conversation_id="c1", message_id="u1", text="one", run_id="r1", ts=2.0),
        ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1", ts=2.0),
        ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="Echo: one", run_id="r1", ts=3.0),
        ev.UserMessageSent(conversation_id="c1", message_id="u2", text="two", run_id="r2", ts=4.0),
        ev.ConversationCreated(conversation_id="c2", name="gone", ts=5.0),
        ev.UserMessageSent(conversation_id="c2", message_id="u3", text="three", ts=6.0),
        ev.ConversationDeleted(conversation_id="c2", ts=7.0),
        ev.UserMessageSent(conversation_id="c3", message_id="u4", text="no such task", ts=8.0),
    ]
    d = str(tmp_path / "d")
    for _ in range(2):  # a second start finds every row there: nothing moves, nothing is added twice
        b = Bridge(d, DemoAgent())
        b.add_durable_rows(lambda: list(record))
        await b.start()
        try:
            rows = b.store.query("SELECT conversation_id, message_id, role, text FROM messages ORDER BY rowid")
            assert rows == [("c1", "u1", "user", "one"), ("c1", "draft-r1", "assistant", "Echo: one"),
                            ("c1", "u2", "user", "two")]
            assert sorted(b.conversations) == ["c1"]
            assert b.store.query("SELECT run_id FROM runs") == [("r1",)]
        finally:
            await b.stop()


async def test_a_record_that_cannot_be_read_leaves_the_store_as_it_is(tmp_path):
    from bridge_core.bridge.bridge import Bridge
    from bridge_core.bridge.demo import DemoAgent

    def broken():
        raise OSError("the record cannot be read now")

    b = Bridge(str(tmp_path / "d"), DemoAgent())
    b.add_durable_rows(broken)
    await b.start()
    try:
        assert not b.conversations
    finally:
        await b.stop()
