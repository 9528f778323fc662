"""How an event gets its place in the ordered log, and a command the node that carries it out.

This is the bridge's one seam to several nodes. On its own (the embedded default) a bridge
numbers its events itself: ``LocalSequencing`` hands a folded event to the hub, whose
``seq`` is the log's number, persists it as the hub's first subscriber and carries out
every command on this node. With ``--bus`` the composition root gives the bridge a cluster
in its place (``Bridge.use_cluster``; ``bridge_core/scale/cluster.py``): each node persists
the events it publishes and sends them through the bus, which numbers them for every node,
and a command about a run goes to the node running it. ``Bridge`` calls ``Sequencing`` and
never asks which one it has.

Front ends, push and the metrics reach the cluster, when there is one, as ``Bridge.cluster``
(None on one node) through ``ClusterLink``: relays between the nodes' front ends, commands
run where a session is hosted, what a node answers for (``holds``), a run moving with its
agent.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, ContextManager, Optional, Protocol

from ..model import commands as cmd
from ..model.state import ConversationState
from .hub import Hub, Subscriber


class Sequencing(Protocol):
    async def join(self) -> None: ...  # before the bridge loads the store
    def interrupted_here(self, run_id: str) -> bool: ...  # a run the store has running: this node's (a restart's)?
    def restored_end(self, run_id: str) -> None: ...  # a run the store had open, ended as a durable record holds
    def joined(self) -> None: ...  # after the bridge loaded the store: persisting and delivering begin
    async def stop(self) -> None: ...  # after the agent sources stopped (what they published last goes out first)
    def publish(self, event: Any) -> int: ...  # an event folded here: its seq, delivered (0: as it comes back)
    async def execute(self, command: Any, origin: cmd.Origin) -> Any: ...  # on the node it belongs to

    # ``start()`` (the source's send_message) once this node may start a run in ``conv``
    async def start_run(self, conv: ConversationState, run_id: str, start: Callable[[], Awaitable[Any]]) -> Any: ...


class LocalSequencing:
    """One node: the hub numbers the events, every command runs here."""

    def __init__(self, hub: Hub, persist: Subscriber, execute_here: Callable[[Any, cmd.Origin], Awaitable[Any]]):
        self.hub = hub
        self.persist = persist
        self.publish = hub.publish  # the hub's seq, called as it is: the hot path
        self.execute = execute_here

    async def join(self) -> None:
        return None

    def interrupted_here(self, run_id: str) -> bool:
        return True

    def restored_end(self, run_id: str) -> None:
        return None

    def joined(self) -> None:
        self.hub.subscribe(self.persist)  # the first subscriber: written before any front end renders it

    async def stop(self) -> None:
        return None

    async def start_run(self, conv: ConversationState, run_id: str, start: Callable[[], Awaitable[Any]]) -> Any:
        return await start()


class ClusterLink(Sequencing, Protocol):
    """What front ends, push and the metrics use of several nodes (``Bridge.cluster``)."""

    node_id: str
    holds: Any  # what this node answers for besides its runs (bridge_core/scale/holds.py Holds)
    delivering_own: bool  # the hub is publishing an event this node published (push: one node notifies)
    lag: Optional[float]  # s from the last event's publish to its delivery here
    taken_over: int  # runs of dead nodes this node closed

    def relay(self, front_end: str, data: Any) -> None: ...  # to the same front end on every other node
    def add_relay(self, front_end: str, on_relay: Callable[[str, Any], None]) -> None: ...  # (node, data)
    def add_hosted(self, cls: type) -> None: ...  # ``cls`` runs on the node hosting its conversation's session
    async def gone(self, nodes: Any) -> set: ...  # those of ``nodes`` whose liveness expired
    async def move_run(self, conv: ConversationState) -> bool: ...  # its running run taken over by this node
    async def end_run(self, run_id: str) -> bool: ...  # may this node end ``run_id``, its agent gone from here?
    def closing(self, run_id: str) -> ContextManager[None]: ...  # around ``Bridge.interrupt``'s close of ``run_id``
    def fenced(self, event: Any) -> bool: ...  # of a run another node ended while this node ran it (scale/fence.py)
