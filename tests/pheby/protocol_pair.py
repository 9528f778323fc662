"""A synchronous harness for Pheby's protocol objects (pheby_adapter/protocol.py): no socket, no loop, a fake clock.

``ProtocolPair`` is the server side of pheby_adapter/server.py without I/O, for any number of
clients sharing one ``Broadcast``: a client's text goes to its ``PhebyProtocol``, the actions that
come back are taken (a command is kept for the test to run with ``run``, ``Close`` and
``AUTH_FAILED`` recorded), and what the server would queue is kept per client in the order the
connection's Outbox keeps it (a reserved reply's place, keyed drafts replaced in place or dropped).
``publish`` is ``PhebyFrontEnd.on_event``; the draft timers are a dict of due times that ``advance``
fires in time order, as the loop would. ``received`` gives what a client has been sent so far,
decoded, up to a reply not filled yet.
"""

from __future__ import annotations

import json
from typing import Any, Hashable, Optional, Sequence

from bridge_core.model import events as ev
from bridge_core.kit.security import same_secret
from pheby_adapter.pacing import DraftPacer
from pheby_adapter.protocol import AUTH_FAILED, Broadcast, Close, PhebyProtocol, State

SECRET = "pair-secret-0123456789"
START = 1_700_000_000.0  # the fake clock's start (wall-clock seconds; the pacer runs on the same clock)


class _Item:
    __slots__ = ("data", "key", "reserved")

    def __init__(self, data: Optional[bytes], key: Optional[Hashable] = None, reserved: bool = False):
        self.data = data
        self.key = key
        self.reserved = reserved


class Client:
    """One connection: its protocol object, what it was sent, and what its frames asked for."""

    def __init__(self, pair: "ProtocolPair", protocol: PhebyProtocol):
        self.pair = pair
        self.protocol = protocol
        self.queue: list[_Item] = []  # what the server queued and the client has not read yet
        self.commands: list = []  # the shared commands its frames asked to execute
        self.closed: Optional[Close] = None
        self.auth_failures = 0

    @property
    def state(self) -> State:
        return self.protocol.state

    def send(self, frame: Any) -> list:
        """Send a frame (a dict, or raw text); the commands it asks for (also kept in ``commands``)."""
        text = frame if isinstance(frame, str) else json.dumps(frame)
        return self._take(self.protocol.receive(text, self.pair.now, locked=self.pair.locked))

    def send_binary(self) -> list:
        return self._take(self.protocol.receive_binary(self.pair.now, locked=self.pair.locked))

    def tick(self) -> list:
        return self._take(self.protocol.tick(self.pair.now))

    def _take(self, actions: Sequence[Any]) -> list:
        commands = []
        for action in actions:
            if action is AUTH_FAILED:
                self.auth_failures += 1
            elif type(action) is Close:
                self.closed = action
            else:
                commands.append(action)
        self.commands.extend(commands)
        self.queue.extend(_Item(data) for data in self.protocol.frames_to_send())
        return commands

    def put(self, data: bytes, key: Optional[Hashable] = None) -> None:
        if key is not None:
            for item in self.queue:
                if item.key == key and not item.reserved:
                    item.data = data  # a newer draft replaces an unsent one in place
                    return
        self.queue.append(_Item(data, key))

    def drop(self, key: Hashable) -> None:
        for item in self.queue:
            if item.key == key:
                item.data, item.key = None, None

    def received(self) -> list[dict]:
        """What the client reads now: the queued frames up to an unfilled reply, decoded (and taken)."""
        out = []
        while self.queue and not self.queue[0].reserved:
            item = self.queue.pop(0)
            if item.data is not None:
                out.append(json.loads(item.data))
        return out

    def raw(self) -> list[bytes]:
        """Like ``received``, the bytes themselves."""
        out = []
        while self.queue and not self.queue[0].reserved:
            item = self.queue.pop(0)
            if item.data is not None:
                out.append(item.data)
        return out


class ProtocolPair:
    """The Pheby server side without I/O, for the clients ``connect`` makes (module docstring)."""

    def __init__(self, *, pacer: Optional[DraftPacer] = None, rate: float = 100.0, burst: float = 200.0,
                 hello_timeout: float = 10.0):
        self.now = START
        self.locked = False  # the address is locked out (security.HelloLockout says so)
        self.broadcast = Broadcast(pacer if pacer is not None else DraftPacer(0.040, tick=0))
        self.clients: list[Client] = []
        self.timers: dict[str, float] = {}  # message id -> when its draft push is due
        self._opts = {"rate": rate, "burst": burst, "hello_timeout": hello_timeout}

    def connect(self, *, hello: bool = True) -> Client:
        protocol = PhebyProtocol(lambda given: same_secret(given, SECRET), self.now, broadcast=self.broadcast,
                                 **self._opts)
        client = Client(self, protocol)
        self.clients.append(client)
        if hello:
            client.send({"type": "hello", "secret": SECRET, "protocol_version": 1})
            assert client.state is State.OPEN and client.received()[0]["type"] == "ready"
        return client

    def publish(self, event: Any) -> None:
        """An event from the hub, as ``PhebyFrontEnd.on_event`` takes it."""
        broadcast = self.broadcast
        if type(event) is ev.TextDelta:
            pace = broadcast.offer(event, self.now)
            if pace.now:
                self._push(event.message_id)
            elif pace.at is not None:
                self.timers[event.message_id] = pace.at
            return
        ended = broadcast.end(event)
        stale = None
        if ended is not None:
            stale = ended.stale
            self.timers.pop(ended.message_id, None)
        for client in self._open():
            if stale is not None:
                client.drop(stale)
            for data in client.protocol.send(event):
                client.put(data)

    def _open(self) -> list[Client]:
        return [c for c in self.clients if c.state in (State.OPEN, State.EXECUTING)]

    def _push(self, mid: str) -> None:
        self.timers.pop(mid, None)
        push = self.broadcast.push_due(mid, self.now)
        if push is None:
            return
        if push.at is not None:
            self.timers[mid] = push.at
            return
        for client in self._open():
            client.put(push.data, push.key)

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` pass: the draft timers due meanwhile fire in time order, each at its time."""
        end = self.now + seconds
        while self.timers:
            mid, at = min(self.timers.items(), key=lambda kv: kv[1])
            if at > end:
                break
            self.now = max(self.now, at)
            self._push(mid)
        self.now = end

    def begin(self, client: Client, command: Any) -> _Item:
        """``command`` starts executing: its reply's place is kept (``PhebyFrontEnd._execute``)."""
        slot = _Item(None, reserved=True)
        client.queue.append(slot)
        client.protocol.execute(command)
        return slot

    def finish(self, client: Client, slot: _Item, *, result: Any = None, error: Optional[BaseException] = None) -> None:
        """The bridge answered ``result`` (or raised ``error``): the reply goes into its place."""
        try:
            if error is not None:
                slot.data = client.protocol.fail(error, self.now)
            else:
                slot.data = client.protocol.reply(result, self.now)
        finally:
            client.protocol.done()
            slot.reserved = False

    def run(self, client: Client, command: Any, *, result: Any = None, error: Optional[BaseException] = None,
            during: Sequence[Any] = ()) -> None:
        """Execute ``command``: ``begin``, the events it causes (``during``) published while it runs, ``finish``."""
        slot = self.begin(client, command)
        for event in during:
            self.publish(event)
        self.finish(client, slot, result=result, error=error)
