"""Durable before delivered: a frame leaves only once the writes queued before it have committed, so a
client never holds an event that a crash (kill -9) could take back."""

from __future__ import annotations

import asyncio
import threading

from tests.pheby.client import PhebyClient
from tests.waiting import turns, until


async def test_frames_wait_for_the_writes_before_them(service_factory):
    svc = await service_factory(adapters=("pheby",))
    client = await PhebyClient.connect(svc.ports["pheby"])
    store = svc.bridge.store
    gate = threading.Event()
    try:
        blocked = store.submit(lambda c: gate.wait(10))  # the writer is busy with an earlier write
        conv = svc.bridge.create_conversation("durable")  # its row is queued behind it; the broadcast waits
        try:
            f = await client.recv(timeout=0.5)
            raise AssertionError(f"a frame left before its write committed: {f}")
        except asyncio.TimeoutError:
            pass
        assert store.query("SELECT id FROM conversations WHERE id=?", (conv.conversation_id,)) == []
        gate.set()
        f = await client.recv(timeout=5)
        assert f["type"] == "conversation.updated" and f["conversation_id"] == conv.conversation_id
        # by the time it arrived, the row was on disk
        assert store.query("SELECT id FROM conversations WHERE id=?", (conv.conversation_id,)) == [(conv.conversation_id,)]
        blocked.result(5)
    finally:
        gate.set()
        await client.close()


async def test_synced_returns_at_once_without_pending_writes(tmp_path):
    from bridge_core.bridge.sqlite import Store

    s = Store(str(tmp_path / "b.db")).open()
    try:
        await asyncio.wait_for(s.synced(), 1)
        s.submit(lambda c: None).result(5)
        await asyncio.wait_for(s.synced(), 1)
        assert s.processed == s.submitted == 1
    finally:
        s.close()
    await asyncio.wait_for(s.synced(), 1)  # closed: nothing to wait for


class _FakeStore:
    def __init__(self):
        self.submitted = 0
        self.processed = 0
        self.released = asyncio.Event()

    @property
    def ticket(self):  # every write these tests queue holds the frames after it
        return self.submitted

    async def synced(self, upto=None):
        await self.released.wait()
        self.processed = self.submitted


async def test_outbox_holds_frames_for_their_writes_with_grace():
    from bridge_core.kit.outbox import Outbox

    store = _FakeStore()
    sent = []

    class Sender:  # an Outbox sender (bridge_core/kit/outbox.py Sender): no synchronous path, one frame at a time
        sync = None
        many = None

        async def __call__(self, data):
            sent.append(data)

        def durable_store(self):
            return store

    box = Outbox(Sender(), max_items=10, max_bytes=1000)
    writer = asyncio.ensure_future(box.run())
    box.put(b"before")  # no write pending: leaves at once
    await until(lambda: sent == [b"before"], what="the first frame")
    store.submitted += 1  # a write is queued; frames after it wait
    for i in range(100):  # ten times max_items (1000 bytes): the barrier's wait is the server's, not a slow client's
        assert box.put(b"f%08d+" % i)
    await turns()  # the writer had every chance to send: still held
    assert sent == [b"before"] and not box.overflowed
    store.released.set()
    await until(lambda: len(sent) == 101, what="the held frames")
    assert not box.overflowed
    store.submitted += 1
    for i in range(200):  # held again: max_bytes still bounds what the server's delay makes it hold
        if not box.put(b"g%08d+" % i):
            break
    assert box.overflowed and i == 100
    box.close()
    await asyncio.wait_for(writer, 1)
