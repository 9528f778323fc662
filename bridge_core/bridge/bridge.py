"""The Bridge: conversation state, commands, and the one ordered event log.

Agent sources publish shared events through ``Bridge.publish``; the bridge folds them into
each conversation's state and the decision ledger (``decisions.py``), and its sequencing
(``sequencing.py``: this node alone, or several on a bus) persists them (``persist.py``,
never per delta) and hands them to the hub in order. Front ends call
``Bridge.execute(command, origin)`` and render the result; what each command does is
``handlers.py``.

What the cluster (``bridge_core/scale/cluster.py``) uses of a bridge is public: its state
(``conversations``, ``store``, ``decisions``, ``provenance``, ``persister``), ``fan_out``
(an event the bus numbered, to the hub), ``execute_here``, ``interrupt``, ``source_for``
and ``use_cluster``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import time
from typing import Any, Callable, Optional

from ..model import commands as cmd
from ..model import events as ev
from ..model.errors import BadRequest, BridgeError, ConversationNotFound, NotFound
from ..model.ids import draft_message_id, new_id
from ..model.state import ActiveRun, ConversationState
from .agent import AgentSource
from .attachments import AttachmentStore
from .decisions import EVENTS as DECISION_EVENTS
from .decisions import DecisionLedger
from .drafts import (NOTICE_TITLE, DraftSaver, DurableEnd, DurableRows, DurableText, durable_end, durable_rows,
                     longest_text, notice_id)
from .handlers import HANDLERS, CommandHandlers
from .hub import Hub
from .persist import Persister
from .provenance import STAMPED, Provenance
from .sequencing import ClusterLink, LocalSequencing, Sequencing
from .sqlite import Store
from .tasks import TaskSet
from .transcripts import HOT_BYTES, HOT_CONVERSATIONS, Conversations, Transcripts

log = logging.getLogger("agent_bridge.bridge")

CLEANUP_INTERVAL = 3600.0
DELETED_MEMORY = 1024  # conversations deleted lately, remembered (``load_conversations``)
RUN_END_REASON = {"cancelled": "cancelled", "failed": "failed", "completed": "completed"}
# a run a start marked failed (``_fail_interrupted``) whose RunFinished was not stored yet (it sets
# finished_at): the process died again before closing it, the next start closes it (the seed 1003 of
# docs/performance.md, "Chaos": a node killed three times in 9 s, its run shown active for good elsewhere)
CLOSE_PENDING = "(status='failed' AND error=? AND finished_at IS NULL)"
# the runs a start finds left open (parameter: ev.RUN_INTERRUPTED): running, or their close pending
LEFT_OPEN = "SELECT run_id, conversation_id, started_at FROM runs WHERE status='running' OR " + CLOSE_PENDING


def interrupt_notice(cid: str, run_id: str, text: str, ts: Optional[float] = None) -> ev.Notification:
    """The notice that says why ``run_id`` was closed as interrupted (``Bridge.interrupt``; restored with its end,
    ``Bridge.restore_end``): one message per run (``drafts.notice_id``)."""
    extra = {} if ts is None else {"ts": ts}
    return ev.Notification(conversation_id=cid, message_id=notice_id(run_id), text=text, title=NOTICE_TITLE,
                           category="diagnostic", source="bridge", **extra)  # fmt: skip


def decided_by_end(status: str, error: Optional[str]) -> Any:
    """Who decided a decision its run's end (``status``, ``error``) settled (``Bridge.close_run``)."""
    if status == "failed" and error == ev.RUN_INTERRUPTED:
        return "restart"
    return RUN_END_REASON.get(status, "agent")


class Bridge(CommandHandlers):
    def __init__(
        self,
        data_dir: str,
        source: AgentSource,
        *,
        retention_days: float = 7.0,
        store: Optional[Store] = None,
        hot_transcripts: int = HOT_CONVERSATIONS,
        hot_bytes: int = HOT_BYTES,
    ):
        self.data_dir = data_dir
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        self.store = store or Store(os.path.join(data_dir, "bridge.db"))
        self.hub = Hub()
        self.tasks = TaskSet("bridge")
        # the transcripts in memory: those in use, read from the store on demand (transcripts.py)
        self.transcripts = Transcripts(self.store, max_conversations=hot_transcripts, max_bytes=hot_bytes)
        self.conversations: dict[str, ConversationState] = Conversations(self.transcripts)
        self.sources: dict[str, AgentSource] = {}
        self.default_source = source
        self.retention_days = retention_days
        self.attachments: AttachmentStore = None  # type: ignore[assignment]
        self.decisions = DecisionLedger()  # approvals and clarifications: pending, settled
        self.provenance = Provenance()  # the origin of the command behind each message, run start and run end
        self._sending: set[str] = set()
        self.drafts = DraftSaver(self.store, self.conversations.__contains__)  # streaming drafts, saved now and then
        self.persister = Persister(self.store, self.conversations, self.drafts)
        self.interrupted_runs: list[tuple[str, str]] = []
        # conversations deleted lately (``load_conversations`` reads none of them back)
        self.deleted: collections.OrderedDict[str, None] = collections.OrderedDict()
        self.durable_texts: list[DurableText] = []  # front ends' durable records of a run's text (drafts.py)
        self.durable_ends: list[DurableEnd] = []  # front ends' durable records of a run's end (drafts.py)
        self.durable_rows: list[DurableRows] = []  # front ends' durable records of the store's rows (drafts.py)
        self._interrupted_reported = False
        self.runs_ended: collections.Counter = collections.Counter()  # status -> runs this node ended (metrics)
        self.started = False
        # commands a core extension answers (bridge_core/push: push.register and friends), by type;
        # and the push notifier itself, when the composition root wired one (docs/push.md)
        self.extensions: dict[type, Callable[[Any, cmd.Origin], Any]] = {}
        self.push: Any = None
        # how events are numbered and commands routed (sequencing.py): this node alone, or the cluster
        # the composition root gives it with --bus (use_cluster), which front ends then reach as ``cluster``
        self.sequencing: Sequencing = LocalSequencing(self.hub, self.persister.persist, self.execute_here)
        self.cluster: Optional[ClusterLink] = None
        self.add_source(source)

    # --- lifecycle -----------------------------------------------------------

    def add_source(self, source: AgentSource) -> None:
        self.sources[source.name] = source
        source.attach(self)

    def use_cluster(self, cluster: ClusterLink) -> None:
        """Several nodes (bridge_core/scale/cluster.py): ``cluster`` sequences this bridge's events and
        routes its commands from now on (before ``start``)."""
        self.sequencing = self.cluster = cluster

    async def start(self) -> None:
        if not self.store.is_open:
            self.store.open()
        self.attachments = AttachmentStore(os.path.join(self.data_dir, "attachments"), self.store, self.retention_days)
        await self.attachments.start()  # (on a shared store, the table of their bytes)
        await self.sequencing.join()  # a bus joined before the store is loaded; what it delivers waits
        await self._restore_rows()
        self._load()
        await self._fail_interrupted()
        self.sequencing.joined()  # one node: persisted as the hub's first subscriber; several: where published
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
        await self.sequencing.stop()  # what the sources published last goes out first
        await self.tasks.close()
        self.drafts.close()
        self.store.close()
        self.started = False

    def call_soon(self, fn: Callable[[], Any]) -> None:
        asyncio.get_running_loop().call_soon(fn)

    def _load(self) -> None:
        """The list of conversations (each one's row and its last message's preview), not their
        messages: a transcript is read when something needs it (transcripts.py)."""
        self.load_conversations()
        now = time.time()
        for att in self.attachments.load_all():
            conv = self.conversations.get(att.conversation_id)
            if conv is not None and (att.expires_at is None or att.expires_at > now):
                conv.attachments[att.attachment_id] = att
        self._load_running(now)
        self.decisions.restore(self.store, self.conversations)

    def load_conversations(self) -> list[str]:
        """The conversations the store has that this node's state lacks, each from its row and its last
        message's preview (its transcript read when needed): every one at start (``_load``); with several nodes,
        after events the stream lost, those another node created meanwhile (bridge_core/scale/reload.py), never
        one deleted here lately (its deletion's write may not be committed yet). Their ids."""
        keep, sources, added = self.transcripts.cold, {}, []
        for cid, name, source, created, updated, last_active, session_id, preview in self.store.conversation_list():
            if cid in self.conversations or cid in self.deleted:
                continue
            conv = ConversationState(
                conversation_id=cid,
                name=name,
                source=sources.setdefault(source, source),  # one string per source, not one per conversation
                created_at=created,
                updated_at=updated,
                last_active=last_active,
                session_id=session_id,
                preview=preview or "",
            )
            keep(conv)
            self.conversations[cid] = conv
            added.append(cid)
        return added

    def _load_running(self, now: float) -> None:
        """Runs that were running when the process died are failed, never left running: each is put
        back as the conversation's active run, with the decisions it left pending, so that
        report_interrupted closes it by the one rule every run end follows (close_run)."""
        for run_id, cid, started in self.store.query(LEFT_OPEN, (ev.RUN_INTERRUPTED,)):
            if self.durable_ends and self.restore_end(cid, run_id) is not None:
                continue  # ended before the crash, as a front end holds (and a phone may have seen)
            if self.sequencing.interrupted_here(run_id):
                self.interrupted_runs.append((cid, run_id))  # else another node's run, going on there
            conv = self.conversations.get(cid)
            if conv is not None and conv.run is None:
                run = conv.run = ActiveRun(run_id=run_id, message_id=draft_message_id(run_id), started_at=started or now)
                # its saved draft (drafts.py): the text its completion keeps (the transcript, read later, leaves
                # an active run's unfinished message out: transcripts.py)
                saved = self.store.message_text(cid, run.message_id)
                if saved is not None:
                    run.draft = ev.Draft(saved)

    def restore_end(self, cid: str, run_id: str) -> Optional[list]:
        """A run the store left open whose end a front end's durable record holds (Loomi's journaled rows,
        durable before the core's writer committed the end: a phone may have its ``run.completed``; with several
        nodes, the frames of every node that rendered it): that end and its message's text are written, and the
        run is not closed again (a second end on every front end: event_twice, chaos seed 2002; with several
        nodes, once the stream lost it too, chaos seed 2103). As ``Cluster.read_ends`` does with the bus's
        record. An interrupted end (``interrupt``) with its notice where the record holds it, under the run's
        notice id, after the end (else the node that lost the close lacks the notice every other one holds:
        nodes_disagree, seed 2103). The events written (the end, then any notice), or None."""
        end = durable_end(run_id, self.durable_ends)
        if end is None or cid not in self.conversations:
            return None
        # (its completion, empty text or not: the one its close published, which the other nodes hold)
        self.persister.restore_message(cid, draft_message_id(run_id), end.text, end.ts)
        finished = ev.RunFinished(conversation_id=cid, run_id=run_id, status=end.status, error=end.error,
                                  text=end.text, ts=end.ts)  # fmt: skip
        self.persister.persist(0, finished)
        written: list = [finished]
        if end.error == ev.RUN_INTERRUPTED and end.notice is not None:
            notice = interrupt_notice(cid, run_id, *end.notice)
            self.persister.restore_message(cid, notice.message_id, notice.text, notice.ts)  # once, where it is
            written.append(notice)
        self.sequencing.restored_end(run_id)
        log.warning("run %s: its end (%s) restored from a front end's durable record", run_id, end.status)
        return written

    async def _restore_rows(self) -> None:
        """What a front end's durable record holds and the store never got (Loomi's journal, durable at once,
        the core's rows a writer's batch later: a kill -9 in between leaves a whole exchange, the task, the
        user's message, the run and its end, that a phone replays after the restart while the transcript
        lacks it; chaos, issue 41) is written back before the store is loaded, in order, once
        (``Persister.restore_rows``). ``_load_running`` then ends such a run as the record holds
        (``restore_end``) or closes it as interrupted with the longest durable text (``interrupt``)."""
        events = durable_rows(self.durable_rows)
        if not events:
            return
        added = await self.store.write(lambda c: Persister.restore_rows(c, events))
        if added:
            log.warning("%d row(s) a front end's durable record held and the store lacked were restored", added)

    async def _fail_interrupted(self) -> None:
        """Store the runs a crash cut short as failed (awaited: the loop keeps turning meanwhile), their
        close still pending (``CLOSE_PENDING``: no ``finished_at`` until their ``RunFinished`` is stored):
        a crash before ``report_interrupted`` closed them leaves them to the next start, never open for good."""
        if not self.interrupted_runs:
            return
        rows = [(ev.RUN_INTERRUPTED, r) for _, r in self.interrupted_runs]
        await self.store.write(lambda c: c.executemany("UPDATE runs SET status='failed', error=? WHERE run_id=?", rows))
        log.warning("%d run(s) interrupted by a restart were marked failed", len(rows))

    def report_interrupted(self) -> int:
        """Close the runs a crash interrupted (call once every front end is listening).

        ``_load`` marked them failed in the runs table and put each back as its
        conversation's active run; here each one gets a ``RunFinished`` failed,
        so ``close_run`` completes its message (with the longest text a durable
        record holds: the draft last saved before the crash, ``drafts.DraftSaver``,
        or what a front end kept of the deltas it sent, ``interrupt``) and resolves its pending decisions
        (decided_by ``restart``) on every front end, then a diagnostic notice
        says why.
        """
        if self._interrupted_reported:
            return 0
        self._interrupted_reported = True
        reported = 0
        for cid, run_id in self.interrupted_runs:
            conv = self.conversations.get(cid)
            if conv is None or conv.run is None or conv.run.run_id != run_id:
                continue  # gone, or closed meanwhile (a close its previous life published: scale/cluster.py)
            self.interrupt(cid, run_id, "This run was interrupted by a restart of the bridge and did not finish.")
            reported += 1
        return reported

    def add_durable_text(self, source: DurableText) -> None:
        """A front end's durable record of runs' text (``drafts.DurableText``), asked when a run is
        interrupted; added before ``start`` (a front end's ``prepare``)."""
        self.durable_texts.append(source)

    def add_durable_end(self, source: DurableEnd) -> None:
        """A front end's durable record of runs' ends (``drafts.DurableEnd``), asked at start for the runs
        the store left open; added before ``start`` (a front end's ``prepare``)."""
        self.durable_ends.append(source)

    def add_durable_rows(self, source: DurableRows) -> None:
        """A front end's durable record of the events behind the store's rows (``drafts.DurableRows``), asked
        at start before the store is loaded; added before ``start`` (a front end's ``prepare``)."""
        self.durable_rows.append(source)

    def let_go(self, conv: ConversationState, run_id: str) -> None:
        """Several nodes: another node ended ``run_id`` while this node's source ran it (this node taken for
        dead, scale/fence.py): stopped as a user's cancel stops it; its end goes nowhere (``publish``)."""

        async def cancel() -> None:
            try:
                await self.source_for(conv).cancel(conv, run_id, None)
                log.info("run %s: its agent's run stopped here (ended elsewhere)", run_id)
            except BridgeError:  # ended meanwhile, or a source that cannot cancel: nothing of it is sent
                log.info("run %s: its source did not cancel it", run_id)

        self.tasks.spawn(cancel(), name=f"let-go-{run_id}")

    def interrupt(self, cid: str, run_id: str, notice: str) -> None:
        """Close a run nobody runs any more (a restart, or its node died: scale/cluster.py) and say why.

        Its message is completed (``close_run``) with the longest text a durable record holds: the saved
        draft, or what a front end kept of the deltas it sent (``drafts.longest_text``)."""
        conv = self.conversations.get(cid)
        run = conv.run if conv is not None else None
        if run is not None and run.run_id == run_id and not run.completed and self.durable_texts:
            text = longest_text(run.text, run_id, self.durable_texts)
            if len(text) > len(run.text):
                run.draft = ev.Draft(text)
        # with several nodes, the close's events are kept in the store until the bus has them (scale/unsent.py)
        with self.cluster.closing(run_id) if self.cluster is not None else contextlib.nullcontext():
            self.publish(ev.RunFinished(conversation_id=cid, run_id=run_id, status="failed", error=ev.RUN_INTERRUPTED))
            self.publish(interrupt_notice(cid, run_id, notice))  # one id per run: a redo names the same message

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
        if self.cluster is not None and self.cluster.fenced(event):
            return 0  # a run another node ended while this node ran it: nothing more of it (scale/fence.py)
        t = type(event)
        if t in STAMPED and event.origin is None:
            event = self.provenance.stamp(event)
        if t is ev.RunFinished:
            self.close_run(event)
            self.runs_ended[event.status] += 1
        conv_id = getattr(event, "conversation_id", None)
        conv = self.conversations.get(conv_id) if conv_id is not None else None
        if conv is not None:
            conv.apply(event)
        if t in DECISION_EVENTS:
            self.decisions.fold(event, conv)
        seq = self.sequencing.publish(event)
        if t is ev.ConversationDeleted and seq:  # delivered by the hub already (0: as it comes back, fan_out)
            self._deleted(event)
        return seq

    def fan_out(self, event: Any, seq: int) -> None:
        """``event``, folded, to the hub as number ``seq``, given elsewhere (the bus's, for every node)."""
        self.hub.publish_at(seq, event)
        if type(event) is ev.ConversationDeleted:
            self._deleted(event)

    def _deleted(self, event: ev.ConversationDeleted) -> None:
        """A conversation's deletion delivered: its state goes, every subscriber having seen it."""
        self.conversations.pop(event.conversation_id, None)
        self.transcripts.forget(event.conversation_id)
        self.deleted[event.conversation_id] = None
        while len(self.deleted) > DELETED_MEMORY:
            self.deleted.popitem(last=False)

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
        why = decided_by_end(finished.status, finished.error)
        for request in [a for a in conv.approvals.values() if a.run_id == finished.run_id]:
            self.publish(self.decisions.settle_approval(request, why))
        for request in [c for c in conv.clarifications.values() if c.run_id == finished.run_id]:
            self.publish(self.decisions.settle_clarify(request, why))

    def approval_timed_out(self, approval_id: str, decided_by: str = "timeout") -> None:
        """An agent's own timeout (or its own decision) resolved an approval: denied, ``decided_by`` says why."""
        request = self.decisions.approval(approval_id, self.conversations)
        if request is not None:
            self.publish(self.decisions.settle_approval(request, decided_by))

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
        """``command`` carried out where it belongs (with several nodes, one about a run by the node running it)."""
        return await self.sequencing.execute(command, origin)

    async def execute_here(self, command: Any, origin: cmd.Origin) -> Any:
        """``command`` carried out by this node."""
        handler = HANDLERS.get(type(command))
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
        self.transcripts.new(conv)
        self.conversations[cid] = conv
        self.publish(ev.ConversationCreated(conversation_id=cid, name=conv.name, source=src, request_id=request_id))
        return conv
