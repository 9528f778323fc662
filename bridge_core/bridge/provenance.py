"""Provenance: which command caused an event (``origin`` on the events, bridge_core/model/events.py).

A message's ``UserMessageSent`` and its run's ``RunStarted`` carry the origin of the
``message.send`` that caused them (sources publish both before ``send_message`` returns); a
run's ``RunFinished`` carries the origin of the cancel (or pause) that ended it, else the
run's own. The bridge stamps them as they are published (``stamp``); a run taken over by
another node keeps its origin there (``moved_here``, ``moved_away``: bridge_core/scale/cluster.py).
"""

from __future__ import annotations

from typing import Any, Awaitable, Optional

import attrs

from ..model import commands as cmd
from ..model import events as ev
from ..model.state import ConversationState

STAMPED = frozenset({ev.UserMessageSent, ev.RunStarted, ev.RunFinished})  # events stamped with their origin


class Provenance:
    def __init__(self) -> None:
        self.entering: dict[str, cmd.Origin] = {}  # conversation_id -> the origin of the message being sent
        self.runs: dict[str, cmd.Origin] = {}  # run_id -> the origin of the command that started the run
        self.cancels: dict[str, cmd.Origin] = {}  # run_id -> the origin of a cancel (or pause) under way

    def stamp(self, event: Any) -> Any:
        """``event`` (one of ``STAMPED``, without an origin) with the origin of the command that caused
        it (as it is when no command did)."""
        t = type(event)
        if t is ev.RunFinished:
            run_id = event.run_id
            started = self.runs.pop(run_id, None)
            cancelled = self.cancels.pop(run_id, None)
            origin = cancelled if event.status == "cancelled" and cancelled is not None else started
        else:
            origin = self.entering.get(event.conversation_id)
            if origin is not None and t is ev.RunStarted:
                self.runs[event.run_id] = origin
        return event if origin is None else attrs.evolve(event, origin=origin)

    async def cancelling(self, conv: ConversationState, run_id: str, origin: cmd.Origin, step: Awaitable[Any]) -> None:
        """Await a source's cancel (or pause) of ``run_id`` with its origin noted for the run's end."""
        self.cancels[run_id] = origin
        try:
            await step
        except BaseException:
            self.cancels.pop(run_id, None)
            raise
        if conv.run is None or conv.run.run_id != run_id:
            self.cancels.pop(run_id, None)  # ended already (its RunFinished took it, or not)

    def moved_here(self, run_id: str, origin: Optional[cmd.Origin]) -> None:
        """Another node's run taken over by this one: its end is stamped here now."""
        if origin is not None:
            self.runs[run_id] = origin

    def moved_away(self, run_id: str) -> None:
        """This node's run taken over by another: its end is stamped there."""
        self.runs.pop(run_id, None)
        self.cancels.pop(run_id, None)
