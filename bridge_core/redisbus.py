"""The Redis Streams bus between nodes (``--bus redis://...``; docs/scale-out.md "The bus").

Through redis-py's asyncio client. Events go to one stream, ``<prefix>:events``; a small
Lua script gives each one the next cluster-wide number (``INCR <prefix>:n``) and appends it
in the same atomic step, so stream order and numbers agree on every node. Each node reads
the stream from where it joined and hands every entry, its own included, to ``deliver`` in
stream order (the pattern of Centrifugo's Redis broker). Publishing never awaits: entries
queue and one writer task sends what is queued as one pipeline. Commands go to the target
node's inbox stream, ``<prefix>:inbox:<node>``. Liveness: each node keeps a key
``<prefix>:node:<id>`` alive with a TTL (``NODE_TTL``), refreshed every ``HEARTBEAT_EVERY``.

Reading resumes from the last entry seen after a lost connection, so a short outage of
Redis loses nothing the stream still holds (it keeps the newest ``MAXLEN`` entries).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

import orjson
import redis.asyncio as aioredis
from redis.exceptions import RedisError

from .bus import Deliver, OnCommand
from .errors import Unavailable
from .nodes import HEARTBEAT_EVERY, NODE_TTL
from .store import redact_url
from .tasks import TaskSet

log = logging.getLogger("agent_bridge.bus")

MAXLEN = 200_000  # entries the events stream keeps (approximately): the window a node may lag or be away
BATCH = 512  # entries per pipeline / per read

_APPEND = """
local n = redis.call('INCR', KEYS[2])
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[3], '*', 'n', n, 'node', ARGV[1], 'e', ARGV[2])
return n
"""


class RedisBus:
    def __init__(self, url: str, node_id: str, *, prefix: str = "agent-bridge", ttl: float = NODE_TTL,
                 every: float = HEARTBEAT_EVERY, join_back: float = 0.0):
        self.url = url
        self.node_id = node_id
        self.prefix = prefix
        self.ttl = ttl
        self.every = every
        self.join_back = join_back  # join this many seconds before the stream's end (cluster.py: joining)
        self.events_key = f"{prefix}:events"
        self.counter_key = f"{prefix}:n"
        self.inbox_key = f"{prefix}:inbox:{node_id}"
        self._r: Optional[aioredis.Redis] = None
        self._script: Any = None
        self._out: list[tuple[str, bytes]] = []  # ("e", payload) or (inbox key, payload)
        self._wake = asyncio.Event()
        self._deliver: Optional[Deliver] = None
        self._on_command: Optional[OnCommand] = None
        self.last_event_id = "$"
        self.last_inbox_id = "$"
        self.tasks = TaskSet("bus")
        self._stopping = False
        self.published = 0
        self.delivered = 0

    def describe(self) -> str:
        return redact_url(self.url)

    async def start(self, deliver: Deliver, on_command: Optional[OnCommand] = None) -> None:
        """Connect (Unavailable when Redis cannot be reached), join the stream at its end, start reading."""
        self._deliver, self._on_command = deliver, on_command
        self._r = aioredis.from_url(self.url, socket_connect_timeout=10, health_check_interval=30)
        try:
            await self._r.ping()
            self._script = self._r.register_script(_APPEND)
            self.last_event_id = await self._end_id(self.events_key, self.join_back)
            self.last_inbox_id = await self._end_id(self.inbox_key)
            await self._beat_once()
        except (RedisError, OSError) as exc:
            await self._r.aclose()
            self._r = None
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise Unavailable(f"cannot reach the bus {self.describe()}: {reason}")
        self.tasks.spawn(self._reader(), name="bus-reader")
        self.tasks.spawn(self._writer(), name="bus-writer")
        self.tasks.spawn(self._heartbeat(), name="bus-heartbeat")

    async def _end_id(self, key: str, back: float = 0.0) -> str:
        """The id of ``key``'s last entry, or (``back`` > 0) the id ``back`` seconds before it
        (entry ids are the Redis server's milliseconds: no clock of ours is involved)."""
        last = await self._r.xrevrange(key, count=1)
        if not last:
            return "0-0"
        end = last[0][0].decode()
        if back <= 0:
            return end
        ms = int(end.split("-", 1)[0]) - int(back * 1000)
        return f"{max(0, ms)}-0"

    # --- out -----------------------------------------------------------------------------

    def publish(self, data: Any) -> None:
        self._out.append(("e", orjson.dumps(data)))
        self._wake.set()

    def send(self, node: str, data: Any) -> None:
        self._out.append((f"{self.prefix}:inbox:{node}", orjson.dumps({"from": self.node_id, "c": data})))
        self._wake.set()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._out:
                batch, self._out = self._out[:BATCH], self._out[BATCH:]
                while True:
                    try:
                        pipe = self._r.pipeline(transaction=False)
                        for kind, payload in batch:
                            if kind == "e":
                                await self._script(keys=[self.events_key, self.counter_key],
                                                   args=[self.node_id, payload, MAXLEN], client=pipe)  # fmt: skip
                            else:
                                pipe.xadd(kind, {"c": payload}, maxlen=10_000, approximate=True)
                        await pipe.execute()
                        self.published += len(batch)
                        break
                    except (RedisError, OSError) as exc:  # Redis away: keep the batch, try again
                        log.warning("bus: publishing failed (%s); retrying", exc)
                        await asyncio.sleep(0.5)

    # --- in ------------------------------------------------------------------------------

    async def _reader(self) -> None:
        r = self._r
        while True:
            try:
                got = await r.xread({self.events_key: self.last_event_id, self.inbox_key: self.last_inbox_id},
                                    count=BATCH, block=1000)  # fmt: skip
            except (RedisError, OSError) as exc:
                if self._stopping:
                    return
                log.warning("bus: reading failed (%s); resuming from %s", exc, self.last_event_id)
                await asyncio.sleep(0.5)
                continue
            for key, entries in got or ():
                key = key.decode() if isinstance(key, bytes) else key
                if key == self.events_key:
                    for entry_id, fields in entries:
                        self.last_event_id = entry_id.decode()
                        self._deliver_one(fields)
                else:
                    for entry_id, fields in entries:
                        self.last_inbox_id = entry_id.decode()
                        self._command_one(fields)

    def _deliver_one(self, fields: dict) -> None:
        try:
            n = int(fields[b"n"])
            node = fields[b"node"].decode()
            data = orjson.loads(fields[b"e"])
        except (KeyError, ValueError, orjson.JSONDecodeError):
            log.warning("bus: dropping an unreadable event entry")
            return
        self.delivered += 1
        if self._deliver is not None:
            try:
                self._deliver(n, node, data)
            except Exception:  # one bad event never stops the reader
                log.exception("bus: delivering event %d failed", n)

    def _command_one(self, fields: dict) -> None:
        try:
            msg = orjson.loads(fields[b"c"])
            sender, data = msg["from"], msg["c"]
        except (KeyError, TypeError, orjson.JSONDecodeError):
            log.warning("bus: dropping an unreadable command entry")
            return
        if self._on_command is not None:
            try:
                self._on_command(sender, data)
            except Exception:
                log.exception("bus: a command from %s failed", sender)

    # --- liveness ------------------------------------------------------------------------

    async def _beat_once(self) -> None:
        await self._r.set(f"{self.prefix}:node:{self.node_id}", b"1", px=int(self.ttl * 1000))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.every)
            try:
                await self._beat_once()
            except (RedisError, OSError) as exc:
                log.warning("bus: heartbeat failed (%s)", exc)

    async def live_nodes(self) -> list[str]:
        """The nodes whose heartbeat key has not expired."""
        head = f"{self.prefix}:node:"
        out = []
        async for key in self._r.scan_iter(match=head + "*", count=100):
            out.append((key.decode() if isinstance(key, bytes) else key)[len(head):])
        return sorted(out)

    async def flush(self, timeout: float = 10.0) -> None:
        """Wait until everything published so far has been sent (tests, shutdown)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self._out and loop.time() < deadline:
            self._wake.set()
            await asyncio.sleep(0.005)

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
