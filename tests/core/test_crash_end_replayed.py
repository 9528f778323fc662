"""A kill -9 of the embedded node (one `serve` process, SQLite) after a run ended, its end journaled for
Loomi (durable at once) while the core's write of it was held: the phone replays that ``run.completed``
after the restart, and gets no second end (event_twice, chaos seed 2002, issue 41).

Before: the restart found the run running in the store and closed it as interrupted, a second
``run.completed`` (status failed) and a ``run.failed`` after the first. Now the start writes the end the
journaled rows hold (``Bridge.restore_end``, loomi_adapter/journal.py ``stored_run_end``).

Over real sockets to a real process; the test's own SQLite transaction holds the store's write lock (the
batch with the run's end waits, and so does every frame behind it) while the process is killed.
"""

from __future__ import annotations

import glob
import os
import sqlite3

import pytest

from loomi_adapter.journal import decode
from tests.hardening.clients import LoomiClient
from tests.hardening.proc import process_factory
from tests.waiting import until


@pytest.fixture
def serve(tmp_path):
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def _journaled_end(data_dir: str, run_id: str) -> bool:
    needle = f'"run_id":"{run_id}"'.encode()
    for path in glob.glob(os.path.join(data_dir, "loomi-journal.*")):
        with open(path, "rb") as f:
            events = decode(f.read())[0]
        if any(b'"run.completed"' in body and needle in body for _, body in events):
            return True
    return False


def _run_row(db: str, run_id: str) -> list:
    conn = sqlite3.connect(db)
    try:
        return conn.execute("SELECT status, finished_at IS NOT NULL FROM runs WHERE run_id=?", (run_id,)).fetchall()
    finally:
        conn.close()


def _ends(frames: list, run_id: str) -> list:
    return [(f["type"], f["payload"].get("status")) for f in frames
            if f.get("type") in ("run.completed", "run.failed") and f.get("run_id") == run_id]


async def test_a_run_end_a_phone_replays_after_a_kill_is_not_closed_again(serve):
    srv = serve("embedded", adapters="loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    db = srv.db_path()
    held = None
    try:
        await phone.send("session.send", {"text": "/slow 1", "request_id": "m1"})
        started = (await phone.until(lambda f: f.get("type") == "run.started", 15))[-1]
        run_id = started["run_id"]
        await until(lambda: _run_row(db, run_id) == [("running", 0)], what="the run's row committed")
        held = sqlite3.connect(db, isolation_level=None)
        held.execute("BEGIN IMMEDIATE")  # the store's writer waits: the run's end is not committed
        await until(lambda: _journaled_end(srv.data_dir, run_id), 20, "the run's end journaled for Loomi")
        assert not _ends(phone.frames, run_id)  # its frame waits for the core's write (the barrier)
        srv.kill9()
        held.rollback()
        held.close()
        held = None
        assert _run_row(db, run_id) == [("running", 0)]
        last_seq = phone.last_seq
        await phone.close()

        srv.start()
        phone = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
        await phone.until(lambda f: f.get("type") == "run.completed" and f.get("run_id") == run_id, 15)
        await phone.send("session.send", {"text": "after the restart", "request_id": "m2",
                                          "task_id": started["task_id"]})
        await phone.until(lambda f: f.get("type") == "run.completed" and f.get("run_id") not in (None, run_id), 15)
        assert _ends(phone.frames, run_id) == [("run.completed", "completed")]  # once, as it ended
        await until(lambda: _run_row(db, run_id) == [("completed", 1)], what="the run's end written")
    finally:
        if held is not None:
            held.close()
        await phone.close()
