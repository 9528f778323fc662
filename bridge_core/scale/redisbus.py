"""The Redis Streams bus between nodes (``--bus redis://...``; docs/scale-out.md "The bus").

Through redis-py's asyncio client. Events go to one stream, ``<prefix>:events``; a small
Lua script gives each one the next cluster-wide number (``INCR <prefix>:n``) and appends it
in the same atomic step, so stream order and numbers agree on every node. Each node reads
the stream from where it joined and hands every entry, its own included, to ``deliver`` in
stream order (the pattern of Centrifugo's Redis broker). Publishing never awaits: events
queue and one writer task sends what one loop turn queued as **one stream entry** (``b``, a
JSON array of ``["e", event]`` and ``["r", relay]`` items) with the number of its first event
(``n``); its events take consecutive numbers. One entry, one script call and one parse per
batch instead of per event: a Redis round trip per delta was most of a node's CPU at a team's
load (docs/scale-out.md "Performance"). Commands go to the target
node's inbox stream, ``<prefix>:inbox:<node>``. Liveness: each node keeps a key
``<prefix>:node:<id>`` alive with a TTL (``NODE_TTL``), refreshed every ``HEARTBEAT_EVERY``.

Reading resumes from the last entry seen after a lost connection, so a short outage of
Redis loses nothing the stream still holds (it keeps the newest ``MAXLEN`` entries). What a
loss of its keys took unread comes back from its writers, and a command runs once the node
read the stream to its end (``catchup.py``: ``caught_up``).

**The number never goes back** (docs/scale-out.md "The cluster-wide number"). The node keeps
``seen``, the highest number it knows was given, and ``floor``, a reservation above every
number ever given that the core records in the shared store (``cluster.py``). A Redis that
lost its keys (restarted without persistence, flushed, restored from an older snapshot)
numbers at or below ``seen`` again: the append script then sets the counter to ``floor + 1``
and goes on from there, in the same atomic step. At start the counter is raised to
``floor`` when it is missing or below what the store knows was given. Such a loss (or this
node's liveness key found gone at a beat) is noted in ``lost_at``: for a few seconds every
other node's key may be missing too, until its next beat.

**Relays** (``relay(data)``): a front end's own payload in the same stream, in order with the
events, without a number; every other node gets it through ``on_relay(node, data)``.

**Signed entries** (``busauth.py``, which says what is checked; docs/scale-out.md "Signed
entries"): every entry carries a header ``h`` and an HMAC-SHA256 ``m``; the reader applies only
what verifies, is new and comes from a live sender, and counts what it drops (``dropped``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import secrets
from typing import Any, Callable, Optional

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from . import busjoin, buswrite, catchup, sharedread
from .bus import Deliver, OnCommand
from . import readback
from .busauth import KEY_BYTES, LiveNodes, Signer, Verifier, entry_order, fingerprint
from ..model.ids import new_id
from ..model.errors import Unavailable
from ..model.redact import mask_url
from .nodes import HEARTBEAT_EVERY, NODE_TTL
from ..bridge.tasks import TaskSet

log = logging.getLogger("agent_bridge.bus")

MAXLEN = 200_000  # entries the events stream keeps (approximately): the window a node may lag or be away
BATCH = 512  # items per pipeline / entries per read
LINGER = 0.002  # seconds the writer gathers events before it sends them (one entry, one script call)

# ARGV: header, batch, events in it (k), maxlen, seen, floor + 1, MAC. Its events take the k numbers up to
# INCRBY's answer. A first number at or below ``seen`` means the counter went back (Redis lost it):
# numbering restarts above the reservation, and the answer is negative to say so.
_APPEND = """
local k = tonumber(ARGV[3])
local last = redis.call('INCRBY', KEYS[2], k)
local first = last - k + 1
local lost = k > 0 and first <= tonumber(ARGV[5])
if lost then
  first = tonumber(ARGV[6])
  redis.call('SET', KEYS[2], first + k - 1)
end
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[4], '*', 'n', first, 'h', ARGV[1], 'b', ARGV[2], 'm', ARGV[7])
if lost then return -first end
return first
"""
# At start. ARGV: seen, floor. A missing counter, or one below what is known given, is raised to floor.
_RAISE = """
local cur = tonumber(redis.call('GET', KEYS[1]) or '-1')
if cur < tonumber(ARGV[1]) or cur < 0 then
  redis.call('SET', KEYS[1], ARGV[2])
  return {tonumber(ARGV[2]), 1}
end
return {cur, 0}
"""
# A heartbeat that tells whether the key was still there (gone: Redis lost its keys, or this node was
# away longer than its TTL). Its value is this run's epoch (busauth.LiveNodes).
_BEAT = """
local was = redis.call('EXISTS', KEYS[1])
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[1])
return was
"""

# The id of the stream's last entry (nil: no stream): where a node must have read to before a command
# runs (catchup.py: read-your-writes). XINFO's other fields stay in Redis.
_END = """
if redis.call('EXISTS', KEYS[1]) == 0 then return false end
local info = redis.call('XINFO', 'STREAM', KEYS[1])
for i = 1, #info, 2 do
  if info[i] == 'last-generated-id' then return info[i + 1] end
end
return false
"""


class RedisBus:
    def __init__(self, url: str, node_id: str, *, key: bytes, prefix: str = "agent-bridge", ttl: float = NODE_TTL,
                 every: float = HEARTBEAT_EVERY, join_back: float = 0.0):
        if len(key) < KEY_BYTES:
            raise ValueError(f"the cluster key must have {KEY_BYTES} bytes")
        self.url = url
        self.node_id = node_id
        self.epoch = secrets.token_hex(8)  # this run's: in its liveness key and every entry's header
        self.key_fp = fingerprint(key)
        self._signer = Signer(key, node_id, self.epoch)
        self.auth = Verifier(key)
        self.dropped = self.auth.dropped  # entries dropped, by reason (busauth.WHY)
        self.live = LiveNodes(grace=2 * every + 1.0)  # a beat missed and a second: never a live node dropped
        self.prefix = prefix
        self.ttl = ttl
        self.every = every
        self.join_back = join_back  # join this many seconds before the stream's end (cluster.py: joining)
        self.events_key = f"{prefix}:events"
        self.counter_key = f"{prefix}:n"
        self.inbox_key = f"{prefix}:inbox:{node_id}"
        self._r: Optional[aioredis.Redis] = None
        self._out: list[tuple[str, bytes]] = []  # ("e", payload) or (inbox key, payload)
        self._wake = asyncio.Event()
        self._deliver: Optional[Deliver] = None
        self._on_command: Optional[OnCommand] = None
        self.last_event_id = "$"
        self.last_inbox_id = "$"
        self.tasks = TaskSet("bus")
        self._stopping = False
        self.published = 0  # items sent (events, relays, commands)
        self.queued = 0  # items queued to send, ever
        self._sent = asyncio.Event()  # set after each batch sent (flush waits on it)
        self.delivered = 0
        self.seen = 0  # the highest cluster-wide number known given (set from the store before start)
        self.floor = 0  # the reservation above every number given (the store's; cluster.py renews it)
        self.lost_at: Optional[float] = None  # loop time this node last saw Redis lose its keys
        self.on_relay: Optional[OnCommand] = None  # (node, data) of another node's relay
        self._beat: Any = None
        self.alive_until = float("inf")  # monotonic time before which this node's liveness key surely lives (pgstore.alive)
        self._serving = False  # started: beats from now on find the key they set before
        self._learn: dict[str, tuple[int, int]] = {}  # stream -> the last entry id read for its counters only
        self._last_n = 0  # the highest event number delivered, or the join's (busjoin.number_at): a lower one never is
        self._first_n = 0  # the first event number delivered since this node started
        self._join_end: tuple[int, int] = (0, 0)  # the events stream's end when this node joined it (busjoin.join)
        self._last_ts: Any = None  # the latest time of the events delivered (their "ts")
        self._written = catchup.Written()  # this node's last entries in the events stream, as Redis numbered them
        self._gap: Optional[catchup.Gap] = None  # a refetch under way (catchup.py): delivery held meanwhile
        self._read_to = (0, 0)  # the last events stream entry read (its id as (ms, seq))
        self._progress = asyncio.Event()  # set (and replaced) whenever reading moved on
        self._end: Any = None
        self.refetched = 0  # entries the stream lost that their writers gave back (catchup.py)
        self.gone = 0  # events the stream lost that no writer gave back (catchup.Gap.lost)
        self.jumps: collections.deque = collections.deque(maxlen=64)  # (last before, first after) of gaps passed
        self.on_passed: Optional[Callable[[catchup.Gap, list], None]] = None  # a gap passed, what it lost: gone.py
        self.catch_up_wait = catchup.CATCH_UP_WAIT  # s a command waits for this node to read to the end

    def describe(self) -> str:
        return mask_url(self.url)

    async def start(self, deliver: Deliver, on_command: Optional[OnCommand] = None) -> None:
        """Connect (Unavailable when Redis cannot be reached), join the stream at its end, start reading."""
        self._deliver, self._on_command = deliver, on_command
        self._r = aioredis.from_url(self.url, socket_connect_timeout=10, health_check_interval=30)
        try:
            await self._r.ping()
            self._beat = self._r.register_script(_BEAT)
            self._end = sharedread.of_script(self._r.register_script(_END), [self.events_key], self.tasks)
            counter = await self._raise_counter()
            self.last_event_id = await self._join(self.events_key, self.join_back)
            self._last_n, self._last_ts = await busjoin.number_at(  # gaps told from the join on
                self._r, self.events_key, self.counter_key, self.auth.key, self._learn.get(self.events_key), counter)
            self._read_to = entry_order(self.last_event_id)
            self.last_inbox_id = await self._join(self.inbox_key)
            await self._beat_once()
            await self.live_nodes()
        except (RedisError, OSError) as exc:
            await self._r.aclose()
            self._r = None
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise Unavailable(f"cannot reach the bus {self.describe()}: {reason}")
        self.tasks.spawn(self._reader(), name="bus-reader")
        self.tasks.spawn(self._writer(), name="bus-writer")
        self.tasks.spawn(self._heartbeat(), name="bus-heartbeat")
        self._serving = True
        log.info("bus: %s as node %s, entries signed under the cluster key %s", self.describe(), self.node_id,
                 self.key_fp)  # fmt: skip

    async def _join(self, key: str, back: float = 0.0) -> str:
        """Where to read ``key`` from (busjoin.py); what comes before the point delivering starts is read for
        its senders' counters only (``_learn``)."""
        read_from, start, end = await busjoin.join(self._r, key, back)
        if start is not None:
            self._learn[key] = start
        if key == self.events_key:
            self._join_end = end
        return read_from

    async def _raise_counter(self) -> int:
        n, raised = await self._r.register_script(_RAISE)(keys=[self.counter_key], args=[self.seen, self.floor])
        if raised and self.seen > 0:
            log.warning("bus: the cluster-wide number was gone or behind in Redis; it goes on above %d", n)
        self.seen = max(self.seen, int(n))
        return int(n)

    def note_lost(self, what: str) -> None:
        """Redis lost its keys (``what`` showed it): noted, and this node's liveness key set again now."""
        now = asyncio.get_running_loop().time()
        if self.lost_at is None or now - self.lost_at > self.every:
            log.warning("bus: Redis lost its keys (%s); numbering goes on above %d", what, self.floor)
            if self._serving:
                self.tasks.spawn(self._beat_quietly(), name="bus-beat")
        if self._serving and self._gap is None:  # what it had not read went too (maybe nothing; from its join on)
            self._refetch(catchup.OPEN, None, None)  # follows to show the gap (seed 4107): asked for at once
        self.lost_at = now

    def lost_recently(self, within: float) -> bool:
        """Whether Redis lost its keys in the last ``within`` seconds, as far as this node saw."""
        return self.lost_at is not None and asyncio.get_running_loop().time() - self.lost_at < within

    # --- out -----------------------------------------------------------------------------

    def publish(self, data: Any) -> None:
        self._queue("e", b'["e",' + orjson.dumps(data) + b"]")

    def relay(self, data: Any) -> None:
        self._queue("r", b'["r",' + orjson.dumps(data) + b"]")

    def send(self, node: str, data: Any) -> None:
        self._queue(f"{self.prefix}:inbox:{node}", orjson.dumps(data))

    def _queue(self, kind: str, payload: bytes) -> None:
        self._out.append((kind, payload))
        self.queued += 1
        self._wake.set()

    def _pipeline(self, entries: list[tuple]) -> Any:
        """One pipeline for signed ``entries`` (buswrite.py); per command, the body of an entry with events."""
        pipe = self._r.pipeline(transaction=False)
        for key, h, m, body, events in entries:
            if key == self.events_key:
                pipe.eval(_APPEND, 2, key, self.counter_key, h, body, events, MAXLEN, self.seen, self.floor + 1, m)
            else:
                pipe.xadd(key, {"h": h, "b": body, "m": m}, maxlen=10_000, approximate=True)
        return pipe, [body if events else None for _, _, _, body, events in entries]

    async def _writer(self) -> None:
        loop = asyncio.get_running_loop()
        last = 0.0
        while True:
            await self._wake.wait()
            # At most one send per LINGER: an event after a quiet spell goes at once (one loop turn
            # to gather its siblings), while under load what comes in the meantime goes in the same
            # entry, as Centrifugo's Redis broker batches its publishes: a few ms of latency for a
            # fraction of the CPU (docs/scale-out.md "Performance").
            wait = last + LINGER - loop.time()
            await asyncio.sleep(wait if wait > 0 else 0)
            last = loop.time()
            self._wake.clear()
            batch, self._out = self._out[:BATCH], self._out[BATCH:]
            if self._out:
                self._wake.set()  # more than one batch queued: the next goes after this one
            entries, signed, again = None, 0.0, False
            while batch:
                try:
                    if entries is None or loop.time() - signed > buswrite.RESIGN_AFTER:
                        entries = buswrite.signed_entries(self._signer.sign, self.events_key, batch)
                        signed = loop.time()
                    pipe, bodies = self._pipeline(entries)
                    results = await pipe.execute()
                    self.published += len(batch)
                    self._sent.set()
                    for r, body in zip(results, bodies):  # (sent again: a refetch must not give a copy twice)
                        if body is not None and type(r) is int and not again:
                            self._written.add(abs(r), body)  # what a node that lost it may ask for
                    if any(type(r) is int and r < 0 for r in results):
                        self.note_lost("its counter went back")
                    break
                except (RedisError, OSError) as exc:  # Redis away: keep the batch, try again
                    again = True
                    log.warning("bus: publishing failed (%s); retrying", exc)
                    await asyncio.sleep(0.5)

    # --- in ------------------------------------------------------------------------------

    async def _reader(self) -> None:
        r = self._r
        while True:
            try:
                # the inbox first: a command (a refetch among them) is not kept behind a batch of events
                got = await r.xread({self.inbox_key: self.last_inbox_id, self.events_key: self.last_event_id},
                                    count=BATCH, block=1000)  # fmt: skip
            except (RedisError, OSError) as exc:
                if self._stopping:
                    return
                log.warning("bus: reading failed (%s); resuming from %s", exc, self.last_event_id)
                await asyncio.sleep(0.5)
                continue
            for key, entries in got or ():
                key = key.decode() if isinstance(key, bytes) else key
                events = key == self.events_key
                for entry_id, fields in entries:
                    if events:
                        self.last_event_id = entry_id.decode()
                    else:
                        self.last_inbox_id = entry_id.decode()
                    who = self.auth.check(key, entry_id, fields)
                    if who is None or busjoin.learning(self._learn, key, entry_id):
                        continue
                    live = self._live_now(*who)
                    if live is None:
                        live = await self._ask_live(*who)
                    if not live:
                        self.auth.drop("not_live", f"from node {who[0]!r}")
                        if events and not self._first_n and self._gap is None:  # the join's window: passed over
                            self._last_n, self._last_ts = busjoin.passed(
                                fields, entry_id, self._join_end, self._last_n, self._last_ts)
                    elif events:
                        self._deliver_one(who[0], fields)
                    else:
                        self._command_one(who[0], fields)
                if events and entries:
                    self._read_to = entry_order(self.last_event_id)
                    self._moved_on()

    def _live_now(self, node: str, epoch: str) -> Optional[bool]:
        """Whether the sender is live as far as this node knows (None: its key must be looked up)."""
        if node == self.node_id:
            return epoch == self.epoch
        return True if self.live.known(node, epoch, asyncio.get_running_loop().time()) else None

    async def _ask_live(self, node: str, epoch: str) -> bool:
        """A sender not confirmed lately: its liveness key read (at most twice a second per node).
        While Redis lost its keys lately (this node's own key gone too) nobody's liveness can be
        told, and a genuine entry counts, as no node is taken for dead then (cluster.py)."""
        now = asyncio.get_running_loop().time()
        if self.live.may_ask(node, now):
            try:
                theirs, mine = await self._r.mget([f"{self.prefix}:node:{node}", f"{self.prefix}:node:{self.node_id}"])
            except (RedisError, OSError):
                theirs, mine = None, b""
            if theirs is not None:
                self.live.confirm(node, theirs.decode(), now)
            elif mine is None:
                self.note_lost("this node's liveness key was gone")
            if self.live.known(node, epoch, now):
                return True
        return self.lost_recently(self.live.grace)

    def _deliver_one(self, node: str, fields: dict) -> None:
        """One stream entry: a batch of events (consecutive numbers from ``n``) and relays; held while
        a refetch is under way, and one numbered above the next number expected starts one."""
        if self._gap is not None:
            self._gap.held.append((node, fields))
            return
        try:
            n = int(fields[b"n"])
            items = orjson.loads(fields[b"b"])
        except (KeyError, ValueError):
            items = None
        if type(items) is not list:
            self.auth.drop("unreadable", f"from node {node!r}")
            return
        has_events = any(type(i) is list and i[:1] == ["e"] for i in items)
        if n <= self._last_n and has_events:
            self.auth.drop("renumbered", f"from node {node!r}")
            return
        if has_events and n > self._last_n + 1 and self._serving:  # (from the join's number on: busjoin.py)
            self._refetch(n, node, fields)
            self._gap.t_hi = catchup.first_ts(items)
            return
        self._deliver_items(node, n, items)

    def _deliver_items(self, node: str, n: int, items: list) -> None:
        for item in items:
            try:
                kind, data = item
            except (TypeError, ValueError):
                log.warning("bus: dropping an unreadable item of entry %d", n)
                continue
            if kind == "r":
                self._relay_one(node, data)
                continue
            self.delivered += 1
            if not self._first_n:
                self._first_n = n
            self._last_n = n
            if n > self.seen:
                self.seen = n
            ts = data.get("ts") if type(data) is dict else None
            if type(ts) is float and (self._last_ts is None or ts > self._last_ts):
                self._last_ts = ts
            if self._deliver is not None:
                try:
                    self._deliver(n, node, data)
                except Exception:  # one bad event never stops the reader
                    log.exception("bus: delivering event %d failed", n)
            n += 1

    # --- catching up (catchup.py) ----------------------------------------------------------

    def _refetch(self, n: int, node: Optional[str], fields: Optional[dict]) -> None:
        """Entry ``n`` came for ``_last_n + 1`` (``catchup.OPEN``: Redis lost its keys): held, the gap asked for."""
        gap = self._gap = catchup.Gap(new_id(), self._last_n, n, self._last_ts)
        gap.held.extend([(node, fields)] if fields is not None else [])
        gap.add(self.node_id, [[n, orjson.loads(body)] for n, body in self._written.between(gap.lo, gap.hi)])
        self.tasks.spawn(self._fill(gap), name="bus-refetch")

    async def _fill(self, gap: catchup.Gap) -> None:
        try:  # a loss of Redis's keys took the liveness keys too: whoever was live a moment ago is asked
            others = set(await self.live_nodes())
        except (RedisError, OSError):
            others = set()
        others.update(self.live.recent(asyncio.get_running_loop().time()))
        others.discard(self.node_id)
        gap.asked.update(others)
        for node in others:
            self.send(node, {"bus": "refetch", "id": gap.rid, "lo": gap.lo, "hi": gap.hi})
        try:
            async with asyncio.timeout(catchup.REFETCH_WAIT):
                while not gap.complete():
                    await self._progress.wait()
        except TimeoutError:
            log.warning("bus: no answer from %s about the entries numbered %d to %d", sorted(gap.asked - gap.answered),
                        gap.lo + 1, gap.hi - 1)  # fmt: skip
        self._gap_over(gap)

    def _gap_over(self, gap: catchup.Gap) -> None:
        """The entries found delivered in number order, then those held (which may start another gap)."""
        if self._gap is not gap:
            return
        self._gap = None
        gap.shown()  # an open gap: where it ends, if an entry read meanwhile showed it
        found, lost = gap.recovered(), gap.lost()
        (log.warning if found else log.info)("bus: event %s came after %d: %d entries in between came back from their "
                                             "writers", "-" if gap.open else gap.hi, gap.lo, len(found))  # fmt: skip
        self.refetched += len(found)
        if lost:  # events known given that no writer kept any longer: said, and counted
            self.gone += sum(last - first + 1 for first, last in lost)
            log.warning("bus: events %s came back from no node: gone for good", catchup.spans(lost))
        self.jumps.append((gap.lo, gap.hi))
        if self.on_passed is not None:  # before what follows is delivered (Cluster: gone.py; it logs its own errors)
            self.on_passed(gap, lost)
        for n, node, items in found:
            if type(items) is list:
                self._deliver_items(node, n, items)
        self._last_n = max(self._last_n, gap.known()[0] if gap.open else gap.hi - 1)  # the rest is gone for good
        held = gap.held
        while held:
            node, fields = held.popleft()
            self._deliver_one(node, fields)
            if self._gap is not None:  # another gap: what is left waits for it
                self._gap.held.extend(held)
                break
        self._moved_on()

    def _bus_command(self, sender: str, data: dict) -> None:
        """The bus's own commands between nodes: a refetch asked (answered from ``Written``), or answered."""
        if data.get("bus") == "refetch":
            lo, hi, rid = data.get("lo"), data.get("hi"), data.get("id")
            if type(lo) is int and type(hi) is int and type(rid) is str:
                seen = catchup.seen_below(hi, self._first_n, self._last_n, self.jumps)
                self._queue(f"{self.prefix}:inbox:{sender}", catchup.answer(rid, self._written.between(lo, hi), seen))
        elif data.get("bus") == "refetched":
            gap = self._gap
            if gap is not None and data.get("id") == gap.rid:
                gap.add(sender, data.get("entries"), data.get("seen"))
                self._moved_on()

    def _moved_on(self) -> None:
        self._progress.set()
        self._progress = asyncio.Event()

    async def caught_up(self, timeout: Optional[float] = None) -> None:
        """Return once this node has read (and delivered) the events stream up to where it ends now;
        ``Unavailable`` when it cannot within ``timeout`` (default ``catch_up_wait``). With Redis
        unreachable, at once: nothing newer can be read then (what this node holds is all there is to go on)."""
        if self._r is None or not self._serving:
            return
        try:
            end = await self._end()
        except (RedisError, OSError):
            return
        target = entry_order(end) if end else None
        try:
            async with asyncio.timeout(self.catch_up_wait if timeout is None else timeout):
                while self._gap is not None or (target is not None and self._read_to < target):
                    await self._progress.wait()
        except TimeoutError:
            raise Unavailable("This node is catching up with the others; try again") from None

    def _relay_one(self, node: str, data: Any) -> None:
        try:
            if node != self.node_id and self.on_relay is not None:
                self.on_relay(node, data)
        except Exception:  # one bad relay never stops the reader
            log.exception("bus: a relay from %s failed", node)

    def _command_one(self, sender: str, fields: dict) -> None:
        try:
            data = orjson.loads(fields[b"b"])
        except ValueError:
            self.auth.drop("unreadable", f"from node {sender!r}")
            return
        if type(data) is dict and "bus" in data:
            self._bus_command(sender, data)
            return
        if self._on_command is not None:
            try:
                self._on_command(sender, data)
            except Exception:
                log.exception("bus: a command from %s failed", sender)

    # --- liveness ------------------------------------------------------------------------

    async def _beat_once(self) -> None:
        sent = asyncio.get_running_loop().time()  # time.monotonic(): the key set now lives ttl from (at least) then
        was = await self._beat(keys=[f"{self.prefix}:node:{self.node_id}"], args=[int(self.ttl * 1000), self.epoch])
        self.alive_until = sent + self.ttl
        if not was and self._serving:  # (the first beat, at start, finds no key of course)
            self.note_lost("this node's liveness key was gone")

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            await self._beat_quietly()
            try:
                await self.live_nodes()  # every node's epoch confirmed (LiveNodes)
            except (RedisError, OSError) as exc:
                log.warning("bus: reading the liveness keys failed (%s)", exc)

    async def _beat_quietly(self) -> None:
        try:
            await self._beat_once()
        except (RedisError, OSError) as exc:
            log.warning("bus: heartbeat failed (%s)", exc)

    async def newest(self, needle: bytes, match: Any, back: float) -> Any:  # readback.py
        return await readback.newest(self._r, self.events_key, self.auth.key, needle, match, back)

    async def live_nodes(self) -> list[str]:
        """The nodes whose heartbeat key has not expired (their epochs noted: ``live``)."""
        head = f"{self.prefix}:node:"
        keys = [key async for key in self._r.scan_iter(match=head + "*", count=100)]
        values = await self._r.mget(keys) if keys else []
        now = asyncio.get_running_loop().time()
        out = []
        for key, value in zip(keys, values):
            if value is None:  # expired since the scan
                continue
            node = (key.decode() if isinstance(key, bytes) else key)[len(head):]
            self.live.confirm(node, value.decode() if isinstance(value, bytes) else value, now)
            out.append(node)
        return sorted(out)

    async def flush(self, timeout: float = 10.0, warn: bool = True) -> None:
        """Wait until everything published so far has been sent (a command's answer, tests, shutdown)."""
        target = self.queued
        if self.published >= target:
            return
        try:
            async with asyncio.timeout(timeout):
                while self.published < target and self._r is not None:
                    self._sent.clear()
                    await self._sent.wait()
        except TimeoutError:
            if warn:
                log.warning("bus: %d queued items not sent within %g s", target - self.published, timeout)

    async def stop(self) -> None:
        """A clean stop: what is queued is sent, the heartbeat key goes (others see this node gone at once)."""
        if self._r is None:
            return
        await self.flush()
        self._stopping = True
        await self.tasks.close()
        try:
            await self._r.delete(f"{self.prefix}:node:{self.node_id}")
        except (RedisError, OSError):
            pass
        await self._r.aclose()
        self._r = None

    async def kill(self) -> None:
        """Stop as a crash would (tests): no flush, the heartbeat key left to expire."""
        self._stopping = True
        await self.tasks.close()
        if self._r is not None:
            await self._r.aclose()
            self._r = None
