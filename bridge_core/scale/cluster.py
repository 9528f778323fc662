"""Several nodes as one bridge: the bus wired into the core (docs/scale-out.md "Several live nodes").

With ``--bus`` (and a shared ``--store``) the composition root gives the ``Bridge`` a ``Cluster`` as its
sequencing (``Bridge.use_cluster``: the bridge's ``Sequencing`` interface, bridge_core/bridge/sequencing.py; on
the embedded default ``LocalSequencing``, which works exactly as before), and front ends reach it as
``bridge.cluster`` (``ClusterLink``). What changes:

- **Events.** ``Bridge.publish`` still folds an event into this node's state at once (the run-end rule, first
  answer wins and the run-active check stay synchronous where they are); then ``Cluster.publish`` persists it on
  this node, the event's origin, and hands ``serialize.to_dict(event)`` to the bus instead of the hub. Every
  node's hub publishes what the bus delivers, its own events and the other nodes' alike, in stream order, with
  the bus's cluster-wide number ``n`` as the hub's ``seq`` (``Bridge.fan_out``). Another node's event is folded
  into this node's state first (``_fold``: its conversation's state and the bridge's decision ledger,
  ``DecisionLedger.fold``, as ``Bridge.publish`` folds its own) and not persisted again.
- **Joining.** A node starts the bus (joining the stream ``JOIN_BACK`` seconds before its end), holds what it
  delivers, loads the store, then folds what it held and what follows, skipping what the store already had
  (``seen.py``): an event committed or not at load time is in this node's state exactly once.
- **Commands** that touch a run go to the node that runs it (``routing.Router``): cancel, pause, approval,
  clarification answer, deleting a conversation with a run, and a message into a session hosted elsewhere (a pi
  session: the node its plugin is connected to, asked of every node).
- **One run per conversation.** A send's run claims its conversation in the store before the source starts it
  (``start_run``: a unique index on a conversation's running row in ``cluster_runs``); two sends racing on two
  nodes, one gets in, the other ``run_active``.
- **A node dies.** Runs are recorded with their node (``cluster_runs``). Every node looks every ``SWEEP_EVERY``
  for nodes whose bus liveness key expired; one survivor claims a dead node's runs in the store (one ``UPDATE
  ... RETURNING``: whoever commits first gets the rows) and closes them as after a restart (``Bridge.interrupt``),
  and its holds (``holds.py``) in the same transaction; so for the runs a node's restart lost (adopt.py).
- **A run moves** when its agent reaches another node (a pi plugin saying hello there): ``move_run`` claims its
  row for the new node and tells every node (``moved``, in stream order); the node it left lets it go
  (``AgentSource.run_moved``). A node ending a run its agent no longer reaches asks the store first
  (``end_run``): of the two, one wins.
- **The number never goes back** (``numbering.ClusterNumber``): a reservation above every ``n`` given is
  kept in the store. Front ends derive cursors and seqs from ``n`` (docs/scale-out.md "The cluster-wide number").
- **Relays.** ``relay(front_end, data)``: a front end's own payload to the same front end on every other node,
  in stream order (``add_relay``); ``add_hosted(cls)``: a front end's command that runs on the node hosting its
  conversation's session, asked of every node like a message into such a session.
- **A close the store has** reaches the stream: its forms kept in the store until they are back (``unsent.py``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Awaitable, Callable, Optional

from ..bridge.bridge import LEFT_OPEN, Bridge
from ..bridge.decisions import EVENTS as DECISION_EVENTS
from ..bridge.tasks import TaskSet
from ..model import commands as cmd
from ..model import events as ev
from ..model.errors import BridgeError, RunActive, Unavailable
from ..model.serialize import UnknownEvent, from_dict, to_dict
from ..model.state import ConversationState
from . import adopt, foldwait, gone, holds, readback, runrows, started, unsent
from .bus import Bus
from .fence import Fence
from .numbering import ClusterNumber
from .routing import Router
from .seen import seen as _seen

log = logging.getLogger("agent_bridge.cluster")

NODE_TTL = 10.0  # the bus liveness key of a node: gone this long after its last beat when it dies
BEAT_EVERY = 2.5
SWEEP_EVERY = 1.0  # a dead node is noticed within NODE_TTL + SWEEP_EVERY (the contract: 15 s)
# after Redis lost its keys (the nodes' liveness keys with them) nobody is taken for dead this long: a node's key
# kept would have lived NODE_TTL, and a live node slow to beat again (stopped, a loaded machine) is not dead
# (chaos seed 2300: a node stopped 5 s just after a loss, its streaming run closed as interrupted by another)
LOST_GRACE = NODE_TTL
JOIN_BACK = 5.0  # seconds of stream a joining node folds again (writes its load may have missed)
MOVE_WAIT = 3.0  # s a node taking a run over that ended meanwhile waits for that end to come (move_run)

# this node's events of a run its store left open that its previous life published: written as they come back
RESTORED = (ev.RunFinished, ev.MessageCompleted, ev.ApprovalResolved, ev.ClarifyResolved)

NODE_GONE = "This run was interrupted: the bridge node running it stopped."
# s of stream read back for the last delta of a run this node closes as interrupted (its own after a restart,
# or a dead node's): its node died at most this long before (later, a survivor has closed it already)
TEXT_BACK = NODE_TTL + SWEEP_EVERY + JOIN_BACK

MIGRATIONS = [
    """
    CREATE TABLE cluster_runs(
        run_id TEXT PRIMARY KEY,
        conversation_id TEXT NOT NULL,
        node_id TEXT NOT NULL,
        state TEXT NOT NULL
    );
    CREATE INDEX cluster_runs_node ON cluster_runs(node_id, state);
    """,
    # one running run per conversation, cluster-wide: a run's start claims its conversation (claim())
    "CREATE UNIQUE INDEX cluster_runs_running ON cluster_runs(conversation_id) WHERE state='running'",
    holds.MIGRATION,  # what a node answers for besides its runs: one survivor inherits a dead node's (holds.py)
    gone.MIGRATION,  # the numbers a node's delivery passed over, known given: events gone for good (gone.py)
    gone.LIFE_MIGRATION,  # ... recorded against the life that passed over them (gone.py)
]


class Cluster:
    def __init__(self, bridge: Bridge, bus: Bus):
        self.bridge = bridge
        self.bus = bus
        self.node_id: str = bus.node_id
        self.runs: dict[str, tuple[str, str]] = {}  # run_id -> (its node, conversation_id), other nodes' runs
        self.deciders: dict[str, str] = {}  # pending approval/clarify id -> the node that asked (other nodes')
        self._own: collections.deque = collections.deque()  # (event, tag, ts) published here, not yet delivered
        self._held: Optional[list] = None  # deliveries held while joining
        self._loaded: dict[str, str] = {}  # run_id -> node, running runs as the store had them at join
        self._mine: frozenset = frozenset()  # this node's runs the store had open at join (closed here)
        self._left_open: set = set()  # those of them not ended yet (their ends: read_ends)
        self._ends: list = []
        self.tasks = TaskSet("cluster")
        self.taken_over = 0  # runs of dead nodes this node closed
        self.delivering_own = False  # the hub is publishing an event this node published (push: one node notifies)
        self._ended: dict[str, str] = {}  # conversation_id -> its last run this node saw end (claim())
        self.number = ClusterNumber(bridge.store, bus)  # the store's reservation above every n given
        self._relays: dict[str, Any] = {}  # front end name -> its on_relay(node, data)
        self._origins: dict[str, cmd.Origin] = {}  # run_id -> the command origin of another node's run (move_run)
        self._ending: dict[str, asyncio.Future] = {}  # run_id -> resolved when its end is folded here (move_run)
        self.holds = holds.Holds(bridge.store, self.node_id)  # what this node answers for besides its runs
        self.unsent = unsent.Unsent(bridge.store, self.node_id)  # closes the store has (Bridge.interrupt: closing)
        self.closing = self.unsent.closing
        self.gaps = gone.Gone(bridge, self.node_id, self.tasks)  # after a gap the stream left (gone.py)
        self.waits = foldwait.FoldWait(self._deliver, self.tasks)  # deliveries whose fold waits for the store
        if hasattr(bus, "on_passed"):
            bus.on_passed = self.gaps.passed
        self.lag: Optional[float] = None  # s from the last event's publish (its ts) to its delivery here (metrics)
        self.router = Router(bridge, bus, self.node_id, self.runs, self.deciders, self.tasks)  # commands' nodes
        # the text of runs this node closes as interrupted, as the stream's last delta of each holds it: what
        # the other nodes delivered (read_texts; a durable record of the core's, bridge_core/bridge/drafts.py)
        self.texts: dict[str, str] = {}
        bridge.add_durable_text(self.texts.get)
        self.execute = self.router.execute  # Sequencing: a command on the node it belongs to
        self.add_hosted = self.router.add_hosted
        self.restored_end = lambda run_id: started.let_go(self, run_id)  # (Bridge.restore_end: its claim let go)
        self.fence = Fence(bridge, self.node_id)  # this node's runs another node ended (fence.py)
        self.starts = adopt.Starts()  # other nodes' runs' starts as folded here (a restart may lose them: adopt.py)
        self.fenced = self.fence.fenced
        bridge.use_cluster(self)

    # --- joining, leaving ----------------------------------------------------------------------

    async def join(self) -> None:
        """Before the bridge loads the store: the schema, the bus joined (its deliveries held)."""
        store = self.bridge.store
        await store.amigrate("cluster", MIGRATIONS)
        await self.number.hold()
        self._held = []
        self.bus.on_relay = self._relayed
        await self.bus.start(self._deliver, self.router.on_command)
        await self.number.reserve()
        await started.restore_starts(store, self.bus, self.node_id)  # a run whose start the store never had
        # the runs open, then their nodes: a run in the first read has its node's row by the second (claimed
        # before it starts); a run started later is another node's, going on there (seed 2003: event_twice)
        left = store.query(LEFT_OPEN, (ev.RUN_INTERRUPTED,))
        self._loaded = dict(store.query("SELECT run_id, node_id FROM cluster_runs WHERE state='running'"))
        mine = {r for r, _, _ in left if self._loaded.get(r) in (None, self.node_id)}  # (no node: nobody's)
        self._mine, self._left_open = frozenset(mine), mine
        await self.read_ends(sorted(mine))  # the runs the bridge's load closes here (Bridge._load_running)
        await self.read_texts(sorted(mine))
        await self.unsent.read(self.bus)  # its previous life's closes the stream lacks: sent again (joined)

    def interrupted_here(self, run_id: str) -> bool:
        """A run the store has open: this node's own from before a restart (or nobody's), as at join?"""
        return run_id in self._mine

    def _node_of(self, run_id: str) -> Optional[str]:
        node = self._loaded.get(run_id)
        if node is None:  # a run started while this node joined
            row = self.bridge.store.query_one("SELECT node_id FROM cluster_runs WHERE run_id=?", (run_id,))
            node = row[0] if row is not None else None
        return node

    def joined(self) -> None:
        """After the bridge loaded the store: other nodes' runs noted, what the bus held folded in."""
        for conv in self.bridge.conversations.values():
            node = self._node_of(conv.run.run_id) if conv.run is not None else None
            if node is not None and not self.interrupted_here(conv.run.run_id):
                self.runs[conv.run.run_id] = (node, conv.conversation_id)
        for conv in self.bridge.conversations.values():  # decisions pending in other nodes' runs
            for table in (conv.approvals, conv.clarifications):
                for did, request in table.items():
                    owner = self.runs.get(request.run_id or "")
                    if owner is not None:
                        self.deciders[did] = owner[0]
        ends, self._ends = self._ends, []
        for data in ends:  # older than what the bus held (read_ends): folded, and written (_fold)
            event = self._fold(self.node_id, data)
            if type(event) is ev.Notification:  # a close's notice (read_ends): no run id to restore it by
                self.bridge.persister.persist(0, event)
        held, self._held = self._held or [], None
        for n, node, data in held:
            if self.waits.holds(n, node, data):  # as _deliver: behind one whose fold waits for the store
                continue
            if node != self.node_id and self.unsent.again(data):
                continue
            try:
                event = self._fold(node, data)
            except Unavailable:  # (a cold transcript's read while the store restarts: else the join failed)
                self.waits.wait(n, node, data)
                continue
            self.unsent.folded(data, node)
            if event is not None:
                self.bridge.fan_out(event, n)
        self.unsent.resend(self._own, self.bus)  # in the store already: to the bus, back as this node's (_own_event)
        self.tasks.spawn(self._watch(), name="cluster-watch")
        self.tasks.spawn(adopt.let_go_later(self.bridge.store, self.node_id), name="cluster-let-go-lost")

    async def stop(self) -> None:
        self.number.note_used()
        await self.tasks.close()
        await self.bus.stop()
        self.router.stop()

    # --- events ---------------------------------------------------------------------------------

    def publish(self, event: Any) -> int:
        """An event this node produced (folded already): persisted here, then to every node through the
        bus; 0 (its number is the bus's, as it comes back). A close's forms go in its row first (unsent.py)."""
        data = to_dict(event)
        self.unsent.note(data)
        self.bridge.persister.persist(0, event)
        t = type(event)
        if t is ev.RunStarted:
            row = (event.run_id, event.conversation_id, self.node_id)
            self.bridge.store.write_later(lambda c: runrows.run_started(c, *row))
        elif t is ev.RunFinished:
            self._ended[event.conversation_id] = event.run_id
            self._run_ended(event.run_id, self.node_id)
            self.bridge.store.execute_later("UPDATE cluster_runs SET state='done' WHERE run_id=?", (event.run_id,))
        elif t is ev.ConversationDeleted:
            self._ended.pop(event.conversation_id, None)
        self._own.append((event, data["event"], event.ts))
        self.bus.publish(data)
        return 0

    def _deliver(self, n: int, node: str, data: Any) -> None:
        if n > self.number.reservation.limit:
            self.number.renew(n)
        if self._held is not None:
            self._held.append((n, node, data))
            return
        if self.waits.holds(n, node, data):  # behind one whose fold waits for the store (foldwait.py)
            return
        if self.fence.late(node, data):  # of a run ended by another node before it came (fence.py)
            if node == self.node_id:
                self._own_event(data)  # (this node's: let go of it, not shown)
            return
        if node != self.node_id and self.unsent.again(data):  # a close's form sent again, held here (unsent.py)
            return
        ts = data.get("ts") if type(data) is dict else None
        if type(ts) is float:
            self.lag = time.time() - ts
        try:  # this node's own event (folded already), or another's folded now
            event, own = self._own_event(data) if node == self.node_id else (self._fold(node, data), False)
        except Unavailable:  # a cold transcript's read (seen.py) while the store restarts: nothing shown yet
            return self.waits.wait(n, node, data)
        if node == self.node_id:  # a close's form back from the bus (unsent.py)
            self.unsent.back(data)
        self.unsent.folded(data, node)
        if event is not None:  # (what fan_out raises is not retried: it may have been shown; foldwait.py)
            self.delivering_own = own
            try:
                self.bridge.fan_out(event, n)
            finally:
                self.delivering_own = False

    def _own_event(self, data: Any) -> tuple[Any, bool]:
        """This node's event back from the bus: the object it published (folded already), True."""
        own = self._own
        tag, ts = data.get("event"), data.get("ts")
        for i, (event, etag, ets) in enumerate(own):
            if etag == tag and ets == ts:
                if i:
                    log.warning("bus: %d event(s) of this node's never came back", i)
                for _ in range(i):
                    own.popleft()
                own.popleft()
                return event, True
            if i >= 64:
                break
        # not one this node published since it started (a duplicate, or its previous run's)
        return self._fold(self.node_id, data), False

    def _fold(self, node: str, data: Any) -> Any:
        """Another node's event into this node's state (as ``Bridge.publish`` folds its own).

        What the state already has is not folded again (``seen.py``): a joining node loads the store and gets the
        last ``JOIN_BACK`` s of the stream, whose events may or may not have been in the store when it read it (and
        the stream may still be delivering them after the node started serving). ``Unavailable``: see foldwait.py."""
        try:
            event = from_dict(data)
        except BridgeError:
            log.warning("bus: dropping an unreadable event from %s", node)
            return None
        t = type(event)
        if t is UnknownEvent:
            log.warning("bus: dropping an event this node does not know (%s, from %s)", event.event, node)
            return None
        bridge = self.bridge
        cid = getattr(event, "conversation_id", None)
        if t is ev.ConversationCreated and cid not in bridge.conversations:
            bridge.conversations[cid] = ConversationState(
                conversation_id=cid, name=event.name, source=event.source, created_at=event.ts, updated_at=event.ts
            )
        conv = bridge.conversations.get(cid) if cid is not None else None
        if t is ev.RunFinished and node != self.node_id and event.run_id not in self.runs and conv is not None:
            adopt.ended_from(self, node, event, conv)  # this node's run (it lost its claim), or one never seen start
        if conv is not None and not _seen(conv, event):
            conv.apply(event)
        if t in DECISION_EVENTS:
            bridge.decisions.fold(event, conv)
        if (t is ev.RunStarted or t is ev.UserMessageSent) and node != self.node_id:
            self.starts.note(event, data)  # (its node's restart may lose it: adopt.py)
        if t is ev.RunStarted:
            self.runs[event.run_id] = (node, event.conversation_id)
            if event.origin is not None:
                self._origins[event.run_id] = event.origin
        elif t is ev.RunFinished:
            self.runs.pop(event.run_id, None)
            self._run_ended(event.run_id, node)
            self._ended[event.conversation_id] = event.run_id
        elif t is ev.ConversationDeleted:
            self._ended.pop(event.conversation_id, None)
        if node == self.node_id and t in RESTORED and event.run_id in self._left_open:
            self._restore(event)  # its previous life's
        if t is ev.ApprovalRequested or t is ev.ClarifyRequested:
            did = event.approval_id if t is ev.ApprovalRequested else event.clarify_id
            if bridge.decisions.pending(did) is not None:  # (the ledger took it: its conversation has it)
                self.deciders[did] = node  # who decides: the node that asked (routing.Router)
        elif t is ev.ApprovalResolved or t is ev.ClarifyResolved:
            self.deciders.pop(event.approval_id if t is ev.ApprovalResolved else event.clarify_id, None)
        return event

    def _restore(self, event: Any) -> None:
        """The end (or completed message, or a decision's resolution) of a run of this node's that its previous
        life published and died before its store had it (a kill -9; a PostgreSQL restart holds a batch up to
        ``pgstore.RIDE_OUT``): written now; else a later start closes the run again, a second run end on every
        front end (event_twice), or resolves its decision again, denied by restart (decision_not_once)."""
        if type(event) is ev.MessageCompleted:  # (its row kept in place: written again, it would move last)
            self.bridge.persister.restore_message(event.conversation_id, event.message_id, event.text, event.ts)
            return
        self.bridge.persister.persist(0, event)
        if type(event) is ev.RunFinished:
            self._left_open.discard(event.run_id)
            self.bridge.store.execute_later("UPDATE cluster_runs SET state='done' WHERE run_id=?", (event.run_id,))

    async def read_ends(self, run_ids: list) -> None:
        """At join, for this node's runs the store left open: what ``read_end`` finds, folded (``joined``)."""
        for run_id in run_ids:
            try:
                self._ends += await self.read_end(run_id)
            except Exception:  # the bus away for a moment: closed as interrupted (the store says it is open)
                log.exception("cluster: reading the end of run %s from the bus failed", run_id)

    async def read_end(self, run_id: str) -> list:
        """Of a run the store has open, the end its node published (last ``TEXT_BACK`` s), the completion before, a
        close's notice after (seed 2003, nodes_disagree), first its decisions' resolutions: bus forms, oldest first.
        One pass over one window (``readback.RunBack``: read one after another, a busy stream moved the window on
        between the end and the completion, just older; chaos seed 2104, the run's message never written)."""
        back = readback.RunBack(run_id)
        await self.bus.newest(run_id.encode(), back, TEXT_BACK)
        if back.end is None:  # the stream lost it: as the other nodes delivered it (seed 3409), or none
            return unsent.reached_close(self.bridge.store, run_id) or back.decisions()
        end, done = back.end, back.done
        notice = None if end is None or end.get("error") != ev.RUN_INTERRUPTED else await self.bus.newest(
            str(end.get("conversation_id")).encode(), lambda d, e=end: readback.notice_of(d, e), TEXT_BACK)
        return back.decisions() + [d for d in (done, end, notice) if d is not None]

    # --- one run per conversation ---------------------------------------------------------------

    async def start_run(self, conv: ConversationState, run_id: str, start: Callable[[], Awaitable[Any]]) -> Any:
        """``start()`` (the source's ``send_message``) once this node holds ``conv`` cluster-wide.

        Two sends on one idle conversation on two nodes, within the bus's round trip, both pass
        each node's own run-active check; the store decides: the run's row in ``cluster_runs``
        is claimed before the source starts it, and the unique index on a conversation's
        running run lets one claim in. The loser gets ``run_active``, as on one node. A claim
        whose run never started (the source refused; the send cancelled while the claim waited in the
        store's queue, its client gone: that claim commits all the same) is let go, after it."""
        try:
            await self._claim(conv.conversation_id, run_id)  # a claim lost writes no row of run_id
            return await start()
        finally:
            if conv.last_run_id != run_id:  # never started: the conversation is free again
                self.bridge.store.execute_later(
                    "UPDATE cluster_runs SET state='done' WHERE run_id=? AND state='running'", (run_id,))  # fmt: skip

    async def _claim(self, cid: str, run_id: str) -> None:
        me, ended = self.node_id, self._ended.get(cid)

        def claim(c: Any) -> bool:
            if ended is not None:  # its end was seen here; the row's update may still be on its way
                c.execute("UPDATE cluster_runs SET state='done' WHERE run_id=?", (ended,))
            return runrows.holds_conversation(c, run_id, cid, me)

        if not await self.bridge.store.write(claim):
            raise RunActive()

    # --- a run moving to another node (docs/scale-out.md "A pi run follows its plugin") ----------

    async def move_run(self, conv: ConversationState) -> bool:
        """Take ``conv``'s running run over from the node running it: its agent (a pi plugin) reaches
        this node now. The store decides, as for a dead node's runs: the run's row moves here
        unless the run has ended (its node closed it: ``end_run``, or a survivor of its node did).
        Then every node learns its new owner (``moved``, in stream order before anything this node
        publishes for it) and the node that ran it lets it go without ending it
        (``AgentSource.run_moved``). False when the run has ended: this node first waits (at most
        ``MOVE_WAIT``) until that end is folded here, so nothing it publishes next comes before it."""
        run = conv.run
        if run is None:
            return False
        run_id, cid, me = run.run_id, conv.conversation_id, self.node_id

        def claim(c: Any) -> bool:
            if c.execute("UPDATE cluster_runs SET node_id=? WHERE run_id=? AND state='running' RETURNING run_id",
                         (me, run_id)).fetchone() is not None:  # fmt: skip
                return True
            if c.execute("SELECT run_id FROM cluster_runs WHERE run_id=?", (run_id,)).fetchone() is not None:
                return False  # ended
            # a row its node never committed (it died just after starting the run): the run is here now
            return runrows.holds_conversation(c, run_id, cid, me)

        if not await self.bridge.store.write(claim):
            if conv.run is not None and conv.run.run_id == run_id:
                ending = self._ending.setdefault(run_id, asyncio.get_running_loop().create_future())
                try:
                    await asyncio.wait_for(asyncio.shield(ending), MOVE_WAIT)
                except asyncio.TimeoutError:
                    log.warning("run %s ended elsewhere but its end has not come here", run_id)
                    self._ending.pop(run_id, None)
            return False
        self.runs.pop(run_id, None)
        self.bridge.provenance.moved_here(run_id, self._origins.pop(run_id, None))  # its end is stamped here now
        for table in (conv.approvals, conv.clarifications):  # this node decides what the run still asks
            for did, request in table.items():
                if request.run_id == run_id:
                    self.deciders.pop(did, None)
        self.bus.relay({"cl": "moved", "r": run_id, "c": cid})
        return True

    def _moved(self, node: str, data: dict) -> None:
        """Another node took a run over (``move_run``): commands for it go there now; this node's
        source, if it ran it, lets it go without ending it."""
        run_id, cid = data.get("r"), data.get("c")
        bridge = self.bridge
        conv = bridge.conversations.get(cid) if isinstance(cid, str) else None
        if conv is None or conv.run is None or conv.run.run_id != run_id:
            return  # ended here already
        self.runs[run_id] = (node, cid)
        bridge.provenance.moved_away(run_id)
        for table in (conv.approvals, conv.clarifications):
            for did, request in table.items():
                if request.run_id == run_id:
                    self.deciders[did] = node
        log.info("run %s moved to node %s", run_id, node)
        bridge.source_for(conv).run_moved(conv, run_id)

    async def end_run(self, run_id: str) -> bool:
        """Before this node ends a run its agent no longer reaches (a pi plugin gone from here): True
        when the run is still this node's (its row is marked done now), False when another node took
        it over (``move_run``) or closed it: then this node must not end it."""
        me = self.node_id

        def claim(c: Any) -> bool:
            if c.execute("UPDATE cluster_runs SET state='done' WHERE run_id=? AND node_id=? AND state='running' "
                         "RETURNING run_id", (run_id, me)).fetchone() is not None:  # fmt: skip
                return True
            # no row at all (its start's write failed): nobody took it over
            return c.execute("SELECT run_id FROM cluster_runs WHERE run_id=?", (run_id,)).fetchone() is None

        return bool(await self.bridge.store.write(claim))

    def _run_ended(self, run_id: str, node: str) -> None:
        self.fence.ended(run_id, node)  # what another node publishes of it later is dropped (fence.py)
        self._origins.pop(run_id, None)
        self.texts.pop(run_id, None)
        self.starts.forget(run_id)
        ending = self._ending.pop(run_id, None)
        if ending is not None and not ending.done():
            ending.set_result(None)

    # --- nodes that die -------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            try:
                await self.sweep()
            except Exception:  # the bus or the store away for a moment: the next sweep tries again
                log.exception("cluster: looking for dead nodes failed")

    async def sweep(self) -> int:
        """Close the runs of nodes whose liveness expired (one survivor closes each); how many here."""
        owners = {node for node, _ in self.runs.values()}
        owners.update(n for (n,) in self.bridge.store.query(
            f"SELECT node_id FROM cluster_runs WHERE state='running' UNION {holds.HOLDERS_SQL}"))  # fmt: skip
        owners.discard(self.node_id)
        if not owners:
            return 0
        live = set(await self.bus.live_nodes())
        if self._keys_lost(live):
            return 0
        closed = 0
        for node in sorted(owners - live):  # (a claim a restart lost, adopt.py: its node id is never live)
            closed += await self._take_over(node)
        return closed

    async def _take_over(self, dead: str) -> int:
        lost = adopt.is_lost(dead)  # claims a restart lost: those of runs this node folded (adopt.py)
        known = [(run_id, cid) for run_id, (node, cid) in self.runs.items() if node == dead]
        me = self.node_id
        if not lost and await asyncio.to_thread(self.bridge.store.end_sessions_of, dead):  # locks it held stopped
            log.warning("node %s is gone: its open store sessions ended", dead)

        def claim(c: Any) -> tuple:
            for run_id, cid in known:  # runs whose row the dead node never committed
                c.execute("INSERT OR IGNORE INTO cluster_runs(run_id, conversation_id, node_id, state) "
                          "VALUES(?,?,?,'running')", (run_id, cid, dead))  # fmt: skip
            return runrows.taken(c, me, dead), self.holds.claim(c, dead)

        won, held = await (adopt.claim(self, dead) if lost else self.bridge.store.write(claim))
        await started.restore_taken(self, won)  # the rows of a run the store lacks, an ended run's end (issue 41)
        await self.read_texts([run_id for run_id, _ in won])
        for run_id, cid in won:
            self.runs.pop(run_id, None)
            conv = self.bridge.conversations.get(cid)
            if conv is None or conv.run is None or conv.run.run_id != run_id:
                continue  # a claim whose run never began (it died starting it): nobody saw it, nothing to close
            log.warning("node %s is gone: closing its run %s", dead, run_id)
            self.bridge.interrupt(cid, run_id, NODE_GONE)
        self.taken_over += len(won)
        self.holds.inherited(held, dead)
        return len(won)

    async def read_texts(self, run_ids: list) -> None:
        """Before closing ``run_ids`` as interrupted: the text of each as the stream holds it, its last delta
        (or the completion of its message, where a previous life of this node closed it and died before its
        store had the close: closed again, with that text). A node restarted under its own name does not fold
        its previous life's entries, and a survivor may be behind in the stream, while other nodes delivered
        every delta the stream holds to their clients."""
        for run_id in run_ids:
            try:
                data = await self.bus.newest(run_id.encode(), lambda d, r=run_id: readback.last_text(d, r), TEXT_BACK)
            except Exception:  # the bus away for a moment: the other records (the draft) still count
                log.exception("cluster: reading the last text of run %s from the bus failed", run_id)
                continue
            if data is not None:
                self.texts[run_id] = data["draft"] if data["event"] == "TextDelta" else data["text"]

    def _keys_lost(self, live: set) -> bool:
        """Redis lost its keys lately (this node's own liveness key is gone, or the bus saw it within
        ``LOST_GRACE``): the other nodes' keys may be missing until their next beat, which a live node
        stopped or slowed a while gives late, so nobody is taken for dead."""
        if self.node_id not in live:
            self.bus.note_lost("this node's liveness key was gone")
            return True
        return self.bus.lost_recently(LOST_GRACE)

    # --- front ends' relays and hosted commands --------------------------------------------------

    def add_relay(self, front_end: str, on_relay: Any) -> None:
        """``on_relay(node, data)`` gets what ``front_end`` relays on every other node, in stream order."""
        self._relays[front_end] = on_relay

    def relay(self, front_end: str, data: Any) -> None:
        """An opaque payload of ``front_end`` for the same front end on every other node (not this one)."""
        self.bus.relay({"fe": front_end, "d": data})

    def _relayed(self, node: str, data: Any) -> None:
        if self._held is not None or not isinstance(data, dict):
            return  # while joining, a front end reads the store (what it relays later follows)
        if data.get("cl") == "moved":
            self._moved(node, data)
            return
        fn = self._relays.get(data.get("fe"))  # type: ignore[arg-type]
        if fn is not None:
            fn(node, data.get("d"))

    async def gone(self, nodes: Any) -> set:
        """Those of ``nodes`` whose liveness expired (none while Redis lost its keys lately: a live
        node's key may be missing until its next beat)."""
        live = set(await self.bus.live_nodes())
        return set() if self._keys_lost(live) else set(nodes) - live


def connect(bridge: Bridge, url: str, node_id: str, key: bytes) -> Cluster:
    """The cluster of ``bridge`` on the Redis bus at ``url``, its entries signed under the cluster
    ``key`` (``busauth.derive_key``); redis-py imported only here."""
    from .redisbus import RedisBus

    bus = RedisBus(url, node_id, key=key, ttl=NODE_TTL, every=BEAT_EVERY, join_back=JOIN_BACK)
    bridge.store.alive = lambda: time.monotonic() < bus.alive_until  # no node can have taken this one for dead
    bridge.store.node_id = node_id  # its sessions named after it (a survivor ends them: Cluster._take_over)
    return Cluster(bridge, bus)
