"""Hermes's approval and clarify prompts <-> the bridge's decisions.

An approval prompt (``send_exec_approval``, or upstream's ``_send_exec_approval_prompt``)
becomes an ``ApprovalRequested`` with an id the bridge mints; the first answer from any
front end goes to ``resolve_gateway_approval``. Hermes 0.19.0 resolves a session's
approvals oldest first and knows no ids, so an answer to a newer approval is held until the
older ones are settled (``ApprovalBook``, pure); a newer Hermes's request ids target one.
Hermes reports every outcome (its own timeout included) through ``post_approval_response``;
one the bridge did not give settles the bridge's request (``Bridge.approval_timed_out``).
Clarify prompts map one to one (``resolve_gateway_clarify``).
"""

from __future__ import annotations

import logging
import time
from typing import Optional

import attrs

from bridge_core.model import events as ev
from bridge_core.model.errors import ClarifyNotFound, NotFound
from bridge_core.model.ids import short_id

from .chats import Chats

log = logging.getLogger("agent_bridge.hermes")

DEFAULT_TIMEOUT = 60.0  # Hermes 0.19.0's approvals.timeout default


@attrs.define
class Pending:
    session_key: str
    command: str
    request_id: Optional[str]
    decided: Optional[tuple[str, Optional[str]]] = None  # (choice, reason) held until its turn


class ApprovalBook:
    """Approvals pending in Hermes, in Hermes's order per session (pure: no I/O, no Hermes)."""

    def __init__(self) -> None:
        self._pending: dict[str, Pending] = {}  # approval id -> what Hermes needs to resolve it
        self._queues: dict[str, list[str]] = {}  # session key -> approval ids, oldest first

    def add(self, approval_id: str, session_key: str, command: str, request_id: Optional[str] = None) -> None:
        self._pending[approval_id] = Pending(session_key, command, request_id)
        self._queues.setdefault(session_key, []).append(approval_id)

    def get(self, approval_id: str) -> Optional[Pending]:
        return self._pending.get(approval_id)

    def forget(self, approval_id: str) -> Optional[Pending]:
        pending = self._pending.pop(approval_id, None)
        if pending is None:
            return None
        queue = self._queues.get(pending.session_key)
        if queue and approval_id in queue:
            queue.remove(approval_id)
            if not queue:
                del self._queues[pending.session_key]
        return pending

    def is_next(self, approval_id: str) -> bool:
        """Whether Hermes 0.19.0 resolves this one next (the oldest of its session, or nothing older)."""
        pending = self._pending[approval_id]
        queue = self._queues.get(pending.session_key, [])
        return not queue or queue[0] == approval_id

    def hold(self, approval_id: str, choice: str, reason: Optional[str]) -> None:
        self._pending[approval_id].decided = (choice, reason)

    def take_decided(self, session_key: str) -> Optional[tuple[str, str, Optional[str]]]:
        """The session's oldest approval if it is already decided, forgotten: (id, choice, reason)."""
        queue = self._queues.get(session_key)
        if not queue or self._pending[queue[0]].decided is None:
            return None
        approval_id = queue[0]
        choice, reason = self.forget(approval_id).decided  # type: ignore[union-attr, misc]
        return approval_id, choice, reason

    def match(self, session_key: str, command: str, request_id: Optional[str]) -> Optional[str]:
        """The approval an outcome Hermes reports is about: by request id, else command, else the oldest."""
        queue = self._queues.get(session_key) or []
        target = None
        if request_id is not None:
            target = next((a for a in queue if self._pending[a].request_id == request_id), None)
        if target is None:
            target = next((a for a in queue if self._pending[a].command == command), None)
        if target is None and queue:
            target = queue[0]
        return target


class Decisions:
    def __init__(self, chats: Chats):
        self.chats = chats
        self.book = ApprovalBook()

    # --- approvals -------------------------------------------------------------------------

    def approval_requested(
        self,
        platform: str,
        chat_id: str,
        command: str,
        session_key: str,
        description: str,
        allow_permanent: bool = True,
        smart_denied: bool = False,
        request_id: Optional[str] = None,
    ) -> bool:
        """Hermes asks for an approval; False when the chat is no conversation (Hermes then asks in text)."""
        if chat_id not in self.chats.bridge.conversations:
            return False
        approval_id = short_id()
        run = self.chats.run(platform, chat_id)
        self.book.add(approval_id, session_key, command, request_id)
        self.chats.bridge.publish(
            ev.ApprovalRequested(
                conversation_id=chat_id,
                run_id=run.run_id if run is not None else None,
                approval_id=approval_id,
                session_key=session_key,
                command=command,
                description=description or "dangerous command",
                choices=approval_choices(allow_permanent, smart_denied),
                smart_denied=bool(smart_denied),
                deadline_ts=self._deadline(),
            )
        )
        return True

    def _deadline(self) -> Optional[float]:
        try:
            timeout = self.chats.api.approval_timeout()
        except Exception:
            timeout = DEFAULT_TIMEOUT
        return time.time() + timeout if timeout > 0 else None

    async def resolve_approval(self, approval: ev.ApprovalRequested, choice: str, reason: Optional[str]) -> None:
        """The bridge's answer (the first from any front end) to Hermes."""
        approval_id = approval.approval_id
        pending = self.book.get(approval_id)
        if pending is None:
            raise NotFound("Approval no longer pending in Hermes")
        if pending.request_id is not None and self.chats.api.approval_request_ids:
            self.book.forget(approval_id)
            self.chats.api.resolve_approval(pending.session_key, choice, reason, request_id=pending.request_id)
            return
        if not self.book.is_next(approval_id):
            # Hermes 0.19.0 resolves a session's approvals oldest first: keep this
            # decision until the older ones are settled.
            self.book.hold(approval_id, choice, reason)
            return
        self.book.forget(approval_id)
        self._resolve_oldest(pending.session_key, choice, reason)
        self._drain(pending.session_key)

    def _resolve_oldest(self, session_key: str, choice: str, reason: Optional[str]) -> None:
        if self.chats.api.resolve_approval(session_key, choice, reason) == 0:
            log.info("Hermes had no pending approval for this session any more (timed out or interrupted)")

    def _drain(self, session_key: str) -> None:
        """Hand Hermes the answers held for the session's oldest approvals, in order."""
        while (decided := self.book.take_decided(session_key)) is not None:
            _, choice, reason = decided
            self._resolve_oldest(session_key, choice, reason)

    def approval_settled(self, session_key: str, choice: str, command: str = "", request_id: Optional[str] = None) -> None:
        """Hook ``post_approval_response``: Hermes settled an approval (maybe on its own)."""
        target = self.book.match(session_key, command, request_id)
        if target is None:
            return  # the bridge already resolved and forgot it
        self.book.forget(target)
        self.chats.bridge.approval_timed_out(target, "timeout" if choice == "timeout" else "agent")
        self._drain(session_key)

    # --- clarifications ------------------------------------------------------------------

    def clarify_requested(
        self, platform: str, chat_id: str, question: str, choices: Optional[list], clarify_id: str, session_key: str
    ) -> bool:
        """Hermes asks a question; False when the chat is no conversation (Hermes then asks in text)."""
        if chat_id not in self.chats.bridge.conversations:
            return False
        run = self.chats.run(platform, chat_id)
        self.chats.bridge.publish(
            ev.ClarifyRequested(
                conversation_id=chat_id,
                run_id=run.run_id if run is not None else None,
                clarify_id=str(clarify_id),
                session_key=session_key,
                question=question,
                choices=tuple(str(c) for c in choices) if choices else None,
                allow_free_text=True,
            )
        )
        return True

    async def answer_clarify(self, clarify: ev.ClarifyRequested, response: str) -> None:
        if not self.chats.api.resolve_clarify(clarify.clarify_id, response):
            raise ClarifyNotFound()


def approval_choices(allow_permanent: bool, smart_denied: bool) -> tuple[str, ...]:
    """The choices Hermes accepts for a prompt: no ``always`` where it may not persist, only once/deny when smart-denied."""
    if smart_denied:
        return ("once", "deny")
    if not allow_permanent:
        return ("once", "session", "deny")
    return ("once", "session", "always", "deny")
