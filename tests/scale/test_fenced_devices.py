"""Fenced ownership of a Loomi device across `agent-bridge serve` processes (docs/scale-out.md, "Fenced
ownership"; bridge_core/scale/fencing.py, loomi_adapter/cluster.py), on a private PostgreSQL and Redis.

A node stopped with SIGSTOP holds a device's socket; the phone gives up on it (without closing it: its
frames would still arrive, the worst case of a half-open TCP connection) and says hello to another
node, which claims the device under a new epoch. Continued, the stopped node reads the events it missed
from the bus and numbers them for the device it still believes its own: its rows for the device are
refused by the store (the epoch moved on), nothing it numbered leaves, and it closes that socket at once
(``replaced``, 4000, no seq-bearing frame), not at its next heartbeat. The phone's history has no gap
and nothing twice; the legitimate path beside it (the device coming back to the stopped node, claimed
again there) replays without ``truncated``.

On the code before the fence, the continued node sends the events it numbered on the old socket with
seqs the new node had given to the same events' replay: the app drops them (seq below what it
processed) or processes an event twice, and the socket stays open until the heartbeat.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import aiohttp
import pytest

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.waiting import until
from tests.scale.phones import loomi_run as _run, loomi_ws as _ws, pair_qr as _qr


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi")





class Abandoned:
    """The phone's old socket, given up on but not closed: every frame still arriving is recorded and
    processed by the app (as a socket it had not closed yet would deliver it)."""

    def __init__(self, app: LoomiApp):
        self.app = app
        self.ws, self.http = app.ws, app.http
        reader = app._reader
        app.ws = app.http = app._reader = None  # the app's next connect leaves this socket alone
        assert reader is not None
        reader.cancel()
        self.frames: list[dict] = []
        self.close_code = None
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        while True:
            msg = await self.ws.receive()
            if msg.type is aiohttp.WSMsgType.TEXT:
                frame = json.loads(msg.data)
                self.frames.append(frame)
                self.app._process(frame)
                continue
            self.close_code = self.ws.close_code if self.ws.close_code is not None else -1
            return

    async def close(self) -> None:
        self.task.cancel()
        await self.ws.close()
        await self.http.close()


def _whole(app: LoomiApp, runs: dict) -> None:
    """Every run seen exactly once and whole; seqs strictly increasing; nothing dropped."""
    seqs = app.seqs()
    assert app.dropped == [], [(f["seq"], f["type"]) for f in app.dropped]
    assert seqs == sorted(set(seqs)), seqs
    for run_id, text in runs.items():
        assert len(app.completed(run_id)) == 1, (run_id, [f["type"] for f in app.events])
        assert len(app.find("run.started", run_id=run_id)) == 1
        assert app.run_text(run_id) == "Echo: " + text


async def test_a_stopped_node_continued_after_its_device_was_claimed_elsewhere_is_fenced(nodes):
    n1, n2 = nodes("n1", "n2")
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    old = None
    try:
        await phone.pair(dict(await _qr(n1), url=_ws(n1)))
        await other.pair(dict(await _qr(n2), url=_ws(n2)))
        runs = {await _run(phone, "on the first node"): "on the first node"}

        old = Abandoned(phone)  # the socket to n1 stays open, unread by n1 while it is stopped
        os.kill(n1.proc.pid, signal.SIGSTOP)
        try:
            text = "while the first node is stopped"
            run_id = await _run(other, text)  # its events wait in the bus for n1
            runs[run_id] = text
            processed = phone.processed
            ok = await phone.connect(_ws(n2))  # n2 claims the device: a new epoch
            assert ok["payload"]["truncated"] is False and ok["seq"] == processed, ok
            await phone.until(lambda: phone.completed(run_id))
        finally:
            os.kill(n1.proc.pid, signal.SIGCONT)
        before = len(old.frames)

        # n1 numbers the missed run for the device it held: refused by the store, dropped, socket closed
        await until(lambda: old.close_code is not None or len(old.frames) > before, timeout=10,
                    what="the stopped node closing its socket")
        assert old.frames[before:] == [], [(f["seq"], f["type"], f.get("replayed")) for f in old.frames[before:]]
        assert old.close_code == 4000, old.close_code
        assert n1.alive

        # the new owner goes on; then the device comes back to n1, claimed again there (the legitimate path)
        text = "after the first node continued"
        runs[await _run(phone, text)] = text
        ok = await phone.connect(_ws(n1))
        assert ok["payload"]["truncated"] is False and ok["seq"] == phone.processed, ok
        text = "back on the first node"
        runs[await _run(phone, text)] = text
        text = "from the other phone, live on both"
        runs[await _run(other, text)] = text
        await phone.until(lambda: all(phone.completed(r) for r in runs))
        _whole(phone, runs)
        assert "Traceback" not in n1.stderr() + n2.stderr()
    finally:
        if old is not None:
            await old.close()
        await close_all()
