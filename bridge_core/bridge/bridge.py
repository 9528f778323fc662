"""The Bridge: conversation state, commands, and the one ordered event log.

Agent sources publish shared events through ``Bridge.publish``; the bridge
folds them into each conversation's state, queues what must be persisted
(never per delta), and hands them to the hub in order. Front ends call
``Bridge.execute(command, origin)`` and render the result.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
import os
import time
from typing import Any, Callable, Optional

import attrs

from ..model import commands as cmd
from ..model import events as ev
from .agent import AgentSource
from .attachments import AttachmentStore
from .drafts import LAST_ACTIVE_SQL, MESSAGE_SQL, DraftSaver
from ..model.errors import (
    AlreadyResolved,
    ApprovalNotFound,
    BadRequest,
    ClarifyNotFound,
    ConversationNotFound,
    NotFound,
    RunActive,
    TooLarge,
    Unavailable,
)
from .hub import Hub
from ..model.ids import draft_message_id, new_id
from ..model.limits import HISTORY_CAP, check_text
from ..model.state import ActiveRun, ConversationState
from .store import Store
from .tasks import TaskSet

log = logging.getLogger("agent_bridge.bridge")

RESOLVED_MEMORY = 4096
CLEANUP_INTERVAL = 3600.0
PENDING_KEY = "pending-decision:"  # settings rows of decisions not yet resolved (for a restart to resolve)
RUN_END_REASON = {"cancelled": "cancelled", "failed": "failed", "completed": "completed"}
_STAMPED = frozenset({ev.UserMessageSent, ev.RunStarted, ev.RunFinished})  # events stamped with their origin


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


class Bridge:
    def __init__(
        self,
        data_dir: str,
        source: AgentSource,
        *,
        retention_days: float = 7.0,
        store: Optional[Store] = None,
    ):
        self.data_dir = data_dir
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        self.store = store or Store(os.path.join(data_dir, "bridge.db"))
        self.hub = Hub()
        self.tasks = TaskSet("bridge")
        self.conversations: dict[str, ConversationState] = {}
        self.sources: dict[str, AgentSource] = {}
        self.default_source = source
        self.retention_days = retention_days
        self.attachments: AttachmentStore = None  # type: ignore[assignment]
        self._approvals: dict[str, str] = {}  # pending approval_id -> conversation_id
        self._clarifications: dict[str, str] = {}
        self._resolved: collections.OrderedDict[str, ev.ApprovalResolved] = collections.OrderedDict()
        self._resolved_clarify: collections.OrderedDict[str, ev.ClarifyResolved] = collections.OrderedDict()
        self._sending: set[str] = set()
        # provenance (events.py): the origin of the message being sent per conversation, of each
        # open run, and of a cancel under way; the events they cause are stamped as published
        self._entering: dict[str, cmd.Origin] = {}
        self._run_origin: dict[str, cmd.Origin] = {}
        self._cancel_origin: dict[str, cmd.Origin] = {}
        self.drafts = DraftSaver(self.store, self.conversations.__contains__)  # streaming drafts, saved now and then
        self.interrupted_runs: list[tuple[str, str]] = []
        self.runs_ended: collections.Counter = collections.Counter()  # status -> runs this node ended (metrics)
        self.started = False
        # commands a core extension answers (bridge_core/push: push.register and friends), by type;
        # and the push notifier itself, when the composition root wired one (docs/push.md)
        self.extensions: dict[type, Callable[[Any, cmd.Origin], Any]] = {}
        self.push: Any = None
        # several nodes (bridge_core/cluster.py): set by the composition root with --bus; None on one node
        self.cluster: Any = None
        self.add_source(source)

    # --- lifecycle -----------------------------------------------------------

    def add_source(self, source: AgentSource) -> None:
        self.sources[source.name] = source
        source.attach(self)

    async def start(self) -> None:
        if not self.store.is_open:
            self.store.open()
        self.attachments = AttachmentStore(os.path.join(self.data_dir, "attachments"), self.store, self.retention_days)
        await self.attachments.start()  # (on a shared store, the table of their bytes)
        cluster = self.cluster
        if cluster is not None:
            await cluster.join()  # the bus joined before the store is loaded; what it delivers waits
        self._load()
        await self._fail_interrupted()
        if cluster is None:
            self.hub.subscribe(self._persist)
        else:
            cluster.joined()  # each node persists its own events where it publishes them
        for source in list(self.sources.values()):
            await source.start()
        self.tasks.spawn(self._cleanup_loop(), name="attachment-cleanup")
        self.started = True

    async def stop(self) -> None:
        for source in list(self.sources.values()):
            try:
                await source.stop()
            except Exception:
                log.exception("agent source %s failed to stop", source.name)
        if self.cluster is not None:
            await self.cluster.stop()  # what the sources published last goes out first
        await self.tasks.close()
        self.drafts.close()
        self.store.close()
        self.started = False

    def call_soon(self, fn: Callable[[], Any]) -> None:
        asyncio.get_running_loop().call_soon(fn)

    def _load(self) -> None:
        rows = self.store.query(
            "SELECT id, name, source, created_at, updated_at, last_active, session_id FROM conversations"
        )
        for cid, name, source, created, updated, last_active, session_id in rows:
            self.conversations[cid] = ConversationState(
                conversation_id=cid,
                name=name,
                source=source,
                created_at=created,
                updated_at=updated,
                last_active=last_active,
                session_id=session_id,
            )
        for cid, mid, role, text, ts in self.store.query(
            "SELECT conversation_id, message_id, role, text, ts FROM messages ORDER BY rowid"
        ):
            conv = self.conversations.get(cid)
            if conv is not None:
                conv.messages.append(ev.Message(message_id=mid, role=role, text=text, ts=ts))
                conv.preview = text[:200]
        now = time.time()
        for att in self.attachments.load_all():
            conv = self.conversations.get(att.conversation_id)
            if conv is not None and (att.expires_at is None or att.expires_at > now):
                conv.attachments[att.attachment_id] = att
        # runs that were running when the process died are failed, never left running: each is put
        # back as the conversation's active run, with the decisions it left pending, so that
        # report_interrupted closes it by the one rule every run end follows (close_run)
        for run_id, cid, started in self.store.query(
            "SELECT run_id, conversation_id, started_at FROM runs WHERE status='running'"
        ):
            if self.cluster is None or self.cluster.interrupted_here(run_id):
                self.interrupted_runs.append((cid, run_id))  # else another node's run, going on there
            conv = self.conversations.get(cid)
            if conv is not None and conv.run is None:
                run = conv.run = ActiveRun(run_id=run_id, message_id=draft_message_id(run_id), started_at=started or now)
                saved = next((m for m in conv.messages if m.message_id == run.message_id), None)
                if saved is not None:  # its saved draft (drafts.py): the text its completion keeps
                    conv.messages.remove(saved)
                    run.draft = ev.Draft(saved.text)
        for key, value in self.store.query("SELECT key, value FROM settings WHERE key LIKE ?", (PENDING_KEY + "%",)):
            self._restore_pending(key, value)

    async def _fail_interrupted(self) -> None:
        """Store the runs a crash cut short as failed (awaited: the loop keeps turning meanwhile)."""
        if not self.interrupted_runs:
            return
        now = time.time()
        rows = [(now, ev.RUN_INTERRUPTED, r) for _, r in self.interrupted_runs]
        await self.store.write(
            lambda c: c.executemany("UPDATE runs SET status='failed', finished_at=?, error=? WHERE run_id=?", rows)
        )
        log.warning("%d run(s) interrupted by a restart were marked failed", len(rows))

    def _restore_pending(self, key: str, value: str) -> None:
        """A decision pending when the process died: back into its conversation, to be resolved."""
        try:
            d = json.loads(value)
            conv = self.conversations.get(d["conversation_id"])
            if conv is None or conv.run is None or conv.run.run_id != d["run_id"]:
                self.store.execute_later("DELETE FROM settings WHERE key=?", (key,))
                return
            if d["kind"] == "approval":
                conv.approvals[d["id"]] = ev.ApprovalRequested(
                    conversation_id=conv.conversation_id, run_id=d["run_id"], approval_id=d["id"],
                    session_key=d.get("session_key", ""), command=d.get("text", ""), description="",
                )  # fmt: skip
                self._approvals[d["id"]] = conv.conversation_id
            else:
                conv.clarifications[d["id"]] = ev.ClarifyRequested(
                    conversation_id=conv.conversation_id, run_id=d["run_id"], clarify_id=d["id"],
                    session_key=d.get("session_key", ""), question=d.get("text", ""),
                )  # fmt: skip
                self._clarifications[d["id"]] = conv.conversation_id
        except (ValueError, KeyError, TypeError):
            log.warning("dropping an unreadable pending decision %s", key)
            self.store.execute_later("DELETE FROM settings WHERE key=?", (key,))

    def report_interrupted(self) -> int:
        """Close the runs a crash interrupted (call once every front end is listening).

        ``_load`` marked them failed in the runs table and put each back as its
        conversation's active run; here each one gets a ``RunFinished`` failed,
        so ``close_run`` completes its message (with the draft last saved
        before the crash, ``drafts.DraftSaver``) and resolves its pending decisions
        (decided_by ``restart``) on every front end, then a diagnostic notice
        says why.
        """
        if getattr(self, "_interrupted_reported", False):
            return 0
        self._interrupted_reported = True
        reported = 0
        for cid, run_id in self.interrupted_runs:
            if cid not in self.conversations:
                continue
            self.interrupt(cid, run_id, "This run was interrupted by a restart of the bridge and did not finish.")
            reported += 1
        return reported

    def interrupt(self, cid: str, run_id: str, notice: str) -> None:
        """Close a run nobody runs any more (a restart, or its node died: cluster.py) and say why."""
        self.publish(ev.RunFinished(conversation_id=cid, run_id=run_id, status="failed", error=ev.RUN_INTERRUPTED))
        self.publish(ev.Notification(conversation_id=cid, message_id=f"n-{new_id()}", text=notice,
                                     title="Run interrupted", category="diagnostic", source="bridge"))  # fmt: skip

    async def _cleanup_loop(self) -> None:
        while True:
            try:
                removed = await self.attachments.cleanup()
                if removed:
                    log.info("removed %d expired attachment(s)", removed)
                now = time.time()
                for conv in self.conversations.values():
                    for aid, att in list(conv.attachments.items()):
                        if att.expires_at is not None and att.expires_at <= now:
                            del conv.attachments[aid]
            except Exception:
                log.exception("attachment cleanup failed")
            await asyncio.sleep(CLEANUP_INTERVAL)

    # --- the event log ---------------------------------------------------------

    def publish(self, event: Any) -> int:
        """Fold ``event`` in, persist it, fan it out; its hub seq (0 with a bus: numbered as it comes back)."""
        if type(event) in _STAMPED and event.origin is None:
            event = self._stamp(event)
        if type(event) is ev.RunFinished:
            self.close_run(event)
            self.runs_ended[event.status] += 1
        conv_id = getattr(event, "conversation_id", None)
        if conv_id is not None:
            conv = self.conversations.get(conv_id)
            if conv is not None:
                conv.apply(event)
        t = type(event)
        if t is ev.ApprovalRequested:
            self._approvals[event.approval_id] = event.conversation_id
        elif t is ev.ClarifyRequested:
            self._clarifications[event.clarify_id] = event.conversation_id
        elif t is ev.RunFinished:
            self._forget_settled_decisions(event.conversation_id)
        if self.cluster is not None:  # persisted here, its origin; the hub gets it back from the bus
            self._persist(0, event)
            self.cluster.publish(event)
            return 0
        seq = self.hub.publish(event)
        if t is ev.ConversationDeleted:
            self.conversations.pop(event.conversation_id, None)
        return seq

    def _stamp(self, event: Any) -> Any:
        """The origin of the command that caused ``event`` (None when no command did)."""
        t = type(event)
        if t is ev.RunFinished:
            run_id = event.run_id
            started = self._run_origin.pop(run_id, None)
            cancelled = self._cancel_origin.pop(run_id, None)
            origin = cancelled if event.status == "cancelled" and cancelled is not None else started
        else:
            origin = self._entering.get(event.conversation_id)
            if origin is not None and t is ev.RunStarted:
                self._run_origin[event.run_id] = origin
        return event if origin is None else attrs.evolve(event, origin=origin)

    def close_run(self, finished: ev.RunFinished) -> None:
        """A run closes what it opened, whatever ends it (docs/conformance.md, Pheby: "run end").

        Before its ``RunFinished`` goes out: its message, if not completed, is
        completed with the text so far (possibly empty), and every decision
        still pending in it is resolved (choice ``deny``, not accepted,
        ``decided_by`` saying why). Every source's run end passes here, so no
        agent and no front end repeats the rule.
        """
        conv = self.conversations.get(finished.conversation_id)
        if conv is None:
            return
        run = conv.run
        if run is not None and run.run_id == finished.run_id and not run.completed:
            self.publish(
                ev.MessageCompleted(
                    conversation_id=conv.conversation_id, message_id=run.message_id, text=run.text, run_id=run.run_id
                )
            )
        why = RUN_END_REASON.get(finished.status, "agent")
        if finished.status == "failed" and finished.error == ev.RUN_INTERRUPTED:
            why = "restart"
        for request in [a for a in conv.approvals.values() if a.run_id == finished.run_id]:
            self._settle_approval(request, why)
        for request in [c for c in conv.clarifications.values() if c.run_id == finished.run_id]:
            self._settle_clarify(request, why)

    def _settle_approval(self, request: ev.ApprovalRequested, decided_by: str) -> None:
        """Nobody answered: the approval is denied (the spec's choice set), on every front end."""
        self._approvals.pop(request.approval_id, None)
        resolved = ev.ApprovalResolved(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            approval_id=request.approval_id,
            choice="deny",
            accepted=False,
            decided_by=decided_by,  # type: ignore[arg-type]
            surface="agent",
        )
        self._remember(self._resolved, request.approval_id, resolved)
        self.publish(resolved)

    def _settle_clarify(self, request: ev.ClarifyRequested, decided_by: str) -> None:
        self._clarifications.pop(request.clarify_id, None)
        resolved = ev.ClarifyResolved(
            conversation_id=request.conversation_id,
            run_id=request.run_id,
            clarify_id=request.clarify_id,
            response="",
            accepted=False,
            decided_by=decided_by,  # type: ignore[arg-type]
            surface="agent",
        )
        self._remember(self._resolved_clarify, request.clarify_id, resolved)
        self.publish(resolved)

    def _forget_settled_decisions(self, conversation_id: str) -> None:
        """A finished run leaves no decision pending (the state already dropped them): forget their ids."""
        conv = self.conversations.get(conversation_id)
        for table, pending in ((self._approvals, conv.approvals if conv else {}),
                               (self._clarifications, conv.clarifications if conv else {})):
            for key in [k for k, cid in table.items() if cid == conversation_id and k not in pending]:
                del table[key]

    def _persist(self, seq: int, e: Any) -> None:
        t = type(e)
        s = self.store
        if t is ev.TextDelta:
            if e.kind == "text":
                self.drafts.changed(e)
            return
        if t is ev.ConversationCreated:
            conv = self.conversations.get(e.conversation_id)
            s.execute_later(
                "INSERT OR IGNORE INTO conversations(id, name, source, created_at, updated_at) VALUES(?,?,?,?,?)",
                (e.conversation_id, e.name, e.source, e.ts, e.ts),
            )
            if conv is not None and conv.session_id:
                s.execute_later("UPDATE conversations SET session_id=? WHERE id=?", (conv.session_id, e.conversation_id))
        elif t is ev.ConversationRenamed or t is ev.ConversationUpdated:
            s.execute_later("UPDATE conversations SET name=?, updated_at=? WHERE id=?", (e.name, e.ts, e.conversation_id))
        elif t is ev.ConversationDeleted:
            cid = e.conversation_id
            s.write_later(
                lambda c: (
                    c.execute("DELETE FROM messages WHERE conversation_id=?", (cid,)),
                    c.execute("DELETE FROM runs WHERE conversation_id=?", (cid,)),
                    c.execute("DELETE FROM conversations WHERE id=?", (cid,)),
                )
            )
        elif t is ev.UserMessageSent:
            self._write_message(e.conversation_id, e.message_id, "user", e.text, e.ts)
        elif t is ev.MessageCompleted:
            self.drafts.done(e.message_id)
            self._write_message(e.conversation_id, e.message_id, "assistant", e.text, e.ts)
        elif t is ev.Notification:
            if e.conversation_id is not None:
                self._write_message(e.conversation_id, e.message_id, "assistant", e.text, e.ts)
        elif t is ev.RunStarted:
            s.execute_later(
                "INSERT OR REPLACE INTO runs(run_id, conversation_id, status, started_at) VALUES(?,?,?,?)",
                (e.run_id, e.conversation_id, "running", e.ts),
            )
        elif t is ev.RunFinished:
            s.execute_later(
                "UPDATE runs SET status=?, finished_at=?, error=? WHERE run_id=?", (e.status, e.ts, e.error, e.run_id)
            )
        elif t is ev.ApprovalRequested or t is ev.ClarifyRequested:
            # kept until resolved, so that a restart can resolve what a crash left pending
            approval = t is ev.ApprovalRequested
            did = e.approval_id if approval else e.clarify_id
            value = json.dumps({
                "kind": "approval" if approval else "clarify", "id": did, "conversation_id": e.conversation_id,
                "run_id": e.run_id, "session_key": e.session_key, "text": e.command if approval else e.question,
            })  # fmt: skip
            s.execute_later(
                "INSERT OR REPLACE INTO settings(key, value) VALUES(?, ?)", (PENDING_KEY + did, value)
            )
        elif t is ev.ApprovalResolved or t is ev.ClarifyResolved:
            did = e.approval_id if t is ev.ApprovalResolved else e.clarify_id
            s.execute_later("DELETE FROM settings WHERE key=?", (PENDING_KEY + did,))

    def _write_message(self, cid: str, mid: str, role: str, text: str, ts: float) -> None:
        self.store.execute_later(MESSAGE_SQL, (cid, mid, role, text, ts))
        self.store.execute_later(LAST_ACTIVE_SQL, (ts, cid))

    # --- lookups ----------------------------------------------------------------

    def conversation(self, conversation_id: Optional[str]) -> ConversationState:
        conv = self.conversations.get(conversation_id) if isinstance(conversation_id, str) else None
        if conv is None:
            raise ConversationNotFound()
        return conv

    def source_for(self, conv: Optional[ConversationState]) -> AgentSource:
        if conv is None:
            return self.default_source
        return self.sources.get(conv.source, self.default_source)

    def active_draft_id(self, conversation_id: str) -> Optional[str]:
        conv = self.conversations.get(conversation_id)
        if conv is not None and conv.run is not None:
            return conv.run.message_id
        return None

    def find_run(self, run_id: str, conversation_id: Optional[str] = None) -> ConversationState:
        if conversation_id is not None:
            conv = self.conversation(conversation_id)
            if conv.run is None or conv.run.run_id != run_id:
                raise NotFound("Run not found")
            return conv
        for conv in self.conversations.values():
            if conv.run is not None and conv.run.run_id == run_id:
                return conv
        raise NotFound("Run not found")

    # --- commands ------------------------------------------------------------------

    async def execute(self, command: Any, origin: cmd.Origin) -> Any:
        if self.cluster is not None:  # a command about a run goes to the node running it
            return await self.cluster.execute(command, origin)
        return await self.execute_here(command, origin)

    async def execute_here(self, command: Any, origin: cmd.Origin) -> Any:
        """``command`` carried out by this node."""
        handler = _HANDLERS.get(type(command))
        if handler is None:
            extension = self.extensions.get(type(command))
            if extension is not None:
                return await extension(command, origin)
            raise BadRequest(f"Unsupported command {type(command).__name__}")
        return await handler(self, command, origin)

    def create_conversation(
        self,
        name: Optional[str] = None,
        *,
        source: Optional[str] = None,
        conversation_id: Optional[str] = None,
        request_id: Optional[str] = None,
        session_id: Optional[str] = None,
    ) -> ConversationState:
        cid = conversation_id or new_id()
        if cid in self.conversations:
            return self.conversations[cid]
        src = source or self.default_source.name
        conv = ConversationState(conversation_id=cid, name=(name or "New chat")[:200], source=src, session_id=session_id)
        self.conversations[cid] = conv
        self.publish(ev.ConversationCreated(conversation_id=cid, name=conv.name, source=src, request_id=request_id))
        return conv

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
        self._entering[cid] = origin  # sources publish the message and the run's start before they return
        start = functools.partial(source.send_message, conv, c.text, run_id, c.request_id)
        try:  # with several nodes, the run's start claims the conversation cluster-wide first (cluster.py)
            run_id = await (start() if self.cluster is None else self.cluster.start_run(conv, run_id, start)) or run_id
        finally:
            self._sending.discard(cid)
            self._entering.pop(cid, None)
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
        await self._cancel_noted(conv, run_id, origin, self.source_for(conv).cancel(conv, run_id, c.request_id))
        return run_id

    async def _cancel_noted(self, conv: ConversationState, run_id: str, origin: cmd.Origin, step: Any) -> None:
        """Run a source's cancel (or pause) with its origin noted for the run's end."""
        self._cancel_origin[run_id] = origin
        try:
            await step
        except BaseException:
            self._cancel_origin.pop(run_id, None)
            raise
        if conv.run is None or conv.run.run_id != run_id:
            self._cancel_origin.pop(run_id, None)  # ended already (its RunFinished took it, or not)

    async def _pause(self, c: cmd.PauseRun, origin: cmd.Origin) -> str:
        conv = self.find_run(c.run_id, c.conversation_id)
        await self._cancel_noted(conv, c.run_id, origin, self.source_for(conv).pause(conv, c.run_id, c.request_id))
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
        if c.choice not in ev.APPROVAL_CHOICES:
            raise BadRequest(f"choice must be one of {', '.join(ev.APPROVAL_CHOICES)}")
        cid = self._approvals.get(c.approval_id)
        if cid is None:
            if c.approval_id in self._resolved:
                raise AlreadyResolved("Approval already resolved")
            raise ApprovalNotFound()
        conv = self.conversations.get(cid)
        request = conv.approvals.get(c.approval_id) if conv is not None else None
        if request is None:
            self._approvals.pop(c.approval_id, None)
            raise ApprovalNotFound()
        if c.choice not in request.choices:
            raise BadRequest(f"choice must be one of {', '.join(request.choices)}")
        del self._approvals[c.approval_id]  # first answer wins, synchronously
        resolved = ev.ApprovalResolved(
            conversation_id=cid,
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
        self._remember(self._resolved, c.approval_id, resolved)
        self.publish(resolved)
        await self.source_for(conv).resolve_approval(request, c.choice, c.reason)
        return resolved

    def approval_timed_out(self, approval_id: str, decided_by: str = "timeout") -> None:
        """An agent's own timeout (or its own decision) resolved an approval: denied, ``decided_by`` says why."""
        cid = self._approvals.get(approval_id)
        conv = self.conversations.get(cid) if cid else None
        request = conv.approvals.get(approval_id) if conv is not None else None
        if request is None:
            self._approvals.pop(approval_id, None)
            return
        self._settle_approval(request, decided_by)

    async def _answer_clarify(self, c: cmd.AnswerClarify, origin: cmd.Origin) -> ev.ClarifyResolved:
        check_text(c.response, "Response")
        cid = self._clarifications.get(c.clarify_id)
        if cid is None:
            if c.clarify_id in self._resolved_clarify:
                raise AlreadyResolved("Clarification already answered")
            raise ClarifyNotFound()
        conv = self.conversations.get(cid)
        request = conv.clarifications.get(c.clarify_id) if conv is not None else None
        if request is None:
            self._clarifications.pop(c.clarify_id, None)
            raise ClarifyNotFound()
        if request.choices is not None and not request.allow_free_text and c.response not in request.choices:
            raise BadRequest("response must be one of the choices")
        del self._clarifications[c.clarify_id]
        resolved = ev.ClarifyResolved(
            conversation_id=cid,
            run_id=request.run_id,
            clarify_id=c.clarify_id,
            response=c.response,
            decided_by=origin.decided_by,  # type: ignore[arg-type]
            request_id=c.request_id,
            surface=origin.surface,
            origin=origin,
        )
        self._remember(self._resolved_clarify, c.clarify_id, resolved)
        self.publish(resolved)
        await self.source_for(conv).answer_clarify(request, c.response)
        return resolved

    @staticmethod
    def _remember(table: collections.OrderedDict, key: str, value: Any) -> None:
        table[key] = value
        while len(table) > RESOLVED_MEMORY:
            table.popitem(last=False)

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


_HANDLERS: dict[type, Callable] = {
    cmd.CreateConversation: Bridge._create,
    cmd.RenameConversation: Bridge._rename,
    cmd.DeleteConversation: Bridge._delete,
    cmd.SendMessage: Bridge._send,
    cmd.CancelRun: Bridge._cancel,
    cmd.PauseRun: Bridge._pause,
    cmd.ResumeRun: Bridge._resume,
    cmd.ResolveApproval: Bridge._resolve_approval,
    cmd.AnswerClarify: Bridge._answer_clarify,
    cmd.SetModel: Bridge._set_model,
    cmd.SetReasoning: Bridge._set_reasoning,
    cmd.SetYolo: Bridge._set_yolo,
    cmd.ListConversations: Bridge._list,
    cmd.OpenConversation: Bridge._open,
    cmd.ListModels: Bridge._models,
    cmd.CurrentModel: Bridge._current_model,
    cmd.CurrentReasoning: Bridge._current_reasoning,
    cmd.CurrentYolo: Bridge._current_yolo,
    cmd.ListTasks: Bridge._tasks,
}
