"""What a node reads back from the store after a gap the stream left, besides its transcripts (gone.py
``_refresh``; docs/scale-out.md "Catching up").

Events gone for good may have created a conversation, resolved a decision or ended a run: no entry tells
this node, and before it kept them as they were for good (chaos seed 2018: a conversation created in the gap
unknown on the node behind, ``nodes_disagree``; an approval denied on another node kept pending and its run
kept running there, ``run_not_closed``, a client's answer told ``approval_not_found``). The store is the
durable record of what every node's events did, so after the gap, one query per kind:

- **conversations** the store has and this node does not know are loaded the way a start loads them
  (``Bridge.load_conversations``: never one deleted here lately);
- **runs** this node holds running, another node's, that the store shows ended are ended here as the store
  says (status, error, time): their decisions go with them;
- **decisions** this node holds pending are resolved when their run, another node's, ended in the store (its
  end settled them: a later start in the conversation may have taken the run's place here), or, another node's,
  when their pending row is gone (``decisions.PENDING_KEY``: dropped when resolved, ``decisions.settled``), unless asked
  less than ``settle_after`` s ago (the asking node's write of that row may not be committed yet: it is looked
  at again on the next pass).

What is read back is folded into this node's state as the bus's events are (``fold``: the cluster's fold),
and sent to nobody: the events themselves, if they were only late, come after and are delivered as ever; if
gone, the front ends were told of the hole (gone.py) and what they read next is this state.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Container

import attrs

from ..bridge.bridge import decided_by_end
from ..bridge.decisions import PENDING_KEY
from ..model import events as ev

Fold = Callable[[Any], None]  # an event into this node's state, as another node's (cluster.py ``_fold``)


@attrs.define
class ReadBack:
    conversations: int = 0
    runs: int = 0
    decisions: int = 0

    def __bool__(self) -> bool:
        return bool(self.conversations or self.runs or self.decisions)


def read_back(bridge: Any, node_id: str, fold: Fold, theirs: Container, settle_after: float) -> ReadBack:
    """Conversations, run ends and decisions' resolutions the store records that this node's state lacks,
    folded in (see the module's doc); ``theirs``: the pending decisions other nodes asked (``Cluster.deciders``:
    this node's own are its agents' to settle). What was read back, by kind."""
    done = ReadBack(conversations=len(bridge.load_conversations()))
    ends = ended(bridge, node_id)
    done.runs = ended_runs(bridge, fold, ends)
    done.decisions = settled_decisions(bridge, fold, theirs, ends, time.time() - settle_after)
    return done


def ended(bridge: Any, node_id: str) -> dict:
    """The runs the store shows ended, another node's (``cluster_runs``), among those this node holds running and
    those its pending decisions belong to: run id -> (status, error, finished_at)."""
    runs = {conv.run.run_id for conv in list(bridge.conversations.values()) if conv.run is not None}
    runs.update(request.run_id for _, request in pending(bridge) if request.run_id)
    if not runs:
        return {}
    marks = ",".join("?" * len(runs))
    return {r[0]: tuple(r[1:]) for r in bridge.store.query(
        "SELECT r.run_id, r.status, r.error, r.finished_at FROM runs r LEFT JOIN cluster_runs c ON c.run_id=r.run_id "
        f"WHERE r.finished_at IS NOT NULL AND (c.node_id IS NULL OR c.node_id<>?) AND r.run_id IN ({marks})",
        (node_id, *runs))}  # fmt: skip


def ended_runs(bridge: Any, fold: Fold, ends: dict) -> int:
    """Runs this node holds running that the store shows ended (``ends``): ended here as it says."""
    count = 0
    for conv in list(bridge.conversations.values()):
        run = conv.run
        if run is None or run.run_id not in ends:
            continue
        status, error, finished = ends[run.run_id]
        fold(ev.RunFinished(conversation_id=conv.conversation_id, run_id=run.run_id, status=status, error=error,
                            ts=float(finished)))  # fmt: skip
        count += 1
    return count


def settled_decisions(bridge: Any, fold: Fold, theirs: Container, ends: dict, before: float) -> int:
    """Decisions this node holds pending whose run the store shows ended (``ends``, another node's: settled by
    that end, as ``Bridge.close_run`` settles them; one put back at this node's start is in no ``theirs``), or,
    asked by another node (``theirs``) before ``before``, whose pending row the store dropped (resolved: denied
    here, not accepted; the store keeps no answer)."""
    waiting = pending(bridge)
    if not waiting:
        return 0
    rows = {str(k)[len(PENDING_KEY):] for (k,) in bridge.store.query(
        "SELECT key FROM settings WHERE key LIKE ?", (PENDING_KEY + "%",))}  # fmt: skip
    ledger, settled = bridge.decisions, 0
    for did, request in waiting:
        if ledger.pending(did) is None:
            continue
        end = ends.get(request.run_id)
        if end is not None:
            why = decided_by_end(end[0], end[1])
        elif did in theirs and did not in rows and request.ts < before:
            why = "remote"
        else:
            continue
        settle = ledger.settle_approval if type(request) is ev.ApprovalRequested else ledger.settle_clarify
        fold(settle(request, why))
        settled += 1
    return settled


def pending(bridge: Any) -> list:
    """The decisions this node holds pending: (id, its request)."""
    ledger, out = bridge.decisions, []
    for table, kind in ((ledger.approvals, "approvals"), (ledger.clarifications, "clarifications")):
        for did, cid in list(table.items()):
            conv = bridge.conversations.get(cid)
            request = getattr(conv, kind).get(did) if conv is not None else None
            if request is not None:
                out.append((did, request))
    return out
