"""Reading the bus's event stream back, applying nothing: the newest genuine event that matches
(bridge_core/scale/cluster.py: the text of a run a node closes as interrupted, the end and the decisions'
resolutions its previous life published, docs/scale-out.md), and the matches the reads take."""

from __future__ import annotations

from typing import Any, Callable

import orjson

from ..model.ids import draft_message_id
from .busauth import entry_order, genuine

BATCH = 512  # entries per read


async def newest(r: Any, events_key: str, key: bytes, needle: bytes, match: Callable[[Any], bool], back: float) -> Any:
    """The newest event of the stream's last ``back`` seconds whose entry holds ``needle`` and that
    ``match(data)`` takes, read backwards and applied nowhere (no counter noted); None if none. A
    genuine entry only (its MAC), whatever its epoch: what the nodes delivered when it was live."""
    last = await r.xrevrange(events_key, count=1) if r is not None else None
    if not last:
        return None
    low = f"{max(0, entry_order(last[0][0])[0] - int(back * 1000))}-0"
    high = "+"
    while True:
        entries = await r.xrevrange(events_key, max=high, min=low, count=BATCH)
        for entry_id, fields in entries:
            payload = fields.get(b"b")
            if type(payload) is not bytes or needle not in payload or not genuine(key, events_key, entry_id, fields):
                continue
            try:
                items = orjson.loads(payload)
            except ValueError:
                continue
            for item in reversed(items if type(items) is list else []):
                if type(item) is list and len(item) == 2 and item[0] == "e" and match(item[1]):
                    return item[1]
        if len(entries) < BATCH:
            return None
        high = "(" + (entries[-1][0].decode() if isinstance(entries[-1][0], bytes) else entries[-1][0])


def last_text(data: Any, run_id: str) -> bool:
    """Is ``data`` (an event's bus form) a text delta of ``run_id`` with its text so far, or the completion
    of its message (the one a close completes)?"""
    if type(data) is not dict or data.get("run_id") != run_id:
        return False
    t = data.get("event")
    if t == "TextDelta":
        return data.get("kind", "text") == "text" and type(data.get("draft")) is str
    return t == "MessageCompleted" and data.get("message_id") == draft_message_id(run_id) \
        and type(data.get("text")) is str  # fmt: skip


def decision_of(data: Any, run_id: str) -> bool:
    """Is ``data`` (an event's bus form) the resolution of an approval or a clarification of ``run_id``?"""
    return type(data) is dict and data.get("event") in ("ApprovalResolved", "ClarifyResolved") and \
        data.get("run_id") == run_id  # fmt: skip


def end_of(data: Any, run_id: str) -> bool:
    """Is ``data`` (an event's bus form) the end of ``run_id``?"""
    return type(data) is dict and data.get("event") == "RunFinished" and data.get("run_id") == run_id


def notice_of(data: Any, end: dict) -> bool:
    """Is ``data`` the notice ``Bridge.interrupt`` published right after ``end`` (a run closed as interrupted)?"""
    return type(data) is dict and data.get("event") == "Notification" and data.get("source") == "bridge" and \
        data.get("conversation_id") == end.get("conversation_id") and 0 <= data.get("ts", -1) - end.get("ts", 0) < 1


class RunBack:
    """A ``match`` for ``newest`` that takes nothing (the window read to its end) and notes, in one pass over one
    window, what a node's restart (or a survivor taking its run over) reads back of one of its runs the store left
    open (bridge_core/scale/cluster.py ``read_end``): the run's end, the completion of its message (published just
    before it) and its decisions' resolutions. Read one after another, each read's window began where the stream's
    newest entry was then: a busy stream moved it on in between, and an end found at its oldest edge came without
    its completion, a few milliseconds older (chaos seed 2104: the run's end written, its message never)."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.end: Any = None  # the newest RunFinished of the run
        self.done: Any = None  # the newest completion of its message
        self._decided: list = []  # resolutions of its decisions, newest first

    def __call__(self, data: Any) -> bool:
        r = self.run_id
        if decision_of(data, r):
            self._decided.append(data)
        elif self.end is None and end_of(data, r):
            self.end = data
        elif self.done is None and last_text(data, r) and data["event"] != "TextDelta":
            self.done = data
        return False

    def decisions(self) -> list:
        """The first resolution of each decision, oldest first, as the ledger took it: its node's previous life
        published them and died before its store had them (kill -9 right after a resolve): folded and written
        before the restart closes the run, whose close finds them resolved, not pending (``decision_not_once``)."""
        first: dict = {}
        for d in reversed(self._decided):
            first.setdefault((d["event"], d.get("approval_id") or d.get("clarify_id")), d)
        return list(first.values())


REQUESTS = ("ApprovalRequested", "ClarifyRequested")


class StartBack:
    """A ``match`` for ``newest`` that takes nothing and notes, in one pass over one window, what a node's restart
    reads back of a run whose start its store never had (bridge_core/scale/started.py ``restore_start``): the run's
    start, the user's message that started it, and its decisions still pending on the bus (asked, not resolved).
    The core writes a decision's pending row as lazily as the start: a kill -9 before they commit lost both, and the
    start read back without them left the run's close with nothing to resolve, every phone showing the approval
    pending for good (chaos seed 2304). Read in the same pass as the start, as ``RunBack`` reads an end with its
    resolutions: a later read's window, moved on by a busy stream, may miss a request older than the start's."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.start: Any = None  # the newest RunStarted of the run
        self.asked: Any = None  # the newest UserMessageSent of the run
        self._asked: list = []  # its decision requests, newest first
        self._decided: set = set()  # the ids of its decisions resolved on the bus

    def __call__(self, data: Any) -> bool:
        if type(data) is not dict or data.get("run_id") != self.run_id:
            return False
        t = data.get("event")
        if t in REQUESTS:
            self._asked.append(data)
        elif decision_of(data, self.run_id):
            self._decided.add(data.get("approval_id") or data.get("clarify_id"))
        elif t == "RunStarted" and self.start is None:
            self.start = data
        elif t == "UserMessageSent" and self.asked is None:
            self.asked = data
        return False

    def pending(self) -> list:
        """The run's decision requests no resolution on the bus answered, oldest first (each once)."""
        seen: dict = {}
        for d in reversed(self._asked):
            did = d.get("approval_id") or d.get("clarify_id")
            if did not in self._decided:
                seen.setdefault(did, d)
        return list(seen.values())
