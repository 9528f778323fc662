"""Hub ordering and Outbox coalescing / overflow."""

from __future__ import annotations

import asyncio

import pytest

from bridge_core.bridge.hub import Hub
from bridge_core.kit.outbox import Outbox

from tests.waiting import turns, until


def test_hub_orders_and_isolates_broken_subscribers():
    hub = Hub()
    seen = []
    hub.subscribe(lambda seq, e: (_ for _ in ()).throw(RuntimeError("boom")))
    unsub = hub.subscribe(lambda seq, e: seen.append((seq, e)))
    assert hub.publish("a") == 1 and hub.publish("b") == 2
    unsub()
    hub.publish("c")
    assert seen == [(1, "a"), (2, "b")]


async def test_outbox_delivers_in_order_and_coalesces_by_key():
    sent = []
    gate = asyncio.Event()

    async def send(data):
        await gate.wait()
        sent.append(data)

    box = Outbox(send, max_items=10)
    writer = asyncio.create_task(box.run())
    box.put(b"start")
    await until(lambda: len(box) == 0, what="the writer taking start")  # it waits on the gate
    for i in range(100):
        box.put(f"draft{i}".encode(), key="d")
    box.put(b"complete")
    assert len(box) == 2  # one coalesced draft slot + complete
    gate.set()
    await until(lambda: len(sent) >= 3, what="the queued frames")
    assert sent == [b"start", b"draft99", b"complete"]
    box.put(b"next", key="d")  # a new slot once the old one was sent
    await until(lambda: len(sent) == 4, what="the next frame")
    assert sent[-1] == b"next"
    box.close()
    await asyncio.wait_for(writer, 1)


async def test_outbox_overflow_closes_and_reports():
    overflowed = []

    async def never(data):
        await asyncio.sleep(3600)  # the subject: a peer that never takes the frame (cancelled at the end)

    box = Outbox(never, max_items=3, on_overflow=lambda: overflowed.append(True))
    writer = asyncio.create_task(box.run())
    await asyncio.sleep(0)
    assert box.put(b"x")
    await until(lambda: len(box) == 0, what="the frame in flight")  # the writer took it
    results = [box.put(b"x") for _ in range(5)]
    assert results[:3] == [True, True, True]  # three queued
    assert results[3] is False and overflowed == [True] and box.closed and box.overflowed
    assert box.put(b"y") is False and overflowed == [True]
    writer.cancel()


async def test_outbox_byte_limit():
    async def never(data):
        await asyncio.sleep(3600)  # the subject: a peer that never takes the frame (cancelled at the end)

    box = Outbox(never, max_items=1000, max_bytes=100)
    writer = asyncio.create_task(box.run())
    await asyncio.sleep(0)
    assert box.put(b"x" * 60)
    await until(lambda: len(box) == 0, what="the first frame in flight")
    assert box.put(b"x" * 60)
    assert not box.put(b"x" * 60)
    writer.cancel()


async def test_writer_ends_quietly_when_the_peer_is_gone():
    """A reset transport ends the writer loop without an exception (no traceback logged per vanished client)."""

    async def send(data):
        raise ConnectionResetError("Cannot write to closing transport")

    box = Outbox(send)
    box.put(b"a")
    await asyncio.wait_for(box.run(), 1.0)  # returns, does not raise
    assert box.closed
    assert box.put(b"b") is False


async def test_wait_room_returns_once_the_writer_drained():
    release = asyncio.Event()
    sent = []

    async def send(data):
        await release.wait()
        sent.append(data)

    box = Outbox(send)
    for i in range(100):
        box.put(b"x%d" % i)
    writer = asyncio.ensure_future(box.run())
    waiting = asyncio.ensure_future(box.wait_room(10))
    await turns()
    assert not waiting.done()  # 100 queued, none sent
    release.set()
    await asyncio.wait_for(waiting, 2.0)
    assert len(box) <= 10
    box.close()
    await asyncio.wait_for(writer, 2.0)


async def test_a_reserved_reply_goes_out_before_what_was_queued_after_it():
    sent = []

    async def send(data):
        sent.append(data)

    box = Outbox(send, max_items=10)
    writer = asyncio.create_task(box.run())
    box.put(b"before")
    slot = box.reserve()
    box.put(b"broadcast")  # caused by the request, queued while it runs
    empty = box.reserve()
    box.put(b"later")
    await turns()  # the writer stops at the unfilled reservation
    assert sent == [b"before"]
    box.fill(slot, b"reply")
    box.fill(empty, None)  # a request without a direct reply leaves no frame
    await until(lambda: len(sent) == 4, what="the reply and what followed it")
    assert sent == [b"before", b"reply", b"broadcast", b"later"]
    box.close()
    await writer


def test_frames_put_before_the_loop_runs_leave_once_the_writer_starts():
    sent = []

    async def send(data):
        sent.append(data)

    box = Outbox(send)
    assert box.put(b"early") and box.put(b"later")  # no event loop yet

    async def main():
        writer = asyncio.ensure_future(box.run())
        await until(lambda: sent == [b"early", b"later"], what="the frames put before the loop")
        box.close()
        await writer

    asyncio.run(main())


async def test_drop_forgets_an_unsent_keyed_frame():
    """A draft its message's end made stale is dropped unsent; the key then starts a new item at the end."""
    sent = []
    gate = asyncio.Event()

    async def send(data):
        await gate.wait()
        sent.append(data)

    box = Outbox(send, max_items=10)
    writer = asyncio.create_task(box.run())
    box.put(b"start")
    await until(lambda: len(box) == 0, what="the writer taking start")  # it waits on the gate
    box.put(b"draft1", key="d")
    box.put(b"complete")
    box.drop("d")
    box.drop("no such key")
    box.put(b"draft2", key="d")
    gate.set()
    await until(lambda: len(sent) == 3, what="the queued frames")
    assert sent == [b"start", b"complete", b"draft2"]
    box.close()
    await asyncio.wait_for(writer, 1)


def test_a_sender_declares_what_it_can_do():
    """An Outbox reads a sender's capabilities (bridge_core/kit/outbox.py Sender), never guesses them: an object
    that leaves one out is refused at once (a bare coroutine function is a sender with none)."""

    class Partial:
        async def __call__(self, data):
            pass

        def durable_store(self):
            return None

    with pytest.raises(AttributeError):
        Outbox(Partial())
    Partial.sync = None  # declared absent: no synchronous path, one frame at a time
    Partial.many = None
    assert Outbox(Partial()).put(b"x")
