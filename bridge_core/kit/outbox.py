"""Bounded per-connection outboxes: bytes in, bytes out (the socket kit).

A front end renders an event once (the hub calls it: ``bridge_core/bridge/hub.py``) and
puts the same bytes into the outbox of every connection. An ``Outbox`` is a short queue
of one connection's frames. It never writes from ``put``: a frame put into an empty
queue schedules a flush, and whatever is put until that flush runs leaves with it, in
one transport write per connection (at most ``BATCH_FRAMES`` frames and about
``BATCH_BYTES``; more go out in further writes of the same flush):

- a frame that does not wait for the store is flushed at the end of the
  loop's turn, once the turn's callbacks are done and before the loop waits
  for I/O (``_Soon``: one callback for every connection with frames, run by
  ``looping.TurnSelector``; on a loop without it, a host's own, at the next
  turn), so an event's fan-out, a burst of replies or the drafts due at one
  tick cost each connection one write, and no turn of the loop is added;
- a frame behind the durability barrier (the store's writes queued before
  it have not committed) is flushed when they have: the connections held by
  one store wait for its commits together (``_Barrier``: one waiter, one
  wake of the loop per commit, every held connection written from it).

A flush writes synchronously while the peer keeps up (the sender's
``sync``: aiohttp's flow control has not paused it); otherwise it hands
the write to the connection's writer task (``run``), which waits out the
flow control. What a sender can do is declared (``Sender``), never guessed.
Items are bytes (or str), rendered by the front end before they are put:
the outbox never calls back into a front end to render one. Items can carry
a coalescing key: a newer item with the same key replaces an unsent older
one in place (Pheby's cumulative drafts: latest wins), and ``drop`` forgets
an unsent one (a draft its message's end made stale). A client whose
outbox overflows is disconnected through ``on_overflow``; it recovers by
replay or snapshot. It is never waited for.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import inspect
import logging
import weakref
from typing import Any, Awaitable, Callable, Hashable, Optional, Protocol, Union

from .looping import end_of_turn

log = logging.getLogger("agent_bridge.hub")  # the name its log lines have always had

BATCH_FRAMES = 256
BATCH_BYTES = 64 * 1024  # one transport write; a larger one is one long send syscall that stalls the loop


class SyncWriter(Protocol):
    """A sender's synchronous path (``aiohttp_compat.FrameWriter``): batched writes while the peer keeps up."""

    def ready(self) -> bool: ...  # a synchronous write is possible now (no flow control)
    def write(self, frames: list) -> None: ...  # ``frames`` (bytes) in one transport write
    def write_one(self, data: bytes) -> bool: ...  # one frame if ``ready``; False (nothing written) otherwise


class DurableStore(Protocol):
    """The store whose writes a connection's frames wait for (``bridge_core/bridge/store.py``)."""

    ticket: int  # the last write queued with the barrier
    processed: int  # the last write committed

    async def synced(self, upto: Optional[int] = None) -> None: ...  # once the writes up to ``upto`` committed


class Sender(Protocol):
    """What an Outbox writes through, each capability declared (``None`` when the sender lacks it):
    ``frontend.ws_text_sender`` for a WebSocket; a bare coroutine function is a ``plain_sender``."""

    sync: Optional[SyncWriter]  # synchronous batched writes while the peer keeps up
    many: Optional[Callable[[list], Awaitable[None]]]  # one write of a batch, waiting out flow control

    async def __call__(self, data: bytes) -> None: ...  # one frame, waiting out flow control
    def durable_store(self) -> Optional[DurableStore]: ...  # frames wait for its commits (or None)


class plain_sender:
    """A coroutine function as a ``Sender``: one frame at a time, no synchronous path, no store."""

    __slots__ = ("_send",)
    sync = None
    many = None

    def __init__(self, send: Callable[[bytes], Awaitable[None]]):
        self._send = send

    async def __call__(self, data: bytes) -> None:
        await self._send(data)

    def durable_store(self) -> None:
        return None


_RESERVED = object()  # a slot's data until its reply is filled in (Outbox.reserve)


_new_slot = object.__new__


class _Slot:
    __slots__ = ("data", "key", "size", "ticket")

    def __init__(self, data: Any, key: Optional[Hashable], size: int, ticket: int = 0):
        self.data = data  # bytes or str; None: nothing to send (an empty reply, a dropped item); or _RESERVED
        self.key = key
        self.size = size
        self.ticket = ticket  # the store's ticket when queued: it leaves once the writes up to it committed


class _Soon:
    """The outboxes to flush at the end of the loop's turn: one callback for all of them.

    Everything put during one turn of the loop (an event's fan-out, a burst
    of replies, the drafts due at one tick) leaves in one write per
    connection when the turn's callbacks are done (``looping.TurnSelector``),
    or, on a loop without that hook, at the next turn (``call_soon``).
    """

    __slots__ = ("loop", "boxes", "due", "at_end", "__weakref__")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.boxes: list["Outbox"] = []
        self.due = False  # a flush is scheduled
        selector = end_of_turn(loop)
        self.at_end = selector.at_end if selector is not None else None

    def add(self, box: "Outbox") -> None:
        self.boxes.append(box)
        if not self.due:
            self.due = True
            if self.at_end is not None:
                self.at_end(self.run)
            else:
                self.loop.call_soon(self.run)

    def run(self) -> None:
        self.due = False
        boxes, self.boxes = self.boxes, []
        for box in boxes:
            box._drive_safely()


class _Barrier:
    """The outboxes whose next frame waits for one store's commits, released together.

    One of them (the leader: its writer task) awaits ``store.synced`` for the
    smallest ticket held; when it returns, every held outbox is flushed from
    that one wake-up (written at once, or held again for a later commit), so
    a commit costs one wake of the loop, not one per connection. An outbox
    that needs an earlier commit than the one the leader waits for waits
    for it on its own writer task.
    """

    __slots__ = ("store", "held", "leader", "target", "__weakref__")

    def __init__(self, store: Any) -> None:
        self.store = store
        self.held: list["Outbox"] = []
        self.leader: Optional["Outbox"] = None
        self.target = 0  # the ticket the leader waits for

    def hold(self, box: "Outbox", ticket: int) -> None:
        if self.leader is not None and ticket < self.target:
            box._wait_alone(ticket)
            return
        self.held.append(box)
        if self.leader is None:
            self.leader = box
            box._go_lead()

    async def lead(self, box: "Outbox") -> None:
        """The leader's writer task: wait for the store, release what it committed, until nothing is held."""
        store = self.store
        try:
            while True:
                target = 0
                for b in self.held:
                    if b._q and not b.closed:
                        t = b._q[0].ticket
                        if not target or t < target:
                            target = t
                if not target:
                    return
                self.target = target
                if target > store.processed:
                    await store.synced(target)
                held, self.held = self.held, []
                for b in held:
                    b._drive_safely()  # written, or held again (back in self.held)
                if box._task == _SEND:  # its own peer fell behind: its task must wait on it, another leads
                    return
        finally:
            if self.leader is box:
                self.step_down(box)

    def step_down(self, box: "Outbox") -> None:
        """``box`` leads no more (done, closed or cancelled): another held outbox's writer task takes over."""
        self.leader = None
        self.target = 0
        for b in self.held:
            if b is not box and not b.closed:
                self.leader = b
                b._go_lead()
                return
        self.held = [b for b in self.held if not b.closed]


_BARRIERS: "weakref.WeakKeyDictionary[Any, _Barrier]" = weakref.WeakKeyDictionary()
_SOONS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Soon]" = weakref.WeakKeyDictionary()


def _barrier_for(store: Any) -> _Barrier:
    try:
        barrier = _BARRIERS.get(store)
        if barrier is None:
            barrier = _BARRIERS[store] = _Barrier(store)
        return barrier
    except TypeError:  # a store that takes no weak reference: a barrier of its own per outbox
        return _Barrier(store)


def _soon_for(loop: asyncio.AbstractEventLoop) -> _Soon:
    soon = _SOONS.get(loop)
    if soon is None:
        soon = _SOONS[loop] = _Soon(loop)
    return soon


class Outbox:
    """A bounded, coalescing queue of frames for one connection (module docstring: when it writes)."""

    def __init__(
        self,
        send: Union[Sender, Callable[[bytes], Awaitable[None]]],
        *,
        max_items: int = 2048,
        max_bytes: int = 16 * 1024 * 1024,
        on_overflow: Optional[Callable[[], None]] = None,
    ) -> None:
        if inspect.iscoroutinefunction(send):  # a bare coroutine function: no capability but the write itself
            send = plain_sender(send)
        self._send = send
        self._q: collections.deque[_Slot] = collections.deque()
        self._keyed: dict[Hashable, _Slot] = {}
        self._bytes = 0
        self.max_items = max_items
        self.max_bytes = max_bytes
        self._on_overflow = on_overflow
        self._sync = send.sync  # synchronous batched writes while the peer keeps up
        self._many = send.many
        # a flush is coming (queued for the end of the turn, held by the barrier, waiting for a reserved reply,
        # or handed to the writer task); without one the queue is empty and a put schedules one
        self._pending = False
        self._soon: Optional[_Soon] = None
        self._go = asyncio.Event()  # the writer task has a step to take (_task)
        self._task = 0  # its step: _SEND (write and wait for the peer), _LEAD (the barrier), _ALONE (own wait)
        self._alone = 0  # the ticket an _ALONE wait is for
        self.closed = False
        self.overflowed = False
        # frames held back by the durability barrier (Store.synced) are the server's delay, not the
        # client's: max_items counts only the frames the client is late for (_late): those the barrier let go
        # while its peer does not take what is written; max_bytes bounds all
        self._grace = False
        self._store = send.durable_store()  # see frontend.ws_text_sender
        self._barrier = _barrier_for(self._store) if self._store is not None else None
        self.sent_frames = 0
        self.sent_bytes = 0
        self.writes = 0
        self._counts = getattr(send, "counts", None)  # its front end's (frontend.FrontEndCounts): frames written

    def __len__(self) -> int:
        return len(self._q)

    def put(self, data: Union[bytes, str], key: Optional[Hashable] = None) -> bool:
        """Queue ``data`` (bytes or str); False when the connection is closed or overflowed."""
        if self.closed:
            return False
        size = len(data)
        store = self._store
        ticket = store.ticket if store is not None else 0
        if key is not None:
            slot = self._keyed.get(key)
            if slot is not None:
                self._bytes += size - slot.size
                slot.data = data
                slot.size = size
                slot.ticket = ticket
                return True
        n = len(self._q)
        if (n >= self.max_items and self._late() >= self.max_items) or self._bytes + size > self.max_bytes:
            self.overflowed = True
            self.close()
            if self._on_overflow is not None:
                try:
                    self._on_overflow()
                except Exception:
                    log.exception("overflow handler failed")
            return False
        # _Slot(data, key, size, ticket) without its __init__'s frame (once per frame per connection)
        slot = _new_slot(_Slot)
        slot.data = data
        slot.key = key
        slot.size = size
        slot.ticket = ticket
        self._q.append(slot)
        if key is not None:
            self._keyed[key] = slot
        self._bytes += size
        if not self._pending:  # the queue was empty: this frame is its head
            self._pending = True
            if store is not None and ticket > store.processed:
                self._grace = True
                self._barrier.hold(self, ticket)  # type: ignore[union-attr]
            elif self._soon is not None:
                self._soon.add(self)  # _flush_soon, once the loop is known
            else:
                self._flush_soon()
        return True

    def drop(self, key: Hashable) -> None:
        """Forget the unsent item queued under ``key``, if any (its place stays, empty: nothing is sent)."""
        slot = self._keyed.pop(key, None)
        if slot is not None:
            self._bytes -= slot.size
            slot.data = None
            slot.size = 0

    def _flush_soon(self) -> None:
        soon = self._soon
        if soon is None:
            try:
                soon = self._soon = _soon_for(asyncio.get_running_loop())
            except RuntimeError:  # no loop runs yet: the writer task flushes when it starts
                self._pending = False
                return
        soon.add(self)

    def reserve(self) -> Optional[_Slot]:
        """Hold the next place in the queue for a reply not computed yet (None when closed).

        A request's own reply goes out before the broadcasts it causes: the
        front end reserves the reply's place when it starts executing the
        request, the broadcasts queue behind it, and nothing is written past
        the reservation until ``fill`` puts the reply (or nothing) there.
        """
        if self.closed:
            return None
        slot = _Slot(_RESERVED, None, 0)
        self._q.append(slot)
        if not self._pending:
            self._pending = True  # fill() flushes
        return slot

    def fill(self, slot: Optional[_Slot], data: Any) -> None:
        """Put the reply (bytes or str; None for no reply) into its reserved place."""
        if slot is None or slot.data is not _RESERVED:
            return
        slot.data = data
        if data is not None and not self.closed:
            slot.size = len(data)
            self._bytes += slot.size
            slot.ticket = self._store.ticket if self._store is not None else 0
        if not self.closed and self._q and self._q[0] is slot:
            self._flush_soon()  # the flush that waited for this reply

    def _late(self) -> int:
        """How many queued frames the client is late for: none while its peer takes what is written
        (the queue is then the server's own, and the next flush writes it; the store's writer thread
        may have committed thousands of frames a busy loop has not flushed yet), else those the
        durability barrier let go (tickets grow along the queue; a keyed replacement moves one up:
        at worst it counts as held)."""
        sync = self._sync
        if sync is not None and sync.ready():
            return 0
        store = self._store
        if store is None:
            return len(self._q)
        return bisect.bisect_right(self._q, store.processed, key=lambda slot: slot.ticket)

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
        self._go.set()

    # --- flushing ------------------------------------------------------------------------------

    def _drive_safely(self) -> None:
        try:
            self._drive()
        except ConnectionError:  # the peer is gone: its handler sees the close and cleans up
            self.close()
        except Exception:
            log.exception("outbox flush failed")
            self.close()

    def _drive(self) -> None:
        """Write what may leave now; else arrange the flush that will (this is the only one running)."""
        q = self._q
        store = self._store
        sync = self._sync
        while q and not self.closed:
            head = q[0]
            if head.data is _RESERVED:
                return  # fill() flushes
            if store is not None and head.ticket > store.processed:
                # durable before delivered: the head leaves once the writes queued before it committed
                self._grace = True
                self._barrier.hold(self, head.ticket)  # type: ignore[union-attr]
                return
            if self._grace and len(q) < self.max_items:
                self._grace = False
            if (len(q) == 1 and head.key is None and type(head.data) is bytes and sync is not None
                    and sync.write_one(head.data)):
                # the common flush at a run's pace: one frame, written as it is (no batch built); _sent inlined
                q.popleft()
                size = head.size
                self._bytes -= size
                self.writes += 1
                self.sent_frames += 1
                self.sent_bytes += size
                if self._counts is not None:
                    self._counts.frames_sent += 1
                continue
            if sync is None or not sync.ready():
                self._go_send()  # the writer task writes and waits for the peer (flow control)
                return
            batch, size = self._take()
            if batch:
                sync.write(batch)
                self._sent(len(batch), size)
        self._pending = False

    def _sent(self, frames: int, size: int) -> None:
        """One write of ``frames`` frames, ``size`` bytes, done."""
        self.writes += 1
        self.sent_frames += frames
        self.sent_bytes += size
        if self._counts is not None:
            self._counts.frames_sent += frames

    def _take(self, most: int = BATCH_FRAMES) -> tuple[list, int]:
        """The frames at the head that may leave now, at most ``most`` and about BATCH_BYTES."""
        q = self._q
        keyed = self._keyed
        store = self._store
        processed = store.processed if store is not None else 0
        batch: list = []
        size = 0
        while q and size < BATCH_BYTES and len(batch) < most:
            slot = q[0]
            data = slot.data
            if data is _RESERVED or (store is not None and slot.ticket > processed):
                break
            q.popleft()
            key = slot.key
            if key is not None and keyed.get(key) is slot:
                del keyed[key]
            self._bytes -= slot.size
            if type(data) is not bytes:
                if data is None:  # nothing to send (a reply slot filled with no reply, or a dropped item)
                    continue
                data = data.encode()
            batch.append(data)
            size += len(data)
        return batch, size

    def _go_send(self) -> None:
        self._task = _SEND
        self._go.set()

    def _go_lead(self) -> None:
        self._task = _LEAD
        self._go.set()

    def _wait_alone(self, ticket: int) -> None:
        self._task = _ALONE
        self._alone = ticket
        self._go.set()

    async def run(self) -> None:
        """The writer task: the steps a flush cannot take synchronously, until the outbox closes.

        It writes when the peer has fallen behind (or the sender has no
        synchronous path), waiting out the flow control, and it waits for the
        store when the durability barrier holds frames. A peer that is gone
        (the transport is closing or reset) ends the loop quietly: the
        connection's handler sees the close and cleans up.
        """
        try:
            await self._run()
        except ConnectionError:
            self.close()

    async def _run(self) -> None:
        try:
            await self._steps()
        finally:  # closed, reset or cancelled: if it leads the barrier's wait, another outbox takes over
            barrier = self._barrier
            if barrier is not None and barrier.leader is self:
                barrier.step_down(self)

    async def _steps(self) -> None:
        go = self._go
        if self._q and not self._pending:  # put before the loop ran
            self._pending = True
            self._flush_soon()
        while True:
            await go.wait()
            go.clear()
            if self.closed:
                return
            task, self._task = self._task, 0
            if task == _LEAD:
                await self._barrier.lead(self)  # type: ignore[union-attr]
            elif task == _ALONE:
                await self._store.synced(self._alone)
                self._drive()
            elif task == _SEND:
                if self._many is not None:
                    batch, size = self._take()
                    if batch:
                        await self._many(batch)
                else:  # one frame at a time: what is queued is what has not been sent
                    batch, size = self._take(1)
                    if batch:
                        await self._send(batch[0])
                if batch:
                    self._sent(len(batch), size)
                self._drive()

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


_SEND, _LEAD, _ALONE = 1, 2, 3  # the writer task's steps
