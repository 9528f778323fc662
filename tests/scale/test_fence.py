"""The fence's rules, pure (bridge_core/scale/fence.py): what a node drops of a run another node ended."""

from __future__ import annotations

from bridge_core.model import events as ev
from bridge_core.scale.fence import Fence


class _Bridge:
    def __init__(self) -> None:
        self.let_go_runs: list = []

    def let_go(self, conv, run_id: str) -> None:
        self.let_go_runs.append(run_id)


def _delta(run_id: str) -> dict:
    return {"event": "TextDelta", "run_id": run_id, "conversation_id": "c"}


def test_a_run_lost_here_is_stopped_once_and_nothing_more_of_it_is_published():
    bridge = _Bridge()
    fence = Fence(bridge, "n1")
    fence.ended_elsewhere(object(), "r1", "n2")
    fence.ended_elsewhere(object(), "r1", "store")  # learnt twice (stream and read-back): stopped once
    assert bridge.let_go_runs == ["r1"]
    assert fence.fenced(ev.RunFinished(conversation_id="c", run_id="r1", status="cancelled"))
    assert not fence.fenced(ev.RunFinished(conversation_id="c", run_id="r2", status="completed"))
    assert not fence.fenced(ev.Notification(conversation_id="c", message_id="n-r1", text="x"))  # no run id


def test_events_of_an_ended_run_from_another_node_are_dropped_as_they_come():
    fence = Fence(_Bridge(), "n3")
    fence.ended("r1", "n2")  # n2 took n1 for dead and closed r1
    assert fence.late("n1", _delta("r1"))  # n1's deltas published before it learnt it
    assert not fence.late("n2", _delta("r1"))  # the ender's own
    assert not fence.late("n1", {"event": "RunFinished", "run_id": "r1"})  # a second end: not this rule's
    assert not fence.late("n1", _delta("r2"))  # another run
    assert not fence.late("n1", "not a dict")


def test_after_a_read_back_end_only_this_nodes_own_events_are_dropped():
    fence = Fence(_Bridge(), "n1")
    fence.ended("r1", "store")  # read back from the store after a gap (reload.py): the real end may be late
    assert not fence.late("n2", _delta("r1"))  # the ender's events, late, still come
    assert fence.late("n1", _delta("r1"))  # this node's own, published before it learnt it
