"""A kill -9 of the embedded node while a slow run streams beside a fast one: the journal moved to its
next file after the slow run's draft was saved, and the batch it handed to the store kept only the newest
window + 1 events' rows, so the rows hold neither the run's start nor the delta its saved draft ends with,
only the deltas after it. The restart then had no text of the run past the draft (``text_after`` needs
the draft's own delta as the anchor) and closed it with its first words while the phones had got, and
replayed, several more (chaos, embedded seed 2020: `deltas_incomplete`, `transcript_contradicts_client`;
issue 41). Over real sockets to a real process, the state looked at while the process is stopped, as
the kill finds it (tests/core/test_crash_long_run.py does the same for a run longer than the rows).
"""

from __future__ import annotations

import orjson
import pytest

from tests.core.test_crash_long_run import _journal_bodies, _query, closed_after_restart, killed_when, shown_and_stored
from tests.hardening.clients import LoomiClient
from tests.hardening.proc import process_factory


@pytest.fixture
def serve(tmp_path):
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def _anchor_pruned_rest_held(srv, run_id: str) -> bool:
    """What the restart will have: the run's start and its draft's own delta in neither the journal nor
    the stored rows, and a later delta of it (one a phone got past the draft) in them."""
    needle = f'"run_id":"{run_id}"'.encode()
    rows = _journal_bodies(srv.data_dir) + [bytes(b) for (b,) in _query(srv.db_path(),
                                                                         "SELECT body FROM loomi_events")]
    if any(b'"run.started"' in b and needle in b for b in rows):
        return False
    draft = _query(srv.db_path(), "SELECT ts FROM messages WHERE message_id=?", (f"draft-{run_id}",))
    if not draft:
        return False
    stamps = [orjson.loads(b"{" + b).get("ts") for b in rows if needle in b and b'"run.delta"' in b]
    return bool(stamps) and min(stamps) > draft[0][0]


async def test_a_slow_run_whose_draft_anchor_left_the_rows_is_completed_with_what_the_phone_got(serve):
    srv = serve("embedded", adapters="pheby,loomi")
    device, phone = await LoomiClient.pair(srv.ports["loomi"])
    try:
        await phone.send("session.send", {"text": "/bench 10000000 8000", "request_id": "m1"})
        await phone.until(lambda f: f.get("type") == "run.started", 15)
        await phone.send("session.send", {"text": "/slow 120", "request_id": "m2"})
        starts = lambda: [g for g in phone.frames if g.get("type") == "run.started"]  # noqa: E731
        await phone.until(lambda f: len(starts()) == 2, 15)
        started = starts()[1]
        run_id, task_id = started["run_id"], started["task_id"]
        never = "the slow run's draft anchor never left the rows before its next save"
        seqs, last_seq, before = await killed_when(srv, phone, device[0],
                                                   lambda s: _anchor_pruned_rest_held(s, run_id), 0.1, never)
        draft = _query(srv.db_path(), "SELECT text FROM messages WHERE message_id=?", (f"draft-{run_id}",))[0][0]
        await phone.close()

        srv.start()
        phone = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
        closing, got = await closed_after_restart(phone, run_id, last_seq, seqs, before)
        assert len(got) > len(draft) and got.startswith(draft)  # the phone had more than the draft
        assert closing["payload"]["text"] == got
        await shown_and_stored(srv, task_id, run_id, got)
    finally:
        await phone.close()


# --- text_from: the deltas from the journal's first file on, only where the rows hold all of them -----------


def _row(n: int, run: str, text: str, ts: float) -> tuple[int, bytes]:
    return n, orjson.dumps({"v": 1, "ts": ts, "type": "run.delta", "task_id": "t", "run_id": run,
                            "payload": {"run_id": run, "text": text, "kind": "text"}})[1:]


def test_the_deltas_from_the_boundary_where_every_row_is_there():
    from loomi_adapter.journal import text_from

    rows = [_row(8, "r1", "w1", 1.0), _row(10, "r2", "x", 2.0), _row(11, "r1", " w2", 2.1), _row(12, "r1", " w3", 2.2)]
    assert text_from(rows, "r1", 10, 1.0) == " w2 w3"  # the draft ends before the boundary
    assert text_from(rows, "r3", 10, 1.0) == ""  # no delta of it since: the draft holds it all
    assert text_from(rows, "r1", 9, 1.0) is None  # the boundary's own row missing
    assert text_from(rows[:2] + rows[3:], "r1", 10, 1.0) is None  # a number missing after it
    assert text_from(rows, "r1", 10, 2.05) is None  # the draft goes past the boundary's first row
    assert text_from(rows, "r1", 13, 1.0) is None  # nothing from there on


def test_stored_run_text_reaches_past_a_pruned_anchor_only_from_the_journals_boundary():
    from loomi_adapter.journal import stored_run_text

    rows = [_row(10, "r2", "x", 2.0), _row(11, "r1", " w2", 2.1), _row(12, "r1", " w3", 2.2)]

    class Store:
        def query(self, sql: str, params: tuple = ()) -> list:
            return [(n, b) for n, b in rows] if "loomi_events" in sql else []

        def query_one(self, sql: str, params: tuple = ()) -> tuple:
            return ("w1", 1.0)

    assert stored_run_text(Store(), "r1") is None  # no boundary: what came between the draft and the rows unknown
    assert stored_run_text(Store(), "r1", drafts_from=10) == "w1 w2 w3"
