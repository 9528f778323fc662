"""A run its node's next life lost, closed by a node that folded it (docs/scale-out.md "A run its node's
restart lost").

A node's restart reads back from the stream the start of each claim it left running with no run in the store
(started.py ``restore_starts``). When the stream does not hold it either, its restart cannot tell a run nobody
saw start (it died starting it) from one every other node folded before Redis lost its keys. It let the claim
go at once, silently, and in chaos seed 3304 that was the second: n2 ran two runs while a stopped node held its
writer, so their starts and the user's messages never committed; Redis restarted as n2 was killed, and n2 was
back before anyone took it for dead. n1 and n3 had folded both starts: their phones showed the runs running and an
approval pending for good (``run_not_closed``, the approval never resolved in the stored lvmh events:
``decision_not_once``), and their transcripts held two user's messages the store and n2 never had
(``nodes_disagree``); a later send in the conversation took the run's place there silently.

So the restart marks such a claim *lost* (its node id ``<node>:lost``, never a live node's; still running, so
the conversation stays held) and lets it go only after ``ADOPT_WAIT`` (``let_go_later``). Every node's sweep
looks for lost claims among the runs it folded (``Cluster.runs``) and claims them in the store (one ``UPDATE``:
whoever commits first); the winner writes the run's start from what it folded (the user's message and the
run's start as the bus gave them, kept while the run runs: ``Starts``; its pending decisions from its state:
started.py ``restore_held``) and closes it by the one rule of a take-over (``Cluster._take_over``: as
interrupted, on every node and front end, its decisions resolved). A node that folds the end of a run it never
saw start reads that conversation back from the store (``unknown_end``): the restarted node, whose transcript
lacked the user's message that started it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any

from ..model import events as ev
from . import runrows

log = logging.getLogger("agent_bridge.cluster")

LOST = ":lost"  # a lost claim's node id: ``<node>:lost`` (a colon is in no node id: kit/config.py)
# s a restart waits before letting go a lost claim nobody adopted (nobody saw it start): every node sweeps each
# cluster.SWEEP_EVERY, none for cluster.LOST_GRACE (10 s) after Redis lost its keys, as it had when the claim was lost
ADOPT_WAIT = 20.0
KEEP = 1024  # runs whose start forms are kept at once (the oldest go first: their end folded, or lost long ago)


def lost_name(node: str) -> str:
    return node + LOST


def is_lost(name: str) -> bool:
    return name.endswith(LOST)


class Starts:
    """The start of each run of another node's this node folded, as the bus gave it: the user's message that
    started it and its ``RunStarted`` (bus forms), until the run's end is folded here."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._forms: collections.OrderedDict[str, dict] = collections.OrderedDict()

    def note(self, event: Any, data: dict) -> None:
        """A ``UserMessageSent`` or ``RunStarted`` of another node's, folded here (``Cluster._fold``)."""
        run_id = event.run_id
        if run_id is None:
            return
        forms = self._forms.get(run_id)
        if forms is None:
            forms = self._forms[run_id] = {}
            while len(self._forms) > self.keep:
                self._forms.popitem(last=False)
        forms["asked" if type(event) is ev.UserMessageSent else "start"] = data

    def forget(self, run_id: str) -> None:
        self._forms.pop(run_id, None)

    def of(self, run_id: str) -> list:
        """The run's start forms, the user's message first; [] unless its start is among them."""
        forms = self._forms.get(run_id) or {}
        if "start" not in forms:
            return []
        return [d for d in (forms.get("asked"), forms["start"]) if d is not None]


async def claim(cluster: Any, marker: str) -> tuple[list, list]:
    """The lost claims of ``marker``'s node among the runs this node folded, claimed here (marked done, as a
    take-over's, ``Cluster._take_over``): (run_id, conversation_id) of those won, and no holds. A run this node
    never folded is not claimed (nobody here can write its start or tell its phones): its restart lets it go
    (``let_go_later``)."""
    node = marker[: -len(LOST)]
    known = sorted(run_id for run_id, (owner, _) in cluster.runs.items() if owner == node)
    if not known:
        return [], []
    me = cluster.node_id
    rows = await cluster.bridge.store.write(lambda c: runrows.taken(c, me, marker, known))
    won = [(str(run_id), str(cid)) for run_id, cid in rows]
    for run_id, _ in won:
        log.warning("run %s: node %s's restart lost it (its start in neither the store nor the stream); closed here",
                    run_id, node)
    return won, []


async def let_go_later(store: Any, node: str, wait: float = ADOPT_WAIT) -> int:
    """After ``wait``, this node's lost claims nobody adopted let go (nobody saw them start): how many (a store
    away meanwhile: none, logged; the next start reads them back again)."""
    try:
        if store.query_one("SELECT 1 FROM cluster_runs WHERE node_id=? AND state='running'",
                           (lost_name(node),)) is None:  # fmt: skip
            return 0
        await asyncio.sleep(wait)
        count = await store.write(lambda c: c.execute(
            "UPDATE cluster_runs SET state='done' WHERE node_id=? AND state='running'", (lost_name(node),)).rowcount)
    except Exception:
        log.exception("cluster: letting go the claims this node's restart lost failed")
        return 0
    if count:
        log.info("cluster: %d claim(s) whose start no node folded let go", count)
    return int(count or 0)


def ended_from(cluster: Any, node: str, event: ev.RunFinished, conv: Any) -> None:
    """``node``'s end of a run that is not another node's running here (``Cluster._fold``): this node's own, which
    it lost its claim to (its source stopped: fence.py), or one it never saw start (``unknown_end``)."""
    if conv.run is not None and conv.run.run_id == event.run_id:
        cluster.fence.ended_elsewhere(conv, event.run_id, node)
    else:
        unknown_end(cluster, event, conv)


def unknown_end(cluster: Any, event: ev.RunFinished, conv: Any) -> None:
    """Another node's end of a run this node never saw start (neither running here nor ended before): its
    conversation's transcript read back from the store, where the node that closed it wrote the run's start and
    the user's message (``claim``, started.py ``restore_held``) before it published the end."""
    if cluster.fence.knows(event.run_id):  # ended here before (a second end)
        return
    try:
        added = cluster.bridge.transcripts.refresh(conv.conversation_id)
    except Exception:  # the store away for a moment: the next gap's read-back reads it again
        log.exception("cluster: reading back conversation %s after a run's end failed", conv.conversation_id)
        return
    if added:
        log.warning("cluster: %d message(s) of run %s, which this node never saw start, read back from the store",
                    added, event.run_id)
