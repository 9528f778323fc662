"""What a failing case shows of the nodes' side (world.py ``lines``): their warnings from the loggers
asked for, each named by its node, the newest last; INFO lines and other loggers left in the files."""

from __future__ import annotations

from tests.nemesis.world import CLUSTER, World


class _Output:
    def __init__(self, text: str):
        self.text = text

    def all_output(self) -> str:
        return self.text


def test_lines_are_the_nodes_warnings_from_the_loggers_asked_for(tmp_path):
    world = World(str(tmp_path), CLUSTER)
    world.procs = {
        "n1": _Output("2026-12-06 16:13:11,303 WARNING agent_bridge.bus: bus: Redis lost its keys\n"
                      "2026-12-06 16:13:11,487 INFO agent_bridge.bus: bus: event 9 came after 4\n"
                      "2026-12-06 16:13:11,500 WARNING agent_bridge.core: something else\n"),
        "n2": _Output("2026-12-06 16:13:11,872 WARNING agent_bridge.loomi.cluster: closing 1 phone\n"),
    }
    assert world.lines("agent_bridge.bus", "agent_bridge.loomi") == [
        "n1: 2026-12-06 16:13:11,303 WARNING agent_bridge.bus: bus: Redis lost its keys",
        "n2: 2026-12-06 16:13:11,872 WARNING agent_bridge.loomi.cluster: closing 1 phone",
    ]
    assert world.lines("agent_bridge.bus", most=0) == []
