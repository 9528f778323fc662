"""The pure parts of seq/replay (replay.SeqLog) and of the heartbeat (protocol.Heartbeat), without sockets."""

from __future__ import annotations

import pytest

from loomi_adapter import codec
from loomi_adapter.errors import HeartbeatTimeout
from loomi_adapter.replay import SeqLog, restored
from loomi_adapter.protocol import Heartbeat


def event(log: SeqLog, text: str) -> int:
    log.seq += 1
    log.keep(log.seq, codec.stamp(codec.body("notification", {"text": text}), log.seq))
    return log.seq


def test_resume_carries_last_seq_and_replays_above_it():
    log = SeqLog()
    for i in range(5):
        event(log, f"n{i}")
    log.seq += 1  # a reply (not kept)
    res = log.resume(2)
    assert res.seq == 2 and res.truncated is False
    assert [s for s, _ in log.window if s > 2] == [3, 4, 5]
    assert all(f.endswith(b',"replayed":true}') for f in res.frames) and len(res.frames) == 3
    none = log.resume(None)
    assert none.seq == log.seq == 6 and none.frames == [] and none.truncated is False


def test_truncated_only_when_an_event_above_last_seq_is_gone():
    log = SeqLog(size=4)
    for i in range(6):
        event(log, f"n{i}")  # seqs 1..6, window 3..6, floor 2
    assert log.floor == 2
    assert log.resume(2).truncated is False and len(log.resume(2).frames) == 4
    assert log.resume(1).truncated is True and len(log.resume(1).frames) == 4


def test_a_last_seq_above_anything_given_moves_the_numbering_up():
    log = SeqLog(seq=10)
    res = log.resume(50)
    assert res.seq == 50 and res.truncated is True and log.seq == 50


def test_restored_window_keeps_the_floor_from_the_row_before_it():
    rows = [(s, b"{}") for s in (5, 7, 8, 9, 10)]  # 5: the newest evicted event's row, kept by pruning
    log = restored(rows, seq=10, floor=0, size=4)
    assert log.floor == 5 and [s for s, _ in log.window] == [7, 8, 9, 10]
    assert log.resume(6).truncated is False and log.resume(4).truncated is True
    # nothing evicted: the stored floor stands; the seq never goes below a kept row
    log = restored([(3, b"{}")], seq=2, floor=1, size=4)
    assert log.floor == 1 and log.seq == 3


def test_heartbeat_counts_a_miss_only_when_the_deadline_passes():
    s = Heartbeat(max_missed=3, pong_timeout=10.0)
    s.ping_sent(25.0)
    assert s.expire(34.9) == 35.0 and s.missed == 0
    assert s.expire(35.0) is None and s.missed == 1
    s.ping_sent(50.0)
    s.expire(60.0)
    assert s.missed == 2
    s.pong()  # a pong resets the count
    assert s.missed == 0
    for t in (75.0, 100.0):
        s.ping_sent(t)
        s.expire(t + 10)
    s.ping_sent(125.0)
    with pytest.raises(HeartbeatTimeout):
        s.expire(135.0)  # the third miss in a row


def test_pruning_keeps_the_events_and_the_segments_the_window_needs():
    import sqlite3

    from loomi_adapter import devices, rows
    from loomi_adapter.replay import frames_of

    c = sqlite3.connect(":memory:")
    for stmt in devices.MIGRATIONS[1].split(";")[1:]:  # the two tables of the stored window
        if stmt.strip():
            c.execute(stmt)
    c.executemany("INSERT INTO loomi_segments VALUES(?,?,?)",
                  [("d", 1, 0), ("d", 5, 2), ("d", 10, 5), ("d", 20, 7), ("e", 3, 1), ("e", 30, 2)])
    c.executemany("INSERT INTO loomi_events VALUES(?,?)", [(n, b"x") for n in range(1, 40)])
    batch = rows.RowBatch()
    batch.add([], [], 15)
    batch(c)
    assert c.execute("SELECT MIN(n), COUNT(*) FROM loomi_events").fetchone() == (15, 25)
    # d's segment from 10 still covers events 15..19; e's from 3 covers 15..29
    assert c.execute("SELECT device_id, from_n FROM loomi_segments ORDER BY 1, 2").fetchall() == [
        ("d", 10), ("d", 20), ("e", 3), ("e", 30)]
    # and a device's frames are rebuilt from them
    frames = frames_of([(n, b'"x":1}') for n in (15, 20)], [(10, 5), (20, 7)])
    assert frames == [(20, b'{"seq":20,"event_id":"e_20","x":1}'), (27, b'{"seq":27,"event_id":"e_27","x":1}')]
