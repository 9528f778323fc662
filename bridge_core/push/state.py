"""The notifier's state machine, pure: shared events (and the clock) in, what to push out.

``NotifierState.on_event(event, now, watched)`` and ``NotifierState.due(decision_id, now)``
return actions; the runtime (``notifier.py``) arms the timers and sends the messages.
The rules (docs/push.md, "When something is pushed"):

- an approval or a clarification is pushed when it is still waiting ``grace`` seconds after
  it was asked (``Arm``, then ``due``): one answered sooner is never pushed;
- a pushed decision answered anywhere (or settled by its run's end or its timeout) is
  followed by a ``withdraw``;
- a run that finished after running at least ``run_seconds`` is pushed when no client of
  its conversation was connected (``watched``) when it ended;
- an unsolicited notification (the agent's, not a diagnostic) likewise when nobody watches.
"""

from __future__ import annotations

from typing import Any, Optional, Union

import attrs

from ..model import events as ev


@attrs.frozen
class Decision:
    kind: str  # approval | clarify
    decision_id: str
    conversation_id: str
    run_id: Optional[str]
    text: str  # the command to approve, or the question
    choices: tuple[str, ...] = ()
    deadline_ts: Optional[float] = None


@attrs.frozen
class Arm:
    decision_id: str
    at: float


@attrs.frozen
class Disarm:
    decision_id: str


@attrs.frozen
class PushDecision:
    decision: Decision


@attrs.frozen
class Withdraw:
    decision: Decision


@attrs.frozen
class PushRun:
    conversation_id: str
    run_id: str
    status: str
    text: str
    error: Optional[str]


@attrs.frozen
class PushNotice:
    conversation_id: str
    title: str
    text: str


Action = Union[Arm, Disarm, PushDecision, Withdraw, PushRun, PushNotice]


class NotifierState:
    def __init__(self, grace: float, run_seconds: float):
        self.grace = grace
        self.run_seconds = run_seconds
        self.waiting: dict[str, Decision] = {}  # asked, grace timer armed
        self.pushed: dict[str, Decision] = {}  # pushed, still unanswered
        self.runs: dict[str, float] = {}  # run_id -> when it started

    def on_event(self, e: Any, now: float, watched: bool = False) -> list[Action]:
        t = type(e)
        if t is ev.ApprovalRequested:
            return self._asked(Decision(kind="approval", decision_id=e.approval_id, conversation_id=e.conversation_id,
                                        run_id=e.run_id, text=e.command or e.description, choices=tuple(e.choices),
                                        deadline_ts=e.deadline_ts), now)  # fmt: skip
        if t is ev.ClarifyRequested:
            return self._asked(Decision(kind="clarify", decision_id=e.clarify_id, conversation_id=e.conversation_id,
                                        run_id=e.run_id, text=e.question, choices=tuple(e.choices or ())), now)  # fmt: skip
        if t is ev.ApprovalResolved:
            return self._answered(e.approval_id)
        if t is ev.ClarifyResolved:
            return self._answered(e.clarify_id)
        if t is ev.RunStarted:
            self.runs[e.run_id] = e.ts
            return []
        if t is ev.RunFinished:
            started = self.runs.pop(e.run_id, None)
            if started is None or watched or e.ts - started < self.run_seconds:
                return []
            return [PushRun(conversation_id=e.conversation_id, run_id=e.run_id, status=e.status, text=e.text,
                            error=e.error)]  # fmt: skip
        if t is ev.Notification:
            if e.conversation_id is None or e.category == "diagnostic" or watched:
                return []
            return [PushNotice(conversation_id=e.conversation_id, title=e.title, text=e.text)]
        if t is ev.ConversationDeleted:
            gone = [d for d in (*self.waiting.values(), *self.pushed.values()) if d.conversation_id == e.conversation_id]
            out: list[Action] = []
            for d in gone:
                out.extend(self._answered(d.decision_id))
            return out
        return []

    def _asked(self, d: Decision, now: float) -> list[Action]:
        if d.decision_id in self.pushed or d.decision_id in self.waiting:
            return []  # the same decision again (a restart restoring it): one push per decision
        self.waiting[d.decision_id] = d
        return [Arm(decision_id=d.decision_id, at=now + self.grace)]

    def _answered(self, decision_id: str) -> list[Action]:
        if self.waiting.pop(decision_id, None) is not None:
            return [Disarm(decision_id=decision_id)]
        d = self.pushed.pop(decision_id, None)
        return [Withdraw(decision=d)] if d is not None else []

    def due(self, decision_id: str, now: float) -> list[Action]:
        """A grace timer fired: push the decision if it still waits."""
        d = self.waiting.pop(decision_id, None)
        if d is None:
            return []
        if d.deadline_ts is not None and d.deadline_ts <= now:
            return []
        self.pushed[decision_id] = d
        return [PushDecision(decision=d)]
