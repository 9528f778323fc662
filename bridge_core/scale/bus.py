"""The bus between nodes: its interface, and the in-process one (docs/scale-out.md "The bus").

A bus carries two things. **Events**: ``publish(data)`` puts one (its ``serialize.to_dict``
form) in the one ordered log every node reads; each node, the publisher included, gets
every event back through ``deliver(n, node, data)`` in the same order, ``n`` the cluster-
wide event number (strictly increasing by one). **Commands**: ``send(node, data)`` puts a
command in one node's inbox; only that node gets it, through ``on_command(node, data)``.
**Relays**: ``relay(data)`` puts a front end's own payload in the event log, in order with
the events but without a number; every other node gets it through ``on_relay(node, data)``.

Nodes trust only each other: a bus between processes signs every entry and applies only
genuine ones, once, from live nodes; what it drops it counts by reason in ``dropped``
(``bridge_core/scale/busauth.py``).

``LocalBus`` is the in-process bus of a single node: ``publish`` delivers at once, in the
caller's stack, with no copy and no I/O (the embedded default pays nothing for it).
``bridge_core/scale/redisbus.py`` is the Redis Streams one.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Optional, Protocol

Deliver = Callable[[int, str, Any], None]  # (event number, publishing node, event data)
OnCommand = Callable[[str, Any], None]  # (sending node, command data)


class Bus(Protocol):
    node_id: str
    seen: int  # the highest event number known given (cluster.py: the number never goes back)
    floor: int  # a reservation above every number given: after a loss of the counter, numbering resumes above it
    on_relay: Optional[OnCommand]
    dropped: collections.Counter  # entries dropped, by reason (bridge_core/scale/busauth.py WHY)

    async def start(self, deliver: Deliver, on_command: Optional[OnCommand] = None) -> None: ...

    def publish(self, data: Any) -> None: ...

    def send(self, node: str, data: Any) -> None: ...

    def relay(self, data: Any) -> None: ...

    def lost_recently(self, within: float) -> bool: ...

    def note_lost(self, what: str) -> None: ...

    async def live_nodes(self) -> list[str]: ...

    async def newest(self, needle: bytes, match: Callable[[Any], bool], back: float) -> Any: ...

    # once this node has read the log up to where it ends now (bridge_core/scale/catchup.py)
    async def caught_up(self) -> None: ...

    # once what this node published so far is in the log (within ``timeout`` s; ``warn``: log it if not)
    async def flush(self, timeout: float = ..., warn: bool = ...) -> None: ...

    async def stop(self) -> None: ...


class LocalBus:
    """One node, no engine: events and commands go straight back to this node."""

    def __init__(self, node_id: str = "local"):
        self.node_id = node_id
        self.n = 0
        self.seen = self.floor = 0  # nothing to lose: its number is this process's own
        self.on_relay: Optional[OnCommand] = None
        self.dropped: collections.Counter = collections.Counter()  # nothing comes from outside this process
        self._deliver: Optional[Deliver] = None
        self._on_command: Optional[OnCommand] = None

    async def start(self, deliver: Deliver, on_command: Optional[OnCommand] = None) -> None:
        self._deliver = deliver
        self._on_command = on_command

    def publish(self, data: Any) -> None:
        self.n += 1
        if self._deliver is not None:
            self._deliver(self.n, self.node_id, data)

    def relay(self, data: Any) -> None:
        pass  # no other node

    def lost_recently(self, within: float) -> bool:
        return False

    def note_lost(self, what: str) -> None:
        pass

    def send(self, node: str, data: Any) -> None:
        if node == self.node_id and self._on_command is not None:
            self._on_command(self.node_id, data)

    async def live_nodes(self) -> list[str]:
        return [self.node_id]

    async def newest(self, needle: bytes, match: Callable[[Any], bool], back: float) -> Any:
        return None  # nothing kept: this process's events are in its own state

    async def caught_up(self) -> None:
        pass  # delivered as published

    async def flush(self, timeout: float = 0.0, warn: bool = False) -> None:
        pass

    async def stop(self) -> None:
        self._deliver = self._on_command = None
