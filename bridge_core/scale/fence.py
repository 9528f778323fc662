"""A run this node runs that another node ended (issue 41, docs/scale-out.md "A node dies").

A node stopped longer than ``NODE_TTL`` (a SIGSTOP, a frozen VM) is taken for dead: a survivor claims its runs in
the store and closes them as interrupted (``Cluster._take_over``). Resumed, the node learns it from the stream
(the survivor's ``RunFinished``, folded: ``Cluster._fold``) or from the store's read-back after a gap
(readback.py, folded the same way). Its claim is lost for good: its source's run is stopped as a user's cancel
stops it (``Bridge.let_go``), and whatever the source still emits for that run, its cancelled end included,
goes nowhere: ``Bridge.publish`` drops it before it is folded, persisted or sent (``fenced``), said once at
warning. What it published before it learnt it (a delta due as it resumed, before the stream's end was folded)
comes after that end in the stream: every node drops it as it comes (``late``: an event of an ended run from a node
other than the one that ended it). Before, the node went on streaming: deltas after the end, a second completion and a second end on every
surface (chaos seed 2300: event_twice, turn_out_of_order, nodes_disagree)."""

from __future__ import annotations

import collections
import logging
from typing import Any

log = logging.getLogger("agent_bridge.cluster")

MEMORY = 1024  # runs lost this way remembered (the oldest forgotten: their source stopped long ago)


class Fence:
    def __init__(self, bridge: Any, node_id: str) -> None:
        self.bridge, self.node_id = bridge, node_id
        self._lost: collections.OrderedDict = collections.OrderedDict()  # run_id -> dropping said already
        self._enders: collections.OrderedDict = collections.OrderedDict()  # run_id -> the node that ended it

    def ended(self, run_id: str, node: str) -> None:
        """``node`` ended ``run_id`` (its end published here, or folded: "store" for a read-back's)."""
        self._enders.setdefault(run_id, node)
        while len(self._enders) > MEMORY:
            self._enders.popitem(last=False)

    def knows(self, run_id: str) -> bool:
        """Was ``run_id``'s end folded or published here (among the last ``MEMORY``)?"""
        return run_id in self._enders

    def late(self, node: str, data: Any) -> bool:
        """Is ``data`` (an event's bus form, from ``node``) one of a run another node ended before it came (dropped
        at delivery, neither folded nor shown)? A read-back's end ("store") drops this node's own only: the ender's
        events, late, still come (reload.py). A second end is not one (the store's rows are each node's)."""
        run_id = data.get("run_id") if type(data) is dict else None
        ender = self._enders.get(run_id) if type(run_id) is str else None
        if ender is None or node == ender or data.get("event") == "RunFinished":
            return False
        if ender == "store" and node != self.node_id:
            return False
        log.warning("run %s: dropping a %s of node %s after its end", run_id, data.get("event"), node)
        return True

    def ended_elsewhere(self, conv: Any, run_id: str, node: str) -> None:
        """``node`` ended ``run_id``, which this node's source runs: stopped here, nothing more of it sent."""
        if run_id in self._lost:
            return
        self._lost[run_id] = False
        while len(self._lost) > MEMORY:
            self._lost.popitem(last=False)
        log.warning("run %s was ended by node %s (this node taken for dead): stopping it here", run_id, node)
        self.bridge.let_go(conv, run_id)

    def fenced(self, event: Any) -> bool:
        """Is ``event`` one of a run this node lost (dropped: ``Bridge.publish``)?"""
        run_id = getattr(event, "run_id", None)
        if run_id is None or run_id not in self._lost:
            return False
        if not self._lost[run_id]:
            self._lost[run_id] = True
            log.warning("run %s: dropping what this node still publishes for it (ended elsewhere)", run_id)
        return True
