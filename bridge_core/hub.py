"""Ordered fan-out of shared events, and bounded per-connection outboxes.

The hub gives every event a place in one ordered log (``seq``) and calls each
subscriber synchronously, in publish order. Subscribers are protocol adapters:
they encode an event once for their protocol and put the same bytes into the
outbox of every connection. ``publish`` never awaits, so the agent never
blocks on a front end.

An ``Outbox`` is a short queue drained by one writer task per connection.
A frame put while the writer is idle (nothing queued, the connection's
previous writes drained, the frame durable) is written at once, without
waiting for the writer task (the sender's ``now``); frames put while a write
is pending, or later in the same loop iteration, queue and go out together
in the next write, at most ``BATCH_FRAMES`` frames and ``BATCH_BYTES``.
Items can carry a coalescing key: a newer item with the same key replaces an
unsent older one in place (Pheby's cumulative drafts: latest wins). A client
whose outbox overflows is disconnected through ``on_overflow``; it recovers
by replay or snapshot. It is never waited for.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import weakref
from typing import Any, Awaitable, Callable, Hashable, Optional

log = logging.getLogger("agent_bridge.hub")

Subscriber = Callable[[int, Any], None]

BATCH_FRAMES = 256
GRACE = 4  # how many times max_items an outbox may hold while the durability barrier holds it
BATCH_BYTES = 64 * 1024  # one transport write; a larger one is one long send syscall that stalls the loop


class Hub:
    def __init__(self) -> None:
        self.seq = 0
        self._subs: list[Subscriber] = []

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        self._subs.append(fn)

        def unsubscribe() -> None:
            try:
                self._subs.remove(fn)
            except ValueError:
                pass

        return unsubscribe

    def publish(self, event: Any) -> int:
        self.seq += 1
        seq = self.seq
        for fn in tuple(self._subs):
            try:
                fn(seq, event)
            except Exception:  # a broken subscriber never stops the others
                log.exception("hub subscriber %r failed on %s", fn, type(event).__name__)
        return seq

    def publish_at(self, seq: int, event: Any) -> None:
        """Publish ``event`` as number ``seq`` given elsewhere (the bus's cluster-wide number:
        bridge_core/cluster.py), not the next local one; the log's number is then ``seq``."""
        self.seq = seq
        for fn in tuple(self._subs):
            try:
                fn(seq, event)
            except Exception:
                log.exception("hub subscriber %r failed on %s", fn, type(event).__name__)


_RESERVED = object()  # a slot's data until its reply is filled in (Outbox.reserve)


class _Slot:
    __slots__ = ("data", "key", "size", "ticket")

    def __init__(self, data: Any, key: Optional[Hashable], size: int, ticket: int = 0):
        self.data = data
        self.key = key
        self.size = size
        self.ticket = ticket  # the store's write count when queued: it leaves once those committed


class _SharedSync:
    """The connections held by one store's durability barrier wait for its commits together.

    One of them (the leader) awaits ``store.synced``; the others follow it
    and look again when its wait ends. A commit then wakes the loop once,
    not once per connection (each ``synced`` waiter is a wake from the
    store's thread).
    """

    __slots__ = ("done", "target", "__weakref__")

    def __init__(self) -> None:
        self.done: Optional[asyncio.Event] = None  # set when the leader's wait ends
        self.target = 0  # the ticket the leader waits for


_SYNCS: "weakref.WeakKeyDictionary[Any, _SharedSync]" = weakref.WeakKeyDictionary()


def _shared_sync(store: Any) -> _SharedSync:
    try:
        sync = _SYNCS.get(store)
        if sync is None:
            sync = _SYNCS[store] = _SharedSync()
        return sync
    except TypeError:  # a store that takes no weak reference: no sharing
        return _SharedSync()


class Outbox:
    """A bounded, coalescing queue of frames for one connection."""

    def __init__(
        self,
        send: Callable[[Any], Awaitable[None]],
        *,
        max_items: int = 2048,
        max_bytes: int = 16 * 1024 * 1024,
        on_overflow: Optional[Callable[[], None]] = None,
    ) -> None:
        self._send = send
        self._q: collections.deque[_Slot] = collections.deque()
        self._keyed: dict[Hashable, _Slot] = {}
        self._bytes = 0
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._on_overflow = on_overflow
        self._wake = asyncio.Event()
        self._now = getattr(send, "now", None)  # a synchronous write when the connection has drained
        self._parked = False  # the writer waits for a frame with nothing queued: a put may write at once
        self.closed = False
        self.overflowed = False
        # frames held back by the durability barrier (Store.synced) are the server's delay, not the
        # client's: until the queue drains below max_items again, it may hold GRACE times as many
        self._grace = False
        durable = getattr(send, "durable_store", None)
        self._store = durable() if durable is not None else None  # see frontend.ws_text_sender
        self._sync = _shared_sync(self._store) if self._store is not None else None
        self.sent_frames = 0
        self.sent_bytes = 0

    def __len__(self) -> int:
        return len(self._q)

    def put(self, data: Any, key: Optional[Hashable] = None) -> bool:
        """Queue ``data`` (bytes or str); False when the connection is closed or overflowed."""
        if self.closed:
            return False
        size = len(data)
        ticket = self._store.submitted if self._store is not None else 0
        if key is not None:
            slot = self._keyed.get(key)
            if slot is not None:
                self._bytes += size - slot.size
                slot.data = data
                slot.size = size
                slot.ticket = ticket
                return True
        n = len(self._q)
        if (n >= self.max_items and not (n < self.max_items * GRACE and self._held())) or (
            self._bytes + size > self.max_bytes
        ):
            self.overflowed = True
            self.close()
            if self._on_overflow is not None:
                try:
                    self._on_overflow()
                except Exception:
                    log.exception("overflow handler failed")
            return False
        if self._parked and not self._q and (self._store is None or ticket <= self._store.processed):
            if self._write_now(data):
                return True
        slot = _Slot(data, key, size, ticket)
        self._q.append(slot)
        if key is not None:
            self._keyed[key] = slot
        self._bytes += size
        self._wake.set()
        return True

    def _write_now(self, data: Any) -> bool:
        """The idle writer's fast path: ``data`` written synchronously if the sender can (True).

        The writer is woken either way: what is put later in this loop
        iteration queues (the writer is no longer parked) and leaves in its
        next write, so a burst costs two writes, not one per frame.
        """
        now = self._now
        if now is None:
            return False
        frame = data() if callable(data) else data
        if frame is None:  # a coalesced draft whose message completed meanwhile
            return True
        if isinstance(frame, str):
            frame = frame.encode()
        if not now(frame):
            return False
        self.sent_frames += 1
        self.sent_bytes += len(frame)
        self._parked = False
        self._wake.set()
        return True

    def reserve(self) -> Optional[_Slot]:
        """Hold the next place in the queue for a reply not computed yet (None when closed).

        A request's own reply goes out before the broadcasts it causes: the
        front end reserves the reply's place when it starts executing the
        request, the broadcasts queue behind it, and the writer waits at the
        reservation until ``fill`` puts the reply (or nothing) there.
        """
        if self.closed:
            return None
        slot = _Slot(_RESERVED, None, 0)
        self._q.append(slot)
        return slot

    def fill(self, slot: Optional[_Slot], data: Any) -> None:
        """Put the reply (bytes or str; None for no reply) into its reserved place."""
        if slot is None or slot.data is not _RESERVED:
            return
        slot.data = data
        if data is not None and not self.closed:
            slot.size = len(data)
            self._bytes += slot.size
            slot.ticket = self._store.submitted if self._store is not None else 0
        self._wake.set()

    def _held(self) -> bool:
        """Is (or was, until the queue drains) this queue held by the durability barrier?"""
        if self._grace:
            return True
        store = self._store
        if store is not None and self._q and self._q[0].ticket > store.processed:
            self._grace = True
            return True
        return False

    def close(self) -> None:
        self.closed = True
        self._q.clear()
        self._keyed.clear()
        self._bytes = 0
        self._wake.set()

    async def run(self) -> None:
        """Writer loop: drain the queue into the connection until closed.

        When several frames are waiting and the sender can take a batch
        (``send.many``), they go out in one write: one syscall, not one each.
        A peer that is gone (the transport is closing or reset) ends the loop
        quietly: the connection's handler sees the close and cleans up.
        """
        try:
            await self._run()
        except ConnectionError:
            self.close()

    async def _run(self) -> None:
        q = self._q
        many = getattr(self._send, "many", None)
        store = self._store
        while True:
            if not q or q[0].data is _RESERVED:
                if self.closed:
                    return
                self._wake.clear()
                self._parked = not q
                try:
                    await self._wake.wait()
                finally:
                    self._parked = False
                continue
            if store is not None and q[0].ticket > store.processed:
                # durable before delivered: the head leaves once the writes queued before it committed
                self._grace = True
                await self._synced(q[0].ticket)
                continue
            if self._grace and len(q) < self.max_items:
                self._grace = False
            if many is None or len(q) == 1:
                data = self._pop()
                if data is not None:
                    await self._send(data)
                    self.sent_frames += 1
                    self.sent_bytes += len(data)
                continue
            batch: list = []
            size = 0
            while q and q[0].data is not _RESERVED and len(batch) < BATCH_FRAMES and size < BATCH_BYTES and (
                store is None or q[0].ticket <= store.processed
            ):
                data = self._pop()
                if data is not None:
                    batch.append(data)
                    size += len(data)
            if batch:
                await many(batch)
                self.sent_frames += len(batch)
                self.sent_bytes += size

    async def _synced(self, ticket: int) -> None:
        """Until the store committed the writes up to ``ticket`` (or its wait ended): lead, or follow."""
        store, sync = self._store, self._sync
        while ticket > store.processed and not self.closed:
            done = sync.done
            if done is not None and ticket < sync.target:  # needs less than the leader: no waiting for more
                await store.synced(ticket)
                return
            if done is None:
                done = sync.done = asyncio.Event()
                sync.target = ticket
                try:
                    await store.synced(ticket)
                finally:
                    sync.done = None
                    done.set()
                return
            await done.wait()

    def _pop(self) -> Any:
        slot = self._q.popleft()
        if slot.key is not None and self._keyed.get(slot.key) is slot:
            del self._keyed[slot.key]
        self._bytes -= slot.size
        data = slot.data
        if callable(data):  # rendered at send time (coalesced drafts)
            data = data()
        elif isinstance(data, str):
            data = data.encode()
        return data

    async def wait_room(self, limit: int, timeout: float = 60.0) -> None:
        """Wait until at most ``limit`` frames are queued (or the outbox closed, or ``timeout``).

        Reader back-pressure: a front end that answers every inbound frame
        stops reading a client whose own answers pile up, so a burst of
        requests is answered at the pace the client reads them, instead of
        overflowing its outbox in one go.
        """
        if len(self._q) <= limit:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self._q) > limit and not self.closed and loop.time() < deadline:
            await asyncio.sleep(0.005)

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the queue is empty (used before a deliberate close)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._q and not self.closed and loop.time() < deadline:
            await asyncio.sleep(0.005)
