"""A kill -9 of the embedded node (one `serve` process, SQLite) in a run longer than what Loomi's rows
keep of it: the rows no longer hold the run's start, so they offered no text of it, and the interrupted
message was completed with the saved draft, up to a second short of the deltas a phone had got (chaos,
embedded seed 2003: `deltas_incomplete`, `transcript_contradicts_client`; issue 41).

Now the rows' deltas past the draft complete it (loomi_adapter/journal.py ``text_after``: the draft is
saved with its newest delta's time, which that delta's frame carries too): the phone's deltas, its
closing ``run.completed`` and the transcript agree. Over real sockets to a real process; the unit cases
of ``text_after`` below it.
"""

from __future__ import annotations

import glob
import os
import signal
import sqlite3
import time

import orjson
import pytest

from loomi_adapter.journal import decode, text_after
from loomi_adapter.replay import WINDOW, frames_of
from tests.hardening.clients import LoomiClient, PhebyClient
from tests.hardening.proc import process_factory
from tests.waiting import until


@pytest.fixture
def serve(tmp_path):
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def _journal_bodies(data_dir: str) -> list[bytes]:
    out = []
    for path in sorted(glob.glob(os.path.join(data_dir, "loomi-journal.*")),
                       key=lambda p: int(p.rsplit(".", 1)[1])):  # fmt: skip
        try:
            with open(path, "rb") as f:
                out += [body for _, body in decode(f.read())[0]]
        except FileNotFoundError:
            continue  # deleted meanwhile (its rows committed)
    return out


def _query(db: str, sql: str, params: tuple = ()) -> list:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _start_pruned_and_draft_held(srv, run_id: str) -> bool:
    """The run's start is in neither the journal nor the stored rows, and the journal holds the delta the
    saved draft ends with (what the restart has: the journal's rows reach the store before it reads)."""
    needle = f'"run_id":"{run_id}"'.encode()
    bodies = _journal_bodies(srv.data_dir)
    stored = [bytes(b) for (b,) in _query(srv.db_path(), "SELECT body FROM loomi_events")]
    if any(b'"run.started"' in b and needle in b for b in bodies + stored):
        return False
    draft = _query(srv.db_path(), "SELECT ts FROM messages WHERE message_id=?", (f"draft-{run_id}",))
    if not draft:
        return False
    frames = [orjson.loads(b"{" + b) for b in bodies if needle in b and b'"run.delta"' in b]
    return any(f.get("ts") == draft[0][0] for f in frames)


def _device_seqs(srv, device_id: str) -> list[int]:
    """The seqs of the device's frames the stored rows and the journal hold (what the restart's window is
    rebuilt from: ``Registry`` start), ascending."""
    events = dict((n, bytes(b)) for n, b in _query(srv.db_path(), "SELECT n, body FROM loomi_events"))
    marks = set(_query(srv.db_path(), "SELECT from_n, seq_offset FROM loomi_segments WHERE device_id=?",
                       (device_id,)))
    for path in glob.glob(os.path.join(srv.data_dir, "loomi-journal.*")):
        try:
            with open(path, "rb") as f:
                e, s, _ = decode(f.read())
        except FileNotFoundError:
            continue
        events.update(e)
        marks.update((n, off) for did, n, off in s if did == device_id)
    return [seq for seq, _ in frames_of(sorted(events.items()), sorted(marks))]


async def stopped_near_newest(srv, phone, device_id: str, ready) -> list[int]:
    """The process stopped in the state ``ready`` looks for, and the phone, behind by what the sockets hold (thousands
    of deltas a second on a busy machine), near the device's newest stored frame: within a quarter of the restart's
    window (which keeps the newest WINDOW), the frames numbered last maybe still in the node's outbox. Not reached
    within 10 s: resumed, and the state looked for again. The device's seqs as stored then."""
    while True:
        await phone.until(ready, 90)
        seqs = _device_seqs(srv, device_id)
        near = seqs[-WINDOW // 4] if len(seqs) >= WINDOW // 4 else 0
        if phone.last_seq >= near:
            return seqs
        try:
            await phone.until(lambda f: phone.last_seq >= near, 10)
            return seqs
        except TimeoutError:
            os.kill(srv.proc.pid, signal.SIGCONT)


async def killed_when(srv, phone, device_id: str, state, every: float, never: str) -> tuple[list[int], int, list]:
    """The process looked at now and then (every ``every`` s, stopped: as the kill will find it, no rotation in
    between) while the phone's frames are read, until ``state(srv)`` holds with the phone near the newest
    (``stopped_near_newest``); then killed -9 there. ``never``: the failure when that takes over 90 s. The device's
    seqs as stored, and the phone's ``last_seq`` and frames, then."""
    deadline = time.monotonic() + 90
    next_look = [0.0]

    def ready(f: dict) -> bool:  # read the phone's frames while the files are looked at now and then
        now = time.monotonic()
        assert now < deadline, never
        if now < next_look[0]:
            return False
        next_look[0] = now + every
        os.kill(srv.proc.pid, signal.SIGSTOP)  # looked at as the kill will find it (no rotation in between)
        held = False
        try:
            held = state(srv)
        finally:
            if not held:
                os.kill(srv.proc.pid, signal.SIGCONT)
        return held

    seqs = await stopped_near_newest(srv, phone, device_id, ready)
    srv.kill9()  # stopped: the draft and the rows as they were looked at
    return seqs, phone.last_seq, phone.frames


async def closed_after_restart(phone, run_id: str, last_seq: int, seqs: list[int], before: list) -> tuple[dict, str]:
    """The phone connected again after the restart: the run's one ``run.completed`` (failed; nothing truncated), and
    the text the run's deltas it got, before the kill (``before``) and since, add up to."""
    await phone.until(lambda f: f.get("type") == "run.completed" and f.get("run_id") == run_id, 30)
    assert phone.hello_ok["payload"]["truncated"] is False, (last_seq, seqs[-1])
    (closing,) = [f for f in phone.frames if f.get("type") == "run.completed" and f.get("run_id") == run_id]
    assert closing["payload"]["status"] == "failed"
    got = "".join(f["payload"]["text"] for f in before + phone.frames if f.get("type") == "run.delta"
                  and f.get("run_id") == run_id)
    return closing, got


async def shown_and_stored(srv, task_id: str, run_id: str, text: str) -> None:
    """The run's message is ``text`` in the conversation Pheby opens, and in the store (once written)."""
    pheby = await PhebyClient.connect(srv.ports["pheby"])
    try:
        history = await pheby.open(task_id)
    finally:
        await pheby.close()
    assert [m["text"] for m in history["messages"] if m["message_id"] == f"draft-{run_id}"] == [text]
    await until(lambda: _query(srv.db_path(), "SELECT text FROM messages WHERE message_id=?",
                               (f"draft-{run_id}",)) == [(text,)], what="the completed text stored")


async def test_a_run_longer_than_the_rows_keep_is_completed_with_what_the_phone_got(serve):
    srv = serve("embedded", adapters="pheby,loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    try:
        await phone.send("session.send", {"text": "/bench 10000000 4000", "request_id": "m1"})
        started = (await phone.until(lambda f: f.get("type") == "run.started", 15))[-1]
        run_id, task_id = started["run_id"], started["task_id"]
        seqs, last_seq, before = await killed_when(srv, phone, device[0],
                                                   lambda s: _start_pruned_and_draft_held(s, run_id), 0.5,
                                                   "the run's start never left the rows Loomi keeps")  # fmt: skip
        await phone.close()

        srv.start()
        phone = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
        closing, got = await closed_after_restart(phone, run_id, last_seq, seqs, before)
        text = closing["payload"]["text"]
        assert text == got and len(text) > 4000
        await shown_and_stored(srv, task_id, run_id, text)
    finally:
        await phone.close()


# --- text_after: the deltas past the draft, only where the rows reach back to it -----------------------------


def _delta(run: str, text: str, ts: float) -> bytes:
    return orjson.dumps({"v": 1, "ts": ts, "type": "run.delta", "task_id": "t", "run_id": run,
                         "payload": {"run_id": run, "text": text, "kind": "text"}})[1:]


def test_the_deltas_after_the_drafts_own():
    tails = [_delta("r1", "tok ", 1.0), _delta("r2", "x ", 1.5), _delta("r1", "tok ", 2.0),
             _delta("r1", "tok ", 3.0), _delta("r1", "end", 4.0)]
    assert text_after(tails, "r1", 2.0) == "tok end"
    assert text_after(tails, "r1", 4.0) == ""  # the draft holds it all
    assert text_after(tails[2:], "r1", 2.0) == "tok end"
    assert text_after(tails[3:], "r1", 2.0) is None  # the draft's own delta pruned: what came between unknown
    assert text_after(tails, "r3", 2.0) is None
