"""A completion whose deltas were not rendered here asks the store what went out (loomi_adapter/runtexts.py
``sent``, journal.py ``sent_text``): a store that fails then (PostgreSQL restarting) means no filler, never a
failed render of the event; and the query reads only the rows that name the run (journal.py ``run_filter``)."""

from __future__ import annotations

import logging
import sqlite3

import orjson

from bridge_core.model import events as ev
from bridge_core.model.errors import Unavailable
from loomi_adapter.journal import stored_run_text
from loomi_adapter.runtexts import RunTexts

from .helpers import pair


def _frame(type_: str, run: str, ts: float, **payload) -> bytes:
    return orjson.dumps({"v": 1, "ts": ts, "type": type_, "task_id": "t", "run_id": run,
                         "payload": {"run_id": run, **payload}})[1:]


async def test_a_completion_whose_lookup_raises_still_ends_the_run_on_the_phone(loomi, caplog):
    fe = loomi.frontends["loomi"]
    phone, _ = await pair(loomi)
    loomi.bridge.publish(ev.RunStarted(conversation_id="t", run_id="r1", message_id="d1"))
    for i in range(3):
        loomi.bridge.publish(ev.TextDelta(conversation_id="t", run_id="r1", message_id="m1", delta="tok ",
                                          draft="tok " * (i + 1)))
    await phone.recv_until(lambda f: f["type"] == "run.delta" and f["payload"]["text"] == "tok " and f["seq"] >= 4)
    fe.texts = RunTexts(sent=fe.texts.sent)  # its deltas no longer remembered here (evicted, or another life)
    store, query = loomi.bridge.store, loomi.bridge.store.query

    def failing(sql, params=()):
        if "loomi_events" in sql:
            raise Unavailable("database unreachable")
        return query(sql, params)

    store.query = failing
    caplog.set_level(logging.WARNING)
    try:
        loomi.bridge.publish(ev.MessageCompleted(conversation_id="t", message_id="m1", text="tok tok tok end",
                                                 run_id="r1"))
        loomi.bridge.publish(ev.RunFinished(conversation_id="t", run_id="r1", status="completed"))
        got = await phone.recv_until(lambda f: f["type"] == "run.completed")
    finally:
        store.query = query
    assert [f["type"] for f in got] == ["run.completed"]  # no filler: what went out is unknown
    assert got[0]["payload"]["text"] == "tok tok tok end" and got[0]["payload"]["status"] == "completed"
    failed = [r for r in caplog.records if "subscriber" in r.getMessage() or r.levelno >= logging.ERROR]
    assert failed == [], [r.getMessage() for r in failed]  # the render of the completion did not fail
    warned = [r.getMessage() for r in caplog.records if "no filler for run r1" in r.getMessage()]
    assert warned == ["no filler for run r1: the store failed: Unavailable"], warned
    await phone.close()


class _Store:
    """A real SQLite database with the replay tables; counts the rows its queries return."""

    errors = (sqlite3.Error,)

    def __init__(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.executescript(
            "CREATE TABLE loomi_events(n INTEGER PRIMARY KEY, body BLOB NOT NULL);"
            "CREATE TABLE loomi_frames(source TEXT, m INTEGER, n INTEGER, body BLOB, PRIMARY KEY(source, m));"
            "CREATE TABLE loomi_marks(source TEXT, message_id TEXT, run_id TEXT, upto INTEGER, ts REAL);"
            "CREATE TABLE messages(message_id TEXT, text TEXT, ts REAL);")
        self.read = 0

    def query(self, sql: str, params: tuple = ()) -> list:
        rows = self.db.execute(sql, params).fetchall()
        self.read += len(rows)
        return rows

    def query_one(self, sql: str, params: tuple = ()):
        rows = self.query(sql, params)
        return rows[0] if rows else None


def test_the_exact_lookup_reads_only_the_rows_of_its_run():
    store = _Store()
    other = [_frame("run.started", "r2", 1.0)] + [_frame("run.delta", "r2", 2.0 + i, text="x", kind="text")
                                                  for i in range(500)]
    mine = [_frame("run.started", "r_1", 1.0), _frame("run.delta", "r_1", 2.0, text="tok ", kind="text"),
            _frame("run.delta", "r_1", 3.0, text="tok", kind="text")]
    rows = other[:250] + mine + other[250:]
    store.db.executemany("INSERT INTO loomi_events VALUES (?, ?)", list(enumerate(rows)))
    store.db.executemany("INSERT INTO loomi_frames VALUES ('a:1', ?, ?, ?)", [(m, m, b) for m, b in enumerate(rows)])
    assert stored_run_text(store, "r_1", exact=("m", "tok tok end")) == "tok tok"
    assert store.read == 2 * len(mine)  # its run's rows in each table (no mark, no draft), none of the 501 others
    store.read = 0
    assert stored_run_text(store, "r_1") == "tok tok" and store.read == 2 * len(rows)  # a crash's close: all of them
