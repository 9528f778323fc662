"""A batch of a node's Loomi rows goes in as few statements as the chunk sizes allow (loomi_adapter/rows.py
``insert_rows``): every frame stored once, a message's mark given twice in one batch (two prunes before the
writer took it) stored as its newest, on both engines. executemany ran one statement per row in PostgreSQL:
the frames and the marks were most of the rows a scale bench wrote (docs/performance.md)."""

from __future__ import annotations

import pytest

from loomi_adapter.rows import MARK_KEEP, ROWS_BIG, RowBatch, event_chunks, mark_sql, write_cluster_rows


@pytest.mark.parametrize("count", [1, 33, 2 * ROWS_BIG + 45])
def test_a_batch_of_frames_and_marks_is_stored_whole(store, count):
    b = RowBatch(write_cluster_rows)
    b.extend([("n1:a", m, 1000 + m, b'"seq":0,"v":1,"type":"run.delta"}') for m in range(1, count + 1)], [])
    b.extend([], [], sql=mark_sql("n1:a", [("msg-1", "run-1", 40, 1.0), ("msg-2", "run-2", 8, 1.5)], 0.5, sweep=False))
    b.extend([], [], sql=mark_sql("n1:a", [("msg-1", "run-1", 52, 2.0)], 0.5, sweep=False))
    store.submit(b).result(timeout=30)
    got = store.query("SELECT m, n FROM loomi_frames WHERE source='n1:a' ORDER BY m")
    assert [tuple(r) for r in got] == [(m, 1000 + m) for m in range(1, count + 1)]
    marks = store.query("SELECT message_id, run_id, upto, ts FROM loomi_marks WHERE source='n1:a' ORDER BY message_id")
    assert [tuple(r) for r in marks] == [("msg-1", "run-1", 52, 2.0), ("msg-2", "run-2", 8, 1.5)]
    # a frame stored again (a batch run again after a COMMIT in doubt) is ignored, not an error
    again = RowBatch(write_cluster_rows)
    again.extend([("n1:a", 1, 1001, b'"seq":0}')], [])
    store.submit(again).result(timeout=30)
    assert store.query_one("SELECT COUNT(*) FROM loomi_frames")[0] == count


def test_the_chunks_cover_any_count():
    for k in range(0, 3 * ROWS_BIG + 40):
        chunks = event_chunks(k, ROWS_BIG)
        assert sum(chunks) == k and all(1 <= c <= 32 or c == ROWS_BIG for c in chunks)



def test_a_mark_outlives_its_sources_rows_for_a_while(store):
    """The sweep keeps a mark older than its source's oldest frame kept for ``MARK_KEEP`` s (loomi_adapter/rows.py
    ``mark_sql``): the last mark of a message whose frames were pruned is what a node closing the run later counts as
    sent (chaos seed 3310). The marks of a source gone go at once."""
    b = RowBatch(write_cluster_rows)
    b.extend([], [], sql=[("INSERT INTO loomi_sources(source, node, kept_from_n) VALUES('n1:a', 'n1', 0)", ())])
    b.extend([], [], sql=mark_sql("n1:a", [("msg-1", "run-1", 40, 100.0), ("msg-2", "run-2", 8, 900.0)], 0.5,
                                  sweep=False))  # fmt: skip
    b.extend([], [], sql=mark_sql("n2:b", [("msg-3", "run-3", 8, 900.0)], 0.5, sweep=False))
    b.extend([], [], sql=mark_sql("n1:a", [], 2000.0, now=900.0 + MARK_KEEP - 1))  # its rows kept from 2000.0 on
    store.submit(b).result(timeout=30)
    marks = store.query("SELECT source, message_id FROM loomi_marks ORDER BY message_id")
    assert [tuple(r) for r in marks] == [("n1:a", "msg-2")]  # msg-1's older than MARK_KEEP; n2:b's source gone
