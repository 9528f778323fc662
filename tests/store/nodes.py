"""Several nodes in one process on one PostgreSQL, fed one event stream (for the front ends' numbering).

What the bus gives every node (docs/scale-out.md): each event once, in one order, numbered
``n`` cluster-wide, the same ``n`` on every node; the origin node persists the core's rows,
the others fold the event into their state. ``Stream`` is that, in process: each node's
``Bridge.publish`` hands the event to the stream instead of its own hub; the stream numbers it
and delivers it to every node's hub subscribers, the origin's at once and the others' on a
later turn of the loop (a node may also be held back, to be behind the others in the stream).
"""

from __future__ import annotations

import asyncio
import collections
from types import SimpleNamespace
from typing import Any, Optional

from bridge_core import events as ev
from bridge_core.state import ConversationState
from tests.conftest import make_config


class Node:
    def __init__(self, stream: "Stream", svc: Any, node_id: str):
        self.stream = stream
        self.svc = svc
        self.node_id = node_id
        self.queue: collections.deque = collections.deque()
        self.held = False
        self.scheduled = False
        self.origin: Optional[str] = None

    @property
    def bridge(self) -> Any:
        return self.svc.bridge

    def port(self, name: str) -> int:
        return self.svc.ports[name]

    def deliver(self, n: int, event: Any, origin: "Node", now: bool) -> None:
        self.queue.append((n, event, origin))
        if now and not self.held and len(self.queue) == 1:
            self.drain()
        elif not self.scheduled and not self.held:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.drain)

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False
        self.drain()

    def drain(self) -> None:
        self.scheduled = False
        bridge = self.bridge
        while self.queue and not self.held:
            n, event, origin = self.queue.popleft()
            mine = origin is self
            if not mine:
                _fold(bridge, event)
            bridge.hub.seq = n
            cluster = bridge.cluster
            cluster.origin = origin.node_id
            for fn in tuple(bridge.hub._subs):
                if not mine and getattr(fn, "__func__", None) is type(bridge)._persist:
                    continue  # only the origin persists the core's rows
                fn(n, event)
            cluster.origin = None
            if type(event) is ev.ConversationDeleted and not mine:
                bridge.conversations.pop(event.conversation_id, None)


def _fold(bridge: Any, event: Any) -> None:
    """Another node's event into this node's state (what the core does with the bus)."""
    cid = getattr(event, "conversation_id", None)
    if type(event) is ev.ConversationCreated and cid not in bridge.conversations:
        bridge.conversations[cid] = ConversationState(conversation_id=cid, name=event.name, source=event.source,
                                                      created_at=event.ts, updated_at=event.ts)
    conv = bridge.conversations.get(cid) if cid is not None else None
    if conv is not None:
        conv.apply(event)


class Stream:
    def __init__(self) -> None:
        self.n = 0
        self.nodes: list[Node] = []

    def join(self, svc: Any, node_id: str) -> Node:
        node = Node(self, svc, node_id)
        svc.bridge.cluster = SimpleNamespace(node_id=node_id, origin=None)

        def publish(event: Any) -> int:
            self.n += 1
            for other in self.nodes:
                other.deliver(self.n, event, node, now=other is node)
            return self.n

        svc.bridge.hub.publish = publish
        self.nodes.append(node)
        return node

    async def leave(self, node: Node) -> None:
        """The node stops (its clients reconnect elsewhere); the others go on."""
        self.nodes.remove(node)
        await node.svc.stop()


async def start_nodes(tmp_path, store_url: str, names=("a", "b"), adapters=("loomi",), monkeypatch=None) -> tuple:
    """Services on one store, each a node of one stream (the one-live-node rule lifted for the test)."""
    if monkeypatch is not None:
        from bridge_core.nodes import NodeHeartbeat

        async def no_claim(self) -> None:
            return None

        monkeypatch.setattr(NodeHeartbeat, "start", no_claim)
    stream = Stream()
    nodes = [await add_node(stream, tmp_path, store_url, name, adapters) for name in names]
    return stream, nodes


async def add_node(stream: Stream, tmp_path, store_url: str, name: str, adapters=("loomi",)) -> Node:
    """A node joining the stream (at its end: it sees the events published from now on)."""
    from bridge_core.agents.demo import DemoAgent
    from cli.serve import Service

    cfg = make_config(tmp_path / name, adapters, store=store_url)
    svc = Service(cfg, DemoAgent())
    node = stream.join(svc, name)
    await svc.start()
    return node
