"""A run its node claimed and died before its store had its start (docs/scale-out.md "A node coming back closes
its own runs, once").

A send claims its conversation in ``cluster_runs`` (committed before the source starts the run:
``Cluster.start_run``); the run's row in ``runs``, the user's message and the run's end come later, in the
writer's next batches. A kill -9 before those commit (a batch waiting on a slow or locked PostgreSQL) leaves
this node's claim running and no run in the store, while every other node folded the start from the stream
and shows the run running, its phones streaming it. The node's restart closed only the runs its store had
open, and it was live again before anyone took it for dead, so nobody ever closed that run (chaos seed 2003:
``run_not_closed``, ``event_missing``, a run accepted 0.5 s before its node was killed). A short run ended
before the kill lost its completion the same way: its end is read back from the stream only for a run the
store has open (``Cluster.read_ends``; ``transcript_contradicts_client``).

So at join, before the open runs are read, each claim of this node's with no run in the store is looked up
in the stream (its last ``BACK`` s): the run's start found, it and the user's message that started it are
written where the store lacks them (``Persister.restore_rows``), and the run is one the store left open,
closed by the one rule (``Bridge._load_running``: as interrupted, or with the end its previous life
published), its decisions the bus holds pending written with it (chaos seed 2304: their pending rows, written
as lazily, lost with the start, the close resolved nothing and every phone kept the approval pending); not found,
nobody saw it start and the claim is let go (dropped, if let go already). A claim
already let go counts too: another node that folded the run's end lets its claim go at its next send in the
conversation (``Cluster._claim``), the run still missing from the store (chaos seed 2015: the node stopped
right after a short run, then killed, its batches with the whole exchange never committed, and a phone's next
send through another node; ``transcript_contradicts_client``, the run every phone got complete in no
transcript).

The conversations the stream created lately and the store lacks go first, at join and at a take-over alike: a
conversation's creation leaves on the bus before its row commits, so a node killed in between left it shown on
every other node and in no store (chaos seed 2100: ``nodes_disagree``), and a start goes only into a conversation
the store holds.
"""

from __future__ import annotations

import logging
from typing import Any

from ..bridge.decisions import pending_row
from ..bridge.persist import Persister
from ..model import events as ev
from ..model.errors import BridgeError
from ..model.ids import draft_message_id
from ..model.serialize import from_dict, to_dict
from . import adopt
from .readback import StartBack

log = logging.getLogger("agent_bridge.cluster")

# s of stream read back for a lost start: a batch is held up to pgstore.py RIDE_OUT (20 s) through a PostgreSQL
# restart, and a node is restarted within the restart's own window (cluster.py TEXT_BACK, 16 s)
BACK = 40.0

# running, or let go by another node that saw the run end (``Cluster._claim``: chaos seed 2015, the whole exchange
# lost with the node's batches, every phone having got it)
# (this node's own, and those of its claims a restart marked lost: adopt.py)
CLAIMS_SQL = ("SELECT run_id, state FROM cluster_runs WHERE node_id IN (?, ?) AND "
              "NOT EXISTS (SELECT 1 FROM runs WHERE runs.run_id=cluster_runs.run_id)")  # fmt: skip


async def restore_starts(store: Any, bus: Any, node_id: str) -> int:
    """The starts (with their user's messages) of ``node_id``'s claimed runs the store lacks, read back from
    the stream and written; a running claim whose start the stream does not hold marked lost, for a node that
    folded it to close (adopt.py: the stream may have lost it with Redis's keys; let go after ``adopt.ADOPT_WAIT``
    if nobody does), a let-go one dropped (not read back at every start). The conversations the store lacks first
    (a start goes only into a conversation the store holds). The runs restored."""
    await restore_created(store, bus)
    restored, lost = 0, adopt.lost_name(node_id)
    for run_id, state in store.query(CLAIMS_SQL, (node_id, lost)):
        found = await restore_start(store, bus, run_id)
        if found is False:  # nobody here knows its start: a node that folded it closes it (adopt.py)
            await store.write(lambda c, r=run_id, s=state: c.execute(
                "UPDATE cluster_runs SET node_id=? WHERE run_id=? AND state='running'" if s == "running" else
                "DELETE FROM cluster_runs WHERE run_id=? AND state='done'", (lost, r) if s == "running" else (r,)))
        restored += 1 if found else 0
    return restored


async def restore_taken(cluster: Any, won: list) -> None:
    """A survivor's take-over of a dead node's claims (``Cluster._take_over``, ``won``: (run_id, conversation_id),
    marked done this node's): what the dead node's restart does for them (issue 41). Its restart, later than the
    take-over (a loaded machine), finds no claim of its own left, and this node closes only a run still running
    here: a run that ended before the kill, its rows never committed, was written by nobody. So the start of each
    claim with no run in the store is read back and written (``restore_start``), before a run still running is
    closed as interrupted (its close then lands on its row); and a run that ended here (folded from the stream)
    whose row the store has open gets the end its node published, as the restart's load does (``Cluster.read_end``,
    ``Cluster._restore``). Whoever comes first, the dead node's restart or this, the other finds the rows written
    (each written where the store lacks it; an end written twice is the same end). The conversations the store
    lacks first, as the restart's (``restore_created``: a node that stays down wrote them nowhere)."""
    await _skipped(restore_created(cluster.bridge.store, cluster.bus), "the conversations created lately")
    for run_id, cid in won:
        await _skipped(_read_back(cluster, run_id, cid), f"run {run_id}")


async def _skipped(read_back: Any, what: str) -> None:
    """One read-back of a take-over, whatever it raises (the store restarting: ``Unavailable``) logged and skipped,
    so the take-over still closes every run it won (``Cluster._take_over``: one still running here as interrupted,
    as before the read-backs). Not retried: the claims are this node's and done already, so nobody else closes
    them; the store's own write already rode a restart out (pgstore.py ``RIDE_OUT``); and the dead node's
    restart's load reads the same back (``restore_starts``, ``Bridge._load_running``)."""
    try:
        await read_back
    except Exception:
        log.exception("cluster: reading back %s at a take-over failed: skipped", what)


async def _read_back(cluster: Any, run_id: str, cid: str) -> None:
    """``restore_taken`` for one run the take-over won."""
    store, bridge = cluster.bridge.store, cluster.bridge
    if store.query_one("SELECT 1 FROM runs WHERE run_id=?", (run_id,)) is None and \
            await restore_start(store, cluster.bus, run_id) is False:  # fmt: skip
        await restore_held(cluster, run_id, cid)  # the stream lost it too: as this node folded it (adopt.py)
    conv = bridge.conversations.get(cid)
    if conv is not None and conv.run is not None and conv.run.run_id == run_id:
        ended_elsewhere(cluster, cid, run_id)  # else still running: closed as interrupted (Cluster._take_over)
        return
    if conv is None:
        return
    if store.query_one("SELECT 1 FROM runs WHERE run_id=? AND finished_at IS NULL", (run_id,)) is None:
        return  # ended in the store, or never began
    try:
        ends = await cluster.read_end(run_id)
    except Exception:  # the bus away for a moment: left open, the next load closes it
        log.exception("cluster: reading the end of run %s from the bus failed", run_id)
        return
    if not ends:  # the stream lost it too (Redis lost its keys): a front end's durable record may hold it
        bridge.restore_end(cid, run_id)
    for data in ends:  # written as the node's restart writes its previous life's (Cluster._restore)
        try:
            cluster._restore(from_dict(data))
        except BridgeError:
            log.warning("cluster: an end of run %s read back from the bus is unreadable", run_id)


async def restore_created(store: Any, bus: Any) -> int:
    """The conversations created in the stream's last ``BACK`` s (and not deleted since) that the store lacks,
    written (chaos seed 2100: a send creating its conversation on a node killed 27 ms later; the creation went
    out on the bus at once, its row waited in the writer's batch, so the other nodes showed the conversation
    while the store, and so every node loading it since, never had it: ``nodes_disagree``). At every join, of
    any node's: a row the store has stays as it is (``Persister.restore_rows``). The rows added."""
    newest: dict = {}  # conversation id -> its newest creation or deletion in the window (bus form)

    def note(data: Any) -> bool:
        if type(data) is dict and data.get("event") in ("ConversationCreated", "ConversationDeleted"):
            newest.setdefault(data.get("conversation_id"), data)
        return False  # read on: every one in the window

    try:
        await bus.newest(b'"Conversation', note, BACK)
    except Exception:  # the bus away for a moment: nothing written (the rows' own writes may have committed)
        log.exception("cluster: reading the conversations created lately from the bus failed")
        return 0
    events = []
    for data in reversed(list(newest.values())):  # oldest first, as they were created
        if data["event"] == "ConversationCreated":
            try:
                events.append(from_dict(data))
            except BridgeError:
                log.warning("cluster: a conversation's creation read back from the bus is unreadable")
    added = await store.write(lambda c, e=events: Persister.restore_rows(c, e)) if events else 0
    if added:
        log.warning("cluster: %d conversation(s) the store lacked read back from the bus", added)
    return added


def ended_elsewhere(cluster: Any, cid: str, run_id: str) -> bool:
    """A dead node's run still running here whose end a front end's durable record holds (another node's Loomi
    frames: it rendered the end this node never got, the stream having lost it, and the dead node's store never
    had it; chaos seed 2103, a completed run closed again as interrupted by the survivor, its approval denied
    after it was accepted): that end written (``Bridge.restore_end``; an interrupted end's notice with it) and
    folded here, sent to nobody (the other nodes had it: as a read-back from the store, reload.py). True when it
    ended so."""
    written = cluster.bridge.restore_end(cid, run_id)
    if written is None:
        return False
    finished = written[0]
    done = ev.MessageCompleted(conversation_id=cid, message_id=draft_message_id(run_id), text=finished.text,
                               run_id=run_id, ts=finished.ts)  # (as its close published it, before its end)
    for event in (done, *written):  # (an interrupted end's notice after it)
        cluster._fold("store", to_dict(event))
    return True


def let_go(cluster: Any, run_id: str) -> None:
    """A run the store had open that this node's load ended as a front end's durable record holds it
    (``Bridge.restore_end``: the stream lost its end too): its rows written already, its claim let go here (else
    every send in its conversation is ``run_active`` for good), as ``Cluster._restore`` does for an end the stream
    gave back."""
    cluster._left_open.discard(run_id)
    cluster.bridge.store.execute_later("UPDATE cluster_runs SET state='done' WHERE run_id=?", (run_id,))


async def restore_start(store: Any, bus: Any, run_id: str) -> Any:
    """The start of ``run_id`` (and the user's message that started it) read back from the stream's last ``BACK``
    s and written where the store lacks them, with the run's decisions the bus holds pending (asked, never resolved:
    their pending rows lost with the start, chaos seed 2304), so that the load puts them back into the run
    (``DecisionLedger.restore``) and its close resolves them on every front end: the rows added (0: the store had
    them), False when the stream does not hold the start, None when it could not be read (the claim stays as it
    is)."""
    back = StartBack(run_id)  # one pass over one window (readback.py)
    try:
        await bus.newest(run_id.encode(), back, BACK)
    except Exception:  # the bus away for a moment: the claim stays as it is
        log.exception("cluster: reading the start of run %s from the bus failed", run_id)
        return None
    if back.start is None:
        return False
    try:
        events = [from_dict(d) for d in (back.asked, back.start) if d is not None]
        pending = [from_dict(d) for d in back.pending()]
    except BridgeError:
        log.warning("cluster: the start of run %s read back from the bus is unreadable", run_id)
        return None
    return await _write_start(store, run_id, events, pending, "read back from the bus")


async def restore_held(cluster: Any, run_id: str, cid: str) -> int:
    """The start of ``run_id`` as this node folded it (the user's message and the run's start, kept as the bus gave
    them: ``adopt.Starts``), with the decisions it holds pending in it, written where the store lacks them: for a
    run whose start the stream lost too (adopt.py; a dead node's, in a take-over). The rows added."""
    conv = cluster.bridge.conversations.get(cid)
    try:
        events = [from_dict(d) for d in cluster.starts.of(run_id)]
    except BridgeError:
        log.warning("cluster: the start of run %s held here is unreadable", run_id)
        return 0
    if not events or conv is None:
        return 0
    pending = [r for table in (conv.approvals, conv.clarifications) for r in table.values() if r.run_id == run_id]
    return await _write_start(cluster.bridge.store, run_id, events, pending, "written as this node folded it")


async def _write_start(store: Any, run_id: str, events: list, pending: list, whence: str) -> int:
    """A lost start's rows (``events``: the user's message, the run's start) and its pending decisions, written where
    the store lacks them (``_restore_rows``), said where any was added (``whence``): the rows added."""
    added = await store.write(lambda c: _restore_rows(c, events, pending))
    if added:
        log.warning("run %s: its start, lost with its node's previous life, %s (%d decision(s) pending)", run_id,
                    whence, len(pending))  # fmt: skip
    return added


def _restore_rows(c: Any, events: list, pending: list) -> int:
    """A write: the start's rows the store lacks, then its run's pending decisions' rows where the run's row is
    written (a decision the store resolved has no run of its own left open to go into: ``DecisionLedger._restore``)."""
    added = Persister.restore_rows(c, events)
    if pending and c.execute("SELECT 1 FROM runs WHERE run_id=? AND finished_at IS NULL",
                             (pending[0].run_id,)).fetchone() is not None:  # fmt: skip
        for e in pending:
            c.execute(*pending_row(e))
    return added
