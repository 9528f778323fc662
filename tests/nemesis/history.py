"""The history of one nemesis run: what the clients asked and got, what the nemesis did, what the
store holds at the end. Pure data (attrs), no I/O; the checker (checker.py) judges it whole.

As in Jepsen, a client's request is an operation with an invocation and a completion (``ok``,
``fail`` with the server's error code, or ``info``: no answer, the outcome unknown); every frame a
client received is kept as it came, on which connection and from which node; each fault has its
kind, target and time span. Times are seconds since the history began (one monotonic clock for
clients and nemesis alike: they run in one process).

``Final`` is read once the nemesis healed everything and every run ended: each node's transcript
of every conversation (Pheby ``conversation.open``), the run it still shows active, each node's
stored lvmh events of the watched sessions, and each browser's own view of them.
"""

from __future__ import annotations

import json
import time
from typing import Any, Optional

import attrs

SURFACES = ("loomi", "pheby", "lvmh")


@attrs.define
class Op:
    index: int
    process: str  # the client ("phone-1", "pheby-1", "browser-1") or "nemesis"
    f: str  # "pair", "connect", "send", "create", "chat", "resolve", "open", "drop", "cut", ...
    node: Optional[str]
    invoke: float
    value: dict = attrs.field(factory=dict)
    outcome: str = "pending"  # "ok" | "fail" | "info"
    complete: Optional[float] = None
    result: dict = attrs.field(factory=dict)


@attrs.define
class Received:
    client: str
    surface: str  # one of SURFACES
    conn: int  # the client's connection number (0, 1, ...)
    node: Optional[str]
    t: float
    frame: dict


@attrs.define
class Fault:
    kind: str  # "kill9", "pause", "spin", "redis_restart", "redis_flush", "pg_restart", "drop", "cut"
    target: str
    start: float
    end: Optional[float] = None


@attrs.define
class Final:
    transcripts: dict = attrs.field(factory=dict)  # node -> conversation -> [{message_id, role, text}]
    active: dict = attrs.field(factory=dict)  # node -> conversation -> the snapshot's run (None: idle)
    lvmh: dict = attrs.field(factory=dict)  # node -> session -> stored events (REST), seq ascending
    views: dict = attrs.field(factory=dict)  # browser -> session -> its view's persisted events


@attrs.define
class History:
    seed: int = 0
    topology: str = ""
    ops: list = attrs.field(factory=list)
    frames: list = attrs.field(factory=list)
    faults: list = attrs.field(factory=list)
    final: Final = attrs.field(factory=Final)
    t0: float = attrs.field(factory=time.monotonic)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def invoke(self, process: str, f: str, node: Optional[str], **value: Any) -> Op:
        op = Op(index=len(self.ops), process=process, f=f, node=node, invoke=self.now(), value=value)
        self.ops.append(op)
        return op

    def ok(self, op: Op, **result: Any) -> Op:
        return self._complete(op, "ok", result)

    def fail(self, op: Op, **result: Any) -> Op:
        return self._complete(op, "fail", result)

    def info(self, op: Op, **result: Any) -> Op:
        return self._complete(op, "info", result)

    def _complete(self, op: Op, outcome: str, result: dict) -> Op:
        op.outcome, op.complete, op.result = outcome, self.now(), result
        return op

    def received(self, client: str, surface: str, conn: int, node: Optional[str], frame: dict) -> None:
        self.frames.append(Received(client, surface, conn, node, self.now(), frame))

    def fault(self, kind: str, target: str) -> Fault:
        fault = Fault(kind, target, self.now())
        self.faults.append(fault)
        return fault

    def healed(self, fault: Fault) -> None:
        fault.end = self.now()

    # --- views the checker and the reports use ------------------------------------------------------

    def of(self, client: str) -> list:
        return [r for r in self.frames if r.client == client]

    def clients(self, surface: str) -> list:
        seen: dict = {}
        for r in self.frames:
            if r.surface == surface:
                seen.setdefault(r.client, None)
        return list(seen)

    def fault_counts(self) -> dict:
        out: dict = {}
        for f in self.faults:
            out[f.kind] = out.get(f.kind, 0) + 1
        return out

    def to_json(self) -> str:
        return json.dumps({"seed": self.seed, "topology": self.topology,
                           "ops": [attrs.asdict(o) for o in self.ops],
                           "frames": [attrs.asdict(r) for r in self.frames],
                           "faults": [attrs.asdict(f) for f in self.faults],
                           "final": attrs.asdict(self.final)})

    @classmethod
    def from_json(cls, text: str) -> "History":
        d = json.loads(text)
        return cls(seed=d["seed"], topology=d["topology"], ops=[Op(**o) for o in d["ops"]],
                   frames=[Received(**r) for r in d["frames"]], faults=[Fault(**f) for f in d["faults"]],
                   final=Final(**d["final"]), t0=0.0)
