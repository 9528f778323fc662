"""``Store.amigrate``: migrations from the event loop await the writer thread, never block the loop."""

from __future__ import annotations

import asyncio
import threading

from bridge_core.bridge.sqlite import Store


async def test_a_migration_behind_a_busy_writer_lets_the_loop_run(tmp_path):
    s = Store(str(tmp_path / "m.db")).open()
    gate = threading.Event()
    try:
        busy = s.submit(lambda c: gate.wait(30))  # the writer is busy until the loop sets the gate
        # only a loop that keeps running while the migration waits can set it (a blocking migrate would time out)
        asyncio.get_running_loop().call_soon(gate.set)
        assert await s.amigrate("x", ["CREATE TABLE a(i INTEGER)", "CREATE TABLE b(j INTEGER)"]) == 2
        assert busy.done()
        assert await s.amigrate("x", ["CREATE TABLE a(i INTEGER)", "CREATE TABLE b(j INTEGER)"]) == 2  # applied once
        assert s.query("SELECT version FROM schema_version WHERE component='x'") == [(2,)]
    finally:
        gate.set()
        s.close()
