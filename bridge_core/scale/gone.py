"""What a node does once its delivery passed over numbers the stream lost (docs/scale-out.md "Catching up").

The bus (redisbus.py, catchup.py) holds a gap, asks every live node for what it wrote in between, and
delivers what came back; what did not come back is either a jump of the numbering (after a loss of
Redis's keys) or events gone for good (``Gap.lost``: numbers known given). Then, before what follows is
delivered (``passed``):

- **The node's state is read again from the store**, a durable record of what every node's events did:
  a transcript this node holds in memory may lack a message whose event the stream lost (chaos seeds
  2000 and 2003: ``nodes_disagree``, a node missing a user's message or a whole run), so what the store
  has that a transcript in memory lacks is added to it, in the one order (``Transcripts.refresh``), once
  this node's own writes are committed, and again ``AGAIN`` s later. Whatever the gap was: after a mere
  jump this costs a read per transcript in memory.
- **Events gone for good are said**: their numbers are recorded as a hole of this node's *life*
  (``cluster_holes``: whatever this process rendered from the stream lacks them; ``life``, nodes.new_life: a
  node restarted under its own name joins 5 s back and passes over its previous life's entries, which that
  life's rows hold), and every front end's
  hook is called (``hooks``): Loomi closes the sockets of the phones this node numbers, and a hello
  whose numbering crossed a hole, or whose catch-up would be served over one, is answered
  ``truncated`` (loomi_adapter/cluster.py, history.py).
- **Numbers nobody knows of** (above the highest known given: every node behind when Redis lost its
  keys, and the writer gone) are a jump of the numbering or events nobody knows were given: the core's
  store tells which (``happened``: something done strictly between the events on either side; up to now,
  less what the events read after the gap carry, when a node asked did not answer). Events, and
  they are said as gone; a jump, and nobody is told anything.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable, Optional

import attrs

from ..bridge.tasks import TaskSet
from ..model.serialize import to_dict
from . import reload
from .nodes import new_life

log = logging.getLogger("agent_bridge.cluster")

MIGRATION = """
CREATE TABLE cluster_holes(
    node_id TEXT NOT NULL,
    n_from INTEGER NOT NULL,
    n_to INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX cluster_holes_to ON cluster_holes(n_to);
"""
# the life whose delivery passed over the numbers (nodes.new_life); NULL in a hole recorded before: every life of
# ``node_id`` (a phone numbered by any of them across it is told, never left silent)
LIFE_MIGRATION = "ALTER TABLE cluster_holes ADD COLUMN life TEXT"

AGAIN = 20.0  # s after a gap the store is read again (pgstore.py RIDE_OUT: an origin's write held that long)
KEEP_HOLES = 7 * 24 * 3600.0  # s a hole is kept (a phone away longer is past its replay window anyway)

Hook = Callable[[list], None]  # the ranges (first, last) of numbers gone


class Gone:
    def __init__(self, bridge: Any, node_id: str, tasks: TaskSet):
        self.bridge = bridge
        self.node_id = node_id
        self.life = new_life(node_id)  # this process's life: the holes it records are its own (a Loomi source)
        self.tasks = tasks
        self.hooks: list[Hook] = []  # front ends told of events gone (loomi_adapter/server.py)
        self.refreshes = 0  # state read again after a gap (tests, metrics)

    def passed(self, gap: Any, lost: list) -> None:
        """The bus passed over the numbers strictly between ``gap.lo`` and ``gap.hi`` (catchup.Gap); ``lost``:
        those known gone. Above the highest known given, what the store records done before the event after
        the gap (``happened``) says whether the numbers there were events too, gone, or a jump."""
        self.tasks.spawn(self._refresh(), name="cluster-refresh")
        try:
            top, t_top = gap.known()
            if not lost and not gap.open and top + 1 < gap.hi and t_top is not None and \
                    self._unknown_happened(gap, t_top):  # fmt: skip
                lost = [(top + 1, gap.hi - 1)]
                log.warning("bus: events %d to %d came from no node and the store records what they did: gone "
                            "for good", top + 1, gap.hi - 1)  # fmt: skip
        except Exception:  # the store unreadable now: only what is known gone is said
            log.exception("cluster: looking for events gone after a gap failed")
        if lost:
            self._said(lost)

    def _unknown_happened(self, gap: Any, t_top: float) -> bool:
        """Whether the store records something done where the numbers nobody knows of (above ``t_top``'s) may
        be. Every node asked answered: between the events on either side, as ever. A node asked did not (killed,
        stopped): what it did is known to nobody, and its events may be stamped after every event read after
        the gap (chaos seed 2018: those were another node's, queued while Redis was away and stamped no later
        than the last event before the gap; the window between was empty while the store held the silent node's
        run). Its numbers were given before now, so up to now, counting only what the events read after the gap
        lack (``held_in``; the bus read the stream for the ``REFETCH_WAIT`` s it waited: what every live node
        published meanwhile, a run streaming across a jump of the numbering with its draft among it). From
        ``t_top`` itself, not ``EDGE`` after it: a node's rows bear its events' times and ``t_top`` is the latest
        of every event delivered or found before the gap, so a row stamped after it is of an event not delivered
        before the gap, and the silent node's run may well be done within ``EDGE`` of it (a demo run takes under
        a millisecond: tests/scale/test_gone_empty_window.py failed about one run in four so)."""
        if gap.complete():
            t_after = gap.after()
            return t_after is not None and happened(self.bridge.store, t_top, t_after)
        return happened(self.bridge.store, t_top, time.time(), held_in(gap.events_after()), since=0.0)

    def _said(self, lost: list) -> None:
        now = time.time()
        rows = [(self.node_id, self.life, a, b, now) for a, b in lost]

        def write(c: Any) -> None:
            c.executemany("INSERT INTO cluster_holes(node_id, life, n_from, n_to, at) VALUES(?,?,?,?,?)", rows)
            c.execute("DELETE FROM cluster_holes WHERE at<?", (now - KEEP_HOLES,))

        self.bridge.store.write_later(write)
        for hook in list(self.hooks):
            try:
                hook(lost)
            except Exception:
                log.exception("cluster: telling a front end of events gone failed")

    async def _refresh(self) -> None:
        """Twice: at once (this node's own writes committed first), and once more ``AGAIN`` s later (an
        origin's write held by a PostgreSQL restart is committed by then). The transcripts in memory, then the
        conversations, run ends and decisions' resolutions the store records that this node lacks (reload.py),
        then the transcripts again if a run was ended (its completion is in the store)."""
        for wait in (0.0, AGAIN):
            await asyncio.sleep(wait)
            await self.bridge.store.aflush()
            added = self.bridge.transcripts.refresh()
            try:
                cluster = self.bridge.cluster
                more = reload.read_back(self.bridge, self.node_id, lambda e: cluster._fold("store", to_dict(e)),
                                        cluster.deciders, AGAIN)  # fmt: skip
            except Exception:  # the store unreadable now: the next pass reads again
                log.exception("cluster: reading the state back from the store after a gap failed")
                more = reload.ReadBack()
            if more.runs:
                added += self.bridge.transcripts.refresh()
            self.refreshes += 1
            if added:
                log.warning("cluster: %d message(s) the stream lost read back from the store", added)
            if more:
                log.warning("cluster: read back from the store after a gap: %d conversation(s), %d run end(s), "
                            "%d decision(s) resolved", more.conversations, more.runs, more.decisions)  # fmt: skip


def holes(store: Any, above: int) -> list[tuple[str, int, int]]:
    """The holes recorded whose last number is above ``above``: (whose, first, last); ``whose``: the life that
    passed over them (nodes.new_life), or the bare node id for a hole recorded before lives were (every life of
    that node's; loomi_adapter/history.py ``passed_by``)."""
    return [(r[1] or r[0], int(r[2]), int(r[3])) for r in store.query(
        "SELECT node_id, life, n_from, n_to FROM cluster_holes WHERE n_to>?", (above,))]  # fmt: skip


EDGE = 0.02  # s off each end of a window ``happened`` looks in: two nodes' events may be stamped out of order
LOOK = 200  # rows of the window ``happened`` compares with what is held (more: something is surely missing)


@attrs.frozen
class Held:
    """What the events a node serves after a gap carry (the runs they start and end, the messages they
    hold): a run's start lost as it streamed and sent again by its node after the loss is numbered after
    the gap yet stamped before its end, so the store shows it in the gap's window though nothing is missing."""

    starts: frozenset = frozenset()  # run ids whose start is held
    ends: frozenset = frozenset()  # run ids whose end is held
    messages: frozenset = frozenset()  # message ids held

    def message(self, message_id: str) -> bool:
        """A run's message (its saved draft, its completion) is held with the run's start or end."""
        if message_id in self.messages:
            return True
        run_id = message_id[len("draft-"):] if message_id.startswith("draft-") else None
        return run_id is not None and (run_id in self.starts or run_id in self.ends)


def held_in(events: list) -> Held:
    """What bus events (as read: dicts tagged ``event``) carry: the runs they start and end, the messages they
    hold (a run's deltas its saved draft: a run streaming across a jump of the numbering is no event lost)."""
    starts, ends, messages = set(), set(), set()
    for e in events:
        if type(e) is not dict:
            continue
        kind, run_id, message_id = e.get("event"), e.get("run_id"), e.get("message_id")
        if kind == "RunStarted" and type(run_id) is str:
            starts.add(run_id)
        elif kind == "RunFinished" and type(run_id) is str:
            ends.add(run_id)
        if type(message_id) is str:
            messages.add(message_id)
    return Held(frozenset(starts), frozenset(ends), frozenset(messages))


def happened(store: Any, t0: float, t1: float, held: Optional[Held] = None, since: float = EDGE) -> bool:
    """Whether the store records something done strictly between times ``t0`` and ``t1`` (less ``since`` after
    ``t0``, ``EDGE`` before ``t1``) that ``held`` lacks: a message written (a user's, a completion, a run's saved
    draft), a run started or ended. The durable record of events no node's delivery or rows hold: anything there, and
    they were events, gone for good; nothing (or only what the events served after the gap carry), and
    their numbers were a jump of the numbering (after Redis lost its keys)."""
    t0, t1 = t0 + since, t1 - EDGE
    if t1 <= t0:
        return False
    held = held or Held()
    messages = store.query("SELECT message_id FROM messages WHERE ts>? AND ts<? LIMIT ?", (t0, t1, LOOK))
    if len(messages) >= LOOK or any(not held.message(str(r[0])) for r in messages):
        return True
    runs = store.query("SELECT run_id, started_at, finished_at FROM runs WHERE (started_at>? AND started_at<?) OR "
                       "(finished_at>? AND finished_at<?) LIMIT ?", (t0, t1, t0, t1, LOOK))  # fmt: skip
    if len(runs) >= LOOK:
        return True
    for run_id, started, finished in runs:
        if t0 < started < t1 and run_id not in held.starts:
            return True
        if finished is not None and t0 < finished < t1 and run_id not in held.ends:
            return True
    return False
