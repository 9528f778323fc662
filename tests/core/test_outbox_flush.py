"""When an Outbox writes (bridge_core/hub.py): at once when the connection drained, else together.

Over a real loopback WebSocket with the front ends' own sender
(``frontend.ws_text_sender``): an idle connection gets a frame within the
``put`` itself, before anything else runs; frames put while a write is
pending (or later in the same loop iteration) go out together in the next
write, bounded in size; nothing is lost or reordered; and the durability
barrier still holds a frame until the writes queued before it committed.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from bridge_core.frontend import STORE_KEY, ws_text_sender
from bridge_core.hub import BATCH_BYTES, Outbox
from bridge_core.tasks import TaskSet


async def _until(cond, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.001)


class _Server:
    """One WebSocket served with an Outbox whose writer runs; the test drives ``put``."""

    def __init__(self, store=None):
        self.store = store
        self.ready = asyncio.Event()
        self.done = asyncio.Event()
        self.writes: list[int] = []
        self.box: Outbox = None  # type: ignore[assignment]
        self.transport = None
        self.tasks = TaskSet("test")

    async def handler(self, request):
        ws = web.WebSocketResponse(compress=False)
        await ws.prepare(request)
        transport = request.transport
        original = transport.write

        def counting(data):
            self.writes.append(len(data))
            return original(data)

        transport.write = counting
        self.transport = transport
        self.box = Outbox(ws_text_sender(ws, request))
        self.tasks.spawn(self.box.run())
        self.ready.set()
        await self.done.wait()
        self.box.close()
        transport.write = original
        await ws.close()
        return ws

    async def start(self):
        app = web.Application()
        if self.store is not None:
            app[STORE_KEY] = self.store
        app.router.add_get("/ws", self.handler)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        return self.runner.addresses[0][1]

    async def stop(self):
        self.done.set()
        await self.tasks.close()
        await self.runner.cleanup()


async def _connected(srv: _Server):
    port = await srv.start()
    http = aiohttp.ClientSession()
    ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws")
    await srv.ready.wait()
    await _until(lambda: srv.box._parked)  # the writer is idle, waiting for a frame
    return http, ws


async def test_an_idle_connection_gets_the_frame_within_the_put():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        before = len(srv.writes)
        assert srv.box.put(b'{"n":1}')
        # no await since the put: the frame is already on the socket, not waiting for the writer task
        assert len(srv.box) == 0 and srv.box.sent_frames == 1 and len(srv.writes) == before + 1
        msg = await ws.receive(timeout=5)
        assert msg.type == aiohttp.WSMsgType.TEXT and msg.data == '{"n":1}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


async def test_frames_put_in_the_same_iteration_leave_together_in_the_next_write():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        before = len(srv.writes)
        frames = [b'{"n":%d}' % i for i in range(5)]
        for f in frames:
            srv.box.put(f)
        assert srv.box.sent_frames == 1 and len(srv.box) == 4  # the first at once, the rest queued
        got = [(await ws.receive(timeout=5)).data.encode() for _ in frames]
        assert got == frames  # nothing lost, nothing reordered
        assert len(srv.writes) == before + 2  # the first alone, the other four in one write
        await _until(lambda: srv.box._parked)
        assert srv.box.put(b'{"n":"again"}') and len(srv.box) == 0  # idle again: at once again
        assert (await ws.receive(timeout=5)).data == '{"n":"again"}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


async def test_frames_queued_while_a_write_is_pending_go_out_together_bounded_in_size():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        # the client reads nothing: fill the socket until the transport holds unsent bytes (a pending write)
        big = b'{"s":"' + b"x" * 60000 + b'"}'
        sent = []
        while not srv.transport.get_write_buffer_size():
            sent.append(big)
            srv.box.put(big)
            await _until(lambda: len(srv.box) == 0 or srv.transport.get_write_buffer_size())
        small = [b'{"n":%d}' % i for i in range(2000)]
        for f in small:
            before = srv.box.sent_frames
            srv.box.put(f)
            assert srv.box.sent_frames == before  # not at once: the previous write has not drained
        sent += small
        writes_before = len(srv.writes)
        got = []
        while len(got) < len(sent):
            msg = await ws.receive(timeout=10)
            assert msg.type == aiohttp.WSMsgType.TEXT
            got.append(msg.data.encode())
        assert got == sent  # every frame, in order
        batches = srv.writes[writes_before:]
        assert len(batches) < len(small) / 10  # together, not one write each
        assert max(batches) <= BATCH_BYTES + 16 * 256  # each write bounded (frame headers on top)
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


class _HeldStore:
    """The durability barrier's side of a store (submitted / processed / synced), committed by the test."""

    def __init__(self):
        self.submitted = 0
        self.processed = 0
        self._changed = asyncio.Event()

    async def synced(self, upto=None):
        target = self.submitted if upto is None else upto
        while self.processed < target:
            self._changed.clear()
            await self._changed.wait()

    def commit(self):
        self.processed = self.submitted
        self._changed.set()


async def test_an_idle_connection_still_waits_for_the_commit_of_what_came_before():
    store = _HeldStore()
    srv = _Server(store)
    http, ws = await _connected(srv)
    try:
        store.submitted += 1  # a write queued, not committed: the next frame must wait for it
        srv.box.put(b'{"n":"held"}')
        assert srv.box.sent_frames == 0 and len(srv.box) == 1
        store.commit()
        assert (await ws.receive(timeout=5)).data == '{"n":"held"}'
        await _until(lambda: srv.box._parked)
        assert srv.box.put(b'{"n":"free"}') and srv.box.sent_frames == 2  # nothing pending: at once
        assert (await ws.receive(timeout=5)).data == '{"n":"free"}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


async def test_connections_held_by_one_commit_wait_for_it_together(tmp_path):
    """Ten outboxes behind one pending write: one waiter on the store (one wake per commit), all delivered."""
    import threading

    from bridge_core.store import Store

    store = Store(str(tmp_path / "s.db")).open()
    gate = threading.Event()
    sent: list[list] = [[] for _ in range(10)]

    class Sender:
        def __init__(self, out):
            self.out = out

        async def __call__(self, data):
            self.out.append(data)

        def durable_store(self):
            return store

    tasks = TaskSet("test")
    boxes = [Outbox(Sender(out)) for out in sent]
    try:
        for b in boxes:
            tasks.spawn(b.run())
        blocked = store.submit(lambda c: gate.wait(10))  # a write the frames must wait for
        for i, b in enumerate(boxes):
            b.put(b"frame %d" % i)
        await _until(lambda: all(b._grace for b in boxes))  # every writer is held by the barrier
        assert len(store._sync_waiters) == 1  # the leader waits on the store; the others follow it
        assert not any(sent)
        gate.set()
        await _until(lambda: all(out == [b"frame %d" % i] for i, out in enumerate(sent)))
        blocked.result(5)
    finally:
        gate.set()
        await tasks.close()
        store.close()
