"""A Loomi node without sockets or a loop, for driving ``loomi_adapter.protocol`` with frames and a fake clock.

``Node`` holds what the server holds around each connection's protocol object: the devices, their
numbering (``replay.Numbering``, the rule the real registries use) and request memory; ``Phone`` is
one socket: it sends frames into its ``LoomiProtocol`` and reads what came out, parsed. The glue is
the server's, line for line: a hello's ``Authenticate`` is answered with ``open`` (the device's
``SeqLog.resume``) or ``refuse``, a ``Close`` for another socket goes to that socket, a ping's
``CHECK`` is answered with what the test says. Nothing here sleeps: time is ``Node.now``.
"""

from __future__ import annotations

from typing import Any, Optional

import orjson

from bridge_core.model.errors import Unauthorized
from bridge_core.model.seqalloc import SeqReservation
from loomi_adapter import codec
from loomi_adapter.idempotency import RequestCache
from loomi_adapter.protocol import CHECK, Authenticate, Close, Job, LoomiProtocol, PairHello, Settings
from loomi_adapter.replay import Numbering, SeqLog

TS = 1759123456.0


class Device:
    """What ``replay.Numbering`` and ``open`` read of a device (devices.Device's numbering fields)."""

    def __init__(self, device_id: str, window: int):
        self.device_id = device_id
        self.log = SeqLog(size=window)
        self.seqs = SeqReservation(1 << 40, 1 << 40)  # reservations are the registry's: never due here
        self.offset: Optional[int] = None
        self.skip_to = -1
        self.requests = RequestCache()
        self.phone: Optional["Phone"] = None


class Node:
    def __init__(self, settings: Settings = Settings(server_name="node", server_version="1"), window: int = 512):
        self.settings = settings
        self.window = window
        self.now = 0.0
        self.devices: dict[str, Device] = {}
        self.numbering = Numbering(self.devices, reserve=lambda d: None)
        self.stored: list[tuple[int, bytes]] = []  # the frames stored once (k, tail), as the registry's rows
        self.marks: dict[str, list[tuple[int, int]]] = {}  # each device's offset marks (k, offset)
        self.events = 0
        self.gone: dict[str, str] = {}  # device_id -> what a CHECK answers ("revoked", "replaced")

    def pair(self, device_id: str = "d1") -> Device:
        d = self.devices[device_id] = Device(device_id, self.window)
        return d

    def phone(self) -> "Phone":
        return Phone(self)

    def publish(self, event: Any) -> None:
        """The fan-out: rendered once, numbered for every device, stored, put into each open socket's out."""
        self.events += 1
        tails = [b[1:] for b in codec.render(event)]
        k0, marks, out = self.numbering.record(tails, self.events)
        self.stored += [(k0 + i + 1, t) for i, t in enumerate(tails)]
        for d, k, offset in marks:
            self.marks.setdefault(d.device_id, []).append((k, offset))
        for d, frame in out:
            if d.phone is not None:
                d.phone.proto.out.put(frame)

    def notify(self, text: str) -> None:
        from bridge_core.model import events as ev
        self.publish(ev.Notification(conversation_id=None, message_id=f"m-{text}", text=text, ts=TS))

    def advance(self, seconds: float) -> list:
        """Time passes: every open socket's timers run (the server's heartbeat task), in order."""
        self.now += seconds
        out = []
        for d in self.devices.values():
            if d.phone is not None:
                out += d.phone.tick()
        return out


class Phone:
    """One socket of a device, as the server drives it."""

    def __init__(self, node: Node):
        self.node = node
        self.proto = LoomiProtocol(node.settings, now=node.now)
        self.device: Optional[Device] = None
        self.jobs: list[Job] = []  # requests handed out and not finished (the server's worker)
        self.closes: list[Close] = []

    # --- the peer's side ------------------------------------------------------------------

    def send(self, type_: str, payload: Optional[dict] = None) -> list:
        return self.raw(orjson.dumps({"v": 1, "type": type_, "payload": payload or {}}))

    def raw(self, data: Any) -> list:
        cmds = self.proto.receive(data, self.node.now)
        return self._apply(cmds)

    def hello(self, device: Device, last_seq: Optional[int] = None, **extra: Any) -> list:
        payload = {"device_id": device.device_id, "credential": "c", **extra}
        if last_seq is not None:
            payload["last_seq"] = last_seq
        return self.send("hello", payload)

    def frames(self) -> list[dict]:
        """Everything written since the last look, parsed."""
        return [orjson.loads(f) for f in self.proto.frames_to_send()]

    # --- the server's side ------------------------------------------------------------------

    def _apply(self, cmds: list) -> list:
        for cmd in cmds:
            if isinstance(cmd, Authenticate):
                self._authenticate(cmd)
            elif isinstance(cmd, Close):
                self._closed(cmd)
            elif cmd is not CHECK:  # REQUEST: the worker takes it
                job = self.proto.next_request()
                if job is not None:
                    self.jobs.append(job)
        return cmds

    def _authenticate(self, cmd: Authenticate) -> None:
        hs = cmd.hello
        d = None if isinstance(hs, PairHello) else self.node.devices.get(hs.device_id)
        if d is None:
            self._closed(self.proto.refuse(Unauthorized("Unknown device or wrong credential")))
            return
        previous = d.phone
        self.device = d
        cmds = self.proto.open(d.device_id, d.log.resume(hs.last_seq), next_seq=lambda: self.node.numbering.next_seq(d),
                               requests=d.requests, now=self.node.now,
                               previous=previous.proto if previous is not None else None)
        for close in cmds:
            previous._closed(close)
        d.phone = self

    def _closed(self, close: Close) -> None:
        """The server's ``_fatal``: the farewell frame goes out (queued by ``fail`` already, or before
        ``hello.ok`` written at once), the device forgets this socket."""
        assert close.target is self.proto
        self.closes.append(close)
        if close.frame is not None and not close.queued:
            self.proto.out.put(close.frame)
        if self.device is not None and self.device.phone is self:
            self.device.phone = None

    def tick(self) -> list:
        cmds = self.proto.tick(self.node.now)
        if CHECK in cmds:
            cmds = self.proto.checked(self.node.now, self.node.gone.get(self.device.device_id))
        return self._apply(cmds)
