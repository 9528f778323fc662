"""The replay rows' journal (loomi_adapter/journal.py; docs/loomi.md, "Seq across restarts")."""

from __future__ import annotations

import concurrent.futures
import os

from loomi_adapter import journal as jmod
from loomi_adapter.journal import Journal, decode, encode

from tests.waiting import until

from .helpers import notify, pair


def _rows(i: int):
    return [(i, b'"type":"run.delta","n":%d}' % i)], ([("dev-a", i, 3)] if i % 5 == 0 else [])


def test_records_read_back_as_written_and_a_cut_or_garbled_tail_ends_the_reading():
    data = b"".join(encode(*_rows(i)) for i in range(1, 11))
    events, segments, used = decode(data)
    assert events == [e for i in range(1, 11) for e in _rows(i)[0]]
    assert segments == [("dev-a", 5, 3), ("dev-a", 10, 3)]
    assert used == len(data)
    last = encode(*_rows(11))
    assert decode(data + last[:-3])[0] == events  # cut short: the whole records before it count
    garbled = bytearray(data + last)
    garbled[-2] ^= 0xFF
    assert decode(bytes(garbled))[0] == events
    assert decode(data + b"\0" * 64)[2] == len(data)  # the zeros after the last record: the end


def _mapped(path: str) -> bool:
    with open("/proc/self/maps") as f:
        return any(line.rstrip().endswith(path) for line in f)


def test_the_journal_keeps_rows_across_a_crash_and_moves_on_when_half_full(tmp_path):
    j = Journal(str(tmp_path), size=4096)
    assert j.open()
    first = j.path
    assert os.path.getsize(first) == 4096  # allocated up front: a full disk fails here, not in a write
    i = 0
    while j.pos < 2048:
        i += 1
        assert j.append(*_rows(i))
    # a crash now: a new process reads what the mapping held, without a close
    assert [n for n, _ in Journal(str(tmp_path)).recover()[0]] == list(range(1, i + 1))
    concurrent.futures.wait([j._spare])  # the next file is prepared in a thread
    full = j.rotate()
    assert full == first and j.pos == 0 and j.path != first
    concurrent.futures.wait([j._spare])  # the journal's thread unmapped the full file, then made the next
    assert not _mapped(first) and _mapped(j.path)
    assert j.append(*_rows(i + 1))
    assert [n for n, _ in Journal(str(tmp_path)).recover()[0]] == list(range(1, i + 2))  # the oldest file first
    Journal.drop(full)  # its batch committed
    assert not os.path.exists(first)
    assert [n for n, _ in Journal(str(tmp_path)).recover()[0]] == [i + 1]
    assert j.rotate() is None  # not half full
    big = [(i + 2, b"x" * 5000)]
    assert not j.append(big, [])  # no room: the caller commits it before its frame leaves
    assert j.append(*_rows(i + 3))
    j.remove()
    assert j.files() == [] and Journal(str(tmp_path)).recover() == ([], [])


def test_append_says_half_full_exactly_when_due_may_move_on(tmp_path):
    """The registry asks ``due`` only when ``append`` returns ``HALF`` (not per record): True below half,
    ``HALF`` from the record that reaches it on, and ``due`` is False whenever ``append`` said True."""
    j = Journal(str(tmp_path), size=4096)
    assert j.open()
    concurrent.futures.wait([j._spare])  # the next file ready: due() turns True as soon as the file is half full
    got, i = [], 0
    while j.pos < 3000:
        i += 1
        stored = j.append(*_rows(i))
        got.append(stored)
        assert stored is (True if j.pos < 2048 else jmod.HALF)
        assert j.due() is (stored is not True)
    assert got[0] is True and got[-1] is jmod.HALF and got.count(jmod.HALF) > 1
    assert j.rotate() and j.append(*_rows(i + 1)) is True  # the next file: below half again
    j.remove()


def test_a_journal_that_cannot_be_allocated_is_not_used(tmp_path, monkeypatch):
    def full(fd, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jmod.os, "posix_fallocate", full)
    j = Journal(str(tmp_path))
    assert not j.open() and j.broken
    assert not j.append(*_rows(1))
    assert j.files() == []


def test_a_journal_that_would_crowd_the_database_out_is_not_made(tmp_path, monkeypatch):
    """On a small file system (an 8 MiB data directory: tests/hardening/test_storage.py) two journal
    files would take the room the database needs: the rows are then committed before their frames."""
    real = os.statvfs(str(tmp_path))

    class Small:
        f_frsize = real.f_frsize
        f_bavail = (8 * 1024 * 1024) // real.f_frsize

    monkeypatch.setattr(jmod.os, "statvfs", lambda path: Small)
    j = Journal(str(tmp_path))
    assert not j.open() and j.broken
    assert j.files() == []
    small = Journal(str(tmp_path), size=4096)  # a file that leaves four times its size free is made
    assert small.open()
    concurrent.futures.wait([small._spare])
    small.remove()


async def test_frames_do_not_wait_for_the_journaled_rows_but_for_every_other_write(loomi):
    """The rows are durable in the journal when the frame is queued; a write that is not (a
    reservation, a message) still holds the frames queued after it until it committed."""
    c, creds = await pair(loomi)
    store = loomi.bridge.store
    registry = loomi.frontends["loomi"].registry
    await store.aflush()
    ticket, submitted = store.ticket, store.submitted
    notify(loomi, 3)
    assert registry._jbatch is not None and len(registry._jbatch.events) == 3
    assert store.ticket == ticket  # nothing a frame must wait for was queued
    frames = [await c.recv() for _ in range(3)]
    assert [f["payload"]["text"] for f in frames] == ["n0", "n1", "n2"]
    assert store.submitted == submitted  # the rows reached no store write yet: the frames did not wait for them
    await registry.flush_rows()
    assert store.query("SELECT COUNT(*) FROM loomi_events")[0][0] == 3
    store.execute_later("UPDATE settings SET value=value WHERE key='x'")  # an ordinary write: the barrier rises
    assert store.ticket == store.submitted
    await c.close()


async def test_the_store_gets_the_windows_rows_only_when_the_journal_moves_to_its_next_file(loomi):
    """Journaled rows are durable already: they reach the database only when a file is half full and the
    next one takes over (or at shutdown), and only the newest window + 1 events' rows, the ones a restart
    reads back (older frames are out of every window); then the full file goes."""
    c, creds = await pair(loomi)
    store = loomi.bridge.store
    registry = loomi.frontends["loomi"].registry
    await registry.flush_rows()
    registry.window = 8  # a small window (the rows kept for the database; the device's own is unchanged)
    registry.journal.remove()
    j = registry.journal = Journal(store.local_dir, size=16384)
    assert j.open()
    concurrent.futures.wait([j._spare])  # the next file is ready: the journal moves on once this one is half full
    first = j.path

    def stored() -> set:
        return {n for (n,) in store.query("SELECT n FROM loomi_events")}

    before = stored()
    published = 0
    while j.number == 1:
        assert j.pos < 8192 + 1024  # it moves on at half full, not later
        notify(loomi, 1, text=f"e{published}-")
        published += 1
        if j.number == 1:
            await store.aflush()
            assert stored() == before  # in the journal only: no store write per event, nor per second
    assert published > 9
    last = registry.event_no
    await until(lambda: not os.path.exists(first), what="the full file deleted once its rows committed")
    assert stored() - before == set(range(last - 8, last + 1))  # the window's rows, not the older ones
    for _ in range(published):  # every frame reached the device meanwhile
        await c.recv()
    await c.close()
