"""A write whose awaiter was cancelled (a handler whose client went away while its write waited in the
queue) is committed all the same and the writer goes on: the writer thread raised InvalidStateError
setting the cancelled future's result and ended, and with it every later write of the node (a Loomi
new task whose socket closed before the send's answer: its conversation stored, its run never; chaos
seed 2003, tests/scale/test_send_answer_lost.py)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

from bridge_core.bridge.sqlite import Store


async def test_a_cancelled_write_is_committed_and_the_writes_after_it_are_too(tmp_path):
    path = str(tmp_path / "b.db")
    s = Store(path).open()
    s.migrate("t", ["CREATE TABLE t(i INTEGER PRIMARY KEY)"])
    inside, go = threading.Event(), threading.Event()

    def busy(c):  # holds the writer inside a batch, as a slow commit does
        inside.set()
        go.wait()

    first = s.submit(busy)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, inside.wait)
    queued = s.submit(lambda c: c.execute("INSERT INTO t VALUES(1)"))
    waiting = asyncio.wrap_future(queued)  # what ``Store.write`` awaits
    waiting.cancel()  # its awaiter cancelled: asyncio cancels the queued future with it
    await asyncio.gather(waiting, return_exceptions=True)
    assert waiting.cancelled() and queued.cancelled()
    go.set()
    await asyncio.wrap_future(first)
    # the next write is answered: the writer lived through the cancelled one (before: it never was)
    await asyncio.wait_for(s.write(lambda c: c.execute("INSERT INTO t VALUES(2)")), 30)
    other = sqlite3.connect(path)
    assert other.execute("SELECT i FROM t ORDER BY i").fetchall() == [(1,), (2,)]
    other.close()
    s.close()
