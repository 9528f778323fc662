"""When an Outbox writes (bridge_core/kit/outbox.py): at the end of the loop's turn, everything put in it together.

Over a real loopback WebSocket with the front ends' own sender
(``frontend.ws_text_sender``): an idle connection gets a frame at the end
of the loop's turn of the ``put`` (the hook: tests/core/test_looping.py),
from the flush itself (not through the writer task); frames put in the
same turn leave in one write; frames queued while the peer is behind go
out together once it reads, each write bounded in size; nothing is lost
or reordered; the durability barrier holds a frame until the writes queued
before it committed, and the connections it holds are released together
from one wake per commit.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from bridge_core.kit.frontend import STORE_KEY, ws_text_sender
from bridge_core.kit.outbox import BATCH_BYTES, Outbox
from bridge_core.bridge.tasks import TaskSet

from tests.waiting import turns


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
    return http, ws


async def test_an_idle_connection_gets_the_frame_at_the_next_turn_in_one_write():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        before = len(srv.writes)
        assert srv.box.put(b'{"n":1}')
        assert len(srv.writes) == before  # put never writes: the flush is scheduled
        await turns(1)  # the turn ended: the flush ran (not a hop through the writer task)
        assert len(srv.box) == 0 and srv.box.sent_frames == 1 and len(srv.writes) == before + 1
        msg = await ws.receive(timeout=5)
        assert msg.type == aiohttp.WSMsgType.TEXT and msg.data == '{"n":1}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


async def test_frames_put_in_the_same_turn_leave_together_in_one_write():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        before = len(srv.writes)
        frames = [b'{"n":%d}' % i for i in range(5)]
        for f in frames:
            srv.box.put(f)
        assert srv.box.sent_frames == 0 and len(srv.box) == 5
        await turns(1)
        assert srv.box.sent_frames == 5 and len(srv.writes) == before + 1  # one write for the five
        got = [(await ws.receive(timeout=5)).data.encode() for _ in frames]
        assert got == frames  # nothing lost, nothing reordered
        assert srv.box.put(b'{"n":"again"}')  # idle again: the end of the turn again
        await turns(1)
        assert len(srv.writes) == before + 2
        assert (await ws.receive(timeout=5)).data == '{"n":"again"}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


async def test_frames_queued_while_the_peer_is_behind_go_out_together_bounded_in_size():
    srv = _Server()
    http, ws = await _connected(srv)
    try:
        # the client reads nothing: fill the socket until aiohttp's flow control pauses the writes
        big = b'{"s":"' + b"x" * 60000 + b'"}'
        sent = []
        while srv.box._sync.ready():
            sent.append(big)
            srv.box.put(big)
            await _until(lambda: len(srv.box) == 0 or not srv.box._sync.ready())
        small = [b'{"n":%d}' % i for i in range(2000)]
        for f in small:
            srv.box.put(f)
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

    @property
    def ticket(self):  # every write these tests queue holds the frames after it
        return self.submitted

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
        await turns()
        assert srv.box.sent_frames == 0 and len(srv.box) == 1
        store.commit()
        assert (await ws.receive(timeout=5)).data == '{"n":"held"}'
        assert srv.box.put(b'{"n":"free"}')  # nothing pending: the end of the turn
        await turns(1)
        assert srv.box.sent_frames == 2
        assert (await ws.receive(timeout=5)).data == '{"n":"free"}'
    finally:
        srv.done.set()
        await ws.close()
        await http.close()
        await srv.stop()


class SyncSender:
    """A sender with the synchronous path only: a write through the writer task would fail the test
    (tests/core/test_looping.py uses it too, with no store)."""

    def __init__(self, store, out):
        self.store = store
        self.out = out
        self.sync = self

    def ready(self):
        return True

    def write(self, frames):
        self.out.append(list(frames))

    def write_one(self, data):
        if not self.ready():
            return False
        self.out.append([data])
        return True

    async def __call__(self, data):
        raise AssertionError("written through the writer task")

    async def many(self, frames):
        raise AssertionError("written through the writer task")

    def durable_store(self):
        return self.store


async def test_connections_held_by_one_commit_are_written_from_one_wake(tmp_path):
    """Ten outboxes behind one pending write: one waiter on the store; its commit writes every one of them
    from that waiter's wake (each one write, none through its own writer task)."""
    import threading

    from bridge_core.bridge.sqlite import Store

    store = Store(str(tmp_path / "s.db")).open()
    gate = threading.Event()
    sent: list[list] = [[] for _ in range(10)]
    tasks = TaskSet("test")
    boxes = [Outbox(SyncSender(store, out)) for out in sent]
    try:
        for b in boxes:
            tasks.spawn(b.run())
        blocked = store.submit(lambda c: gate.wait(10))  # a write the frames must wait for
        for i, b in enumerate(boxes):
            b.put(b"frame %d" % i)
            b.put(b"more %d" % i)
        await _until(lambda: len(store._sync_waiters) == 1)  # the leader waits on the store
        await turns()
        assert len(store._sync_waiters) == 1 and not any(sent)  # the others wait with it, not on their own
        gate.set()
        await _until(lambda: all(out == [[b"frame %d" % i, b"more %d" % i]] for i, out in enumerate(sent)))
        blocked.result(5)
        assert all(b.writes == 1 for b in boxes)
    finally:
        gate.set()
        await tasks.close()
        store.close()


async def test_a_connection_needing_an_earlier_commit_does_not_wait_for_a_later_one():
    """The leader waits for the commit of a later write; a connection whose frame only needs an earlier
    one is written as soon as that one committed."""
    store = _StepStore()
    a_out: list = []
    b_out: list = []
    tasks = TaskSet("test")
    a = Outbox(SyncSender(store, a_out))
    b = Outbox(SyncSender(store, b_out))
    try:
        tasks.spawn(a.run())
        tasks.spawn(b.run())
        store.submitted = 2
        a.put(b"needs 2")  # a leads: it waits for write 2
        await _until(lambda: store.waiting == [2])
        store.submitted = 1  # b's frame is queued as if only write 1 had been
        b.put(b"needs 1")
        store.submitted = 2
        await _until(lambda: sorted(store.waiting) == [1, 2])
        store.commit_to(1)
        await _until(lambda: b_out == [[b"needs 1"]])
        assert a_out == []
        store.commit_to(2)
        await _until(lambda: a_out == [[b"needs 2"]])
    finally:
        await tasks.close()


class _StepStore:
    """The barrier's side of a store whose commits the test makes one write at a time."""

    def __init__(self):
        self.submitted = 0
        self.processed = 0
        self.waiting: list[int] = []
        self._changed = asyncio.Event()

    @property
    def ticket(self):  # every write these tests queue holds the frames after it
        return self.submitted

    async def synced(self, upto=None):
        target = self.submitted if upto is None else upto
        self.waiting.append(target)
        try:
            while self.processed < target:
                self._changed.clear()
                await self._changed.wait()
        finally:
            self.waiting.remove(target)

    def commit_to(self, n):
        self.processed = n
        self._changed.set()


class _PausableSender(SyncSender):
    """A synchronous sender whose peer can fall behind (then only the writer task's ``many`` writes)."""

    def __init__(self, store, out):
        super().__init__(store, out)
        self.paused = False
        self.waited: list = []

    def ready(self):
        return not self.paused

    async def many(self, frames):
        self.waited.append(list(frames))


async def test_a_leader_whose_peer_falls_behind_hands_the_barrier_over():
    """The outbox leading the barrier's wait gets a frame its peer must wait for (flow control): its writer
    task hands the lead to another held outbox and writes, instead of leading until nothing is held."""
    store = _StepStore()
    a_out: list = []
    b_out: list = []
    tasks = TaskSet("test")
    a_sender = _PausableSender(store, a_out)
    a = Outbox(a_sender)
    b = Outbox(SyncSender(store, b_out))
    try:
        tasks.spawn(a.run())
        tasks.spawn(b.run())
        store.submitted = 1
        a.put(b"a1")  # a leads the wait for write 1
        b.put(b"b1")
        store.submitted = 2
        b.put(b"b2")  # behind write 2, which never commits in this test
        await _until(lambda: store.waiting == [1])
        a_sender.paused = True  # a's peer falls behind
        store.commit_to(1)  # releases a1 (for a's task to write) and b1; b2 stays held
        await _until(lambda: b_out == [[b"b1"]])
        await _until(lambda: a_sender.waited == [[b"a1"]])  # a's task wrote, not stuck leading b's wait
        await _until(lambda: store.waiting == [2])  # b leads now
    finally:
        await tasks.close()


async def test_frames_a_commit_released_before_the_loop_flushed_them_do_not_make_a_slow_consumer():
    """The store's writer thread commits (``processed`` moves) before the loop wakes to flush: a busy loop
    may then put more frames into a queue of thousands the commit just let go. The peer takes what is
    written, so the client is not late and keeps its connection; a peer that stops taking is."""
    store = _HeldStore()
    out: list = []
    sender = _PausableSender(store, out)
    box = Outbox(sender, max_items=50)
    tasks = TaskSet("test")
    try:
        tasks.spawn(box.run())
        store.submitted += 1  # one write pending: every frame below is held
        for i in range(120):
            assert box.put(b"f%d" % i)
        store.processed = store.submitted  # committed in the writer thread; the loop has not woken yet
        assert box.put(b"one more") and not box.overflowed  # the peer keeps up: the server's own backlog
        store.commit()
        await _until(lambda: sum(map(len, out)) == 121)
        assert [f for batch in out for f in batch][-1] == b"one more"
        sender.paused = True  # now the peer stops taking what is written
        for i in range(60):
            if not box.put(b"g%d" % i):
                break
        assert box.overflowed  # a slow consumer still is one
    finally:
        await tasks.close()
