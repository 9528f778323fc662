"""What each shared command does: the bridge's command handlers, and their results.

``Bridge.execute_here`` (bridge.py) looks a command's handler up in ``HANDLERS`` by its type
(a command a core extension answers, such as push's, in ``Bridge.extensions``). The
handlers are methods of ``CommandHandlers``, mixed into ``Bridge``: they use its state
(``conversations``, ``store``, the decision ledger ``decisions``, the ``provenance`` of
events, its ``sequencing``) and its event log (``publish``, ``create_conversation``,
``conversation``, ``find_run``, ``source_for``), and reach the agent through its source.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Optional

import attrs

from ..model import commands as cmd
from ..model import events as ev
from ..model.errors import BadRequest, NotFound, RunActive, TooLarge, Unavailable
from ..model.ids import new_id
from ..model.limits import HISTORY_CAP, check_text
from ..model.state import ConversationState
from .agent import AgentSource


@attrs.frozen
class Snapshot:
    conversation: ConversationState
    messages: list
    attachments: list
    run: Any
    tools: list
    approvals: list
    clarifications: list


@attrs.frozen
class SendResult:
    conversation_id: str
    run_id: Optional[str]
    created: bool = False


class CommandHandlers:
    _sending: set[str]  # conversations a message is being sent into (another one meanwhile: run_active)

    async def _create(self, c: cmd.CreateConversation, origin: cmd.Origin) -> ConversationState:
        if c.name is not None and len(c.name) > 1000:
            raise TooLarge("Conversation name too long")
        return self.create_conversation(c.name, request_id=c.request_id)

    async def _rename(self, c: cmd.RenameConversation, origin: cmd.Origin) -> ConversationState:
        conv = self.conversation(c.conversation_id)
        if len(c.name) > 1000:
            raise TooLarge("Conversation name too long")
        self.publish(ev.ConversationRenamed(conversation_id=conv.conversation_id, name=c.name, request_id=c.request_id))
        return conv

    async def _delete(self, c: cmd.DeleteConversation, origin: cmd.Origin) -> str:
        conv = self.conversation(c.conversation_id)
        source = self.source_for(conv)
        if conv.run is not None:
            try:
                await source.cancel(conv, conv.run.run_id, None)
            except Exception:
                pass
        await source.conversation_deleted(conv)
        self.publish(ev.ConversationDeleted(conversation_id=conv.conversation_id, request_id=c.request_id))
        return conv.conversation_id

    async def _send(self, c: cmd.SendMessage, origin: cmd.Origin) -> SendResult:
        check_text(c.text)
        if self.store.failed is not None:
            # the last commit failed (disk full, read-only directory): nothing said now could be kept,
            # so refuse clearly instead of running a turn that a restart forgets; a write that works
            # again (space freed) clears it
            try:
                await self.store.probe()
            except Unavailable:
                raise Unavailable("The bridge cannot save anything right now (disk full or read-only); try again later")
        created = False
        if c.conversation_id is None:
            title = " ".join(c.text.split())[:60] or "New chat"
            conv = self.create_conversation(title)
            created = True
        else:
            conv = self.conversation(c.conversation_id)
        cid = conv.conversation_id
        if conv.run is not None or cid in self._sending:
            raise RunActive()
        source = self.source_for(conv)
        run_id = new_id()
        self._sending.add(cid)
        self.provenance.entering[cid] = origin  # sources publish the message and the run's start before they return
        start = functools.partial(source.send_message, conv, c.text, run_id, c.request_id)
        try:  # with several nodes, the run's start claims the conversation cluster-wide first (scale/cluster.py)
            run_id = await self.sequencing.start_run(conv, run_id, start) or run_id
        finally:
            self._sending.discard(cid)
            self.provenance.entering.pop(cid, None)
        return SendResult(conversation_id=cid, run_id=run_id, created=created)

    async def _cancel(self, c: cmd.CancelRun, origin: cmd.Origin) -> str:
        if c.conversation_id is not None:
            conv = self.conversation(c.conversation_id)
            if conv.run is None or (c.run_id is not None and conv.run.run_id != c.run_id):
                raise NotFound("Run not found")
        elif c.run_id is not None:
            conv = self.find_run(c.run_id)
        else:
            raise BadRequest("run_id or conversation_id required")
        assert conv.run is not None
        run_id = conv.run.run_id
        await self.provenance.cancelling(conv, run_id, origin, self.source_for(conv).cancel(conv, run_id, c.request_id))
        return run_id

    async def _pause(self, c: cmd.PauseRun, origin: cmd.Origin) -> str:
        conv = self.find_run(c.run_id, c.conversation_id)
        step = self.source_for(conv).pause(conv, c.run_id, c.request_id)
        await self.provenance.cancelling(conv, c.run_id, origin, step)
        return c.run_id

    async def _resume(self, c: cmd.ResumeRun, origin: cmd.Origin) -> SendResult:
        cid = c.conversation_id
        if cid is None:
            cid = self._conversation_of_run(c.run_id)
        return await self._send(cmd.SendMessage(text="continue", conversation_id=cid, request_id=c.request_id), origin)

    def _conversation_of_run(self, run_id: str) -> str:
        for conv in self.conversations.values():
            if conv.last_run_id == run_id or (conv.run is not None and conv.run.run_id == run_id):
                return conv.conversation_id
        row = self.store.query_one("SELECT conversation_id FROM runs WHERE run_id=?", (run_id,))
        if row is None or row[0] not in self.conversations:
            raise NotFound("Run not found")
        return row[0]

    async def _resolve_approval(self, c: cmd.ResolveApproval, origin: cmd.Origin) -> ev.ApprovalResolved:
        request = self.decisions.take_approval(c, self.conversations)  # first answer wins, synchronously
        resolved = ev.ApprovalResolved(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            approval_id=c.approval_id,
            choice=c.choice,
            accepted=True,
            decided_by=origin.decided_by,  # type: ignore[arg-type]
            reason=c.reason,
            request_id=c.request_id,
            surface=origin.surface,
            origin=origin,
        )
        source = self.source_for(self.conversations.get(request.conversation_id))
        self.publish(resolved)
        await source.resolve_approval(request, c.choice, c.reason)
        return resolved

    async def _answer_clarify(self, c: cmd.AnswerClarify, origin: cmd.Origin) -> ev.ClarifyResolved:
        check_text(c.response, "Response")
        request = self.decisions.take_clarify(c, self.conversations)  # first answer wins, synchronously
        resolved = ev.ClarifyResolved(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            clarify_id=c.clarify_id,
            response=c.response,
            decided_by=origin.decided_by,  # type: ignore[arg-type]
            request_id=c.request_id,
            surface=origin.surface,
            origin=origin,
        )
        source = self.source_for(self.conversations.get(request.conversation_id))
        self.publish(resolved)
        await source.answer_clarify(request, c.response)
        return resolved

    def _settings_source(self, conversation_id: Optional[str]) -> AgentSource:
        conv = self.conversation(conversation_id) if conversation_id is not None else None
        return self.source_for(conv)

    async def _set_model(self, c: cmd.SetModel, origin: cmd.Origin):
        cur = await self._settings_source(c.conversation_id).set_model(c.model, c.provider, c.conversation_id)
        self.publish(ev.ModelChanged(model=cur.model, provider=cur.provider, scope=cur.scope,
                                     conversation_id=c.conversation_id))  # fmt: skip
        return cur

    async def _set_reasoning(self, c: cmd.SetReasoning, origin: cmd.Origin):
        snap = await self._settings_source(c.conversation_id).set_reasoning(c.effort, c.conversation_id)
        self.publish(ev.ReasoningChanged(effort=snap.effort, enabled=snap.enabled, scope=snap.scope,
                                         conversation_id=c.conversation_id))  # fmt: skip
        return snap

    async def _set_yolo(self, c: cmd.SetYolo, origin: cmd.Origin):
        snap = await self._settings_source(c.conversation_id).set_yolo(c.enabled, c.conversation_id)
        self.publish(ev.YoloChanged(enabled=snap.enabled, scope=snap.scope, conversation_id=c.conversation_id))
        return snap

    async def _list(self, c: cmd.ListConversations, origin: cmd.Origin) -> list[ConversationState]:
        return self.list_conversations()

    def list_conversations(self) -> list[ConversationState]:
        return sorted(
            self.conversations.values(), key=lambda c: (c.last_active or c.created_at), reverse=True
        )

    async def _open(self, c: cmd.OpenConversation, origin: cmd.Origin) -> Snapshot:
        return self.snapshot(c.conversation_id, c.limit)

    def snapshot(self, conversation_id: str, limit: int = 200) -> Snapshot:
        conv = self.conversation(conversation_id)
        limit = max(0, min(int(limit), HISTORY_CAP))
        now = time.time()
        return Snapshot(
            conversation=conv,
            messages=conv.history(limit),
            attachments=conv.live_attachments(now),
            run=attrs.evolve(conv.run) if conv.run is not None else None,
            tools=list(conv.tools.values()),
            approvals=list(conv.approvals.values()),
            clarifications=list(conv.clarifications.values()),
        )

    async def _models(self, c: cmd.ListModels, origin: cmd.Origin):
        return self._settings_source(c.conversation_id).models(c.conversation_id)

    async def _current_model(self, c: cmd.CurrentModel, origin: cmd.Origin):
        return self._settings_source(c.conversation_id).current_model(c.conversation_id)

    async def _current_reasoning(self, c: cmd.CurrentReasoning, origin: cmd.Origin):
        return self._settings_source(c.conversation_id).reasoning(c.conversation_id)

    async def _current_yolo(self, c: cmd.CurrentYolo, origin: cmd.Origin):
        return self._settings_source(c.conversation_id).yolo(c.conversation_id)

    async def _tasks(self, c: cmd.ListTasks, origin: cmd.Origin) -> list[ConversationState]:
        convs = self.list_conversations()
        if c.status_filter:
            wanted = set(c.status_filter.split(","))
            convs = [x for x in convs if x.status in wanted]
        return convs[: max(0, min(c.limit, 500))]


HANDLERS: dict[type, Callable] = {
    cmd.CreateConversation: CommandHandlers._create,
    cmd.RenameConversation: CommandHandlers._rename,
    cmd.DeleteConversation: CommandHandlers._delete,
    cmd.SendMessage: CommandHandlers._send,
    cmd.CancelRun: CommandHandlers._cancel,
    cmd.PauseRun: CommandHandlers._pause,
    cmd.ResumeRun: CommandHandlers._resume,
    cmd.ResolveApproval: CommandHandlers._resolve_approval,
    cmd.AnswerClarify: CommandHandlers._answer_clarify,
    cmd.SetModel: CommandHandlers._set_model,
    cmd.SetReasoning: CommandHandlers._set_reasoning,
    cmd.SetYolo: CommandHandlers._set_yolo,
    cmd.ListConversations: CommandHandlers._list,
    cmd.OpenConversation: CommandHandlers._open,
    cmd.ListModels: CommandHandlers._models,
    cmd.CurrentModel: CommandHandlers._current_model,
    cmd.CurrentReasoning: CommandHandlers._current_reasoning,
    cmd.CurrentYolo: CommandHandlers._current_yolo,
    cmd.ListTasks: CommandHandlers._tasks,
}
