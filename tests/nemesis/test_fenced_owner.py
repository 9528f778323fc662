"""The nemesis checker on a device whose node was stopped while the phone moved to another node
(tests/nemesis/cases.py ``claimed_while_stopped``; docs/scale-out.md "Fenced ownership"): no gap, no
seq or event twice, no ``truncated`` under the window, every run whole on every surface."""

from __future__ import annotations

from . import cases
from .test_nemesis import judge


async def test_a_phone_moving_while_its_node_is_stopped_mid_stream(cluster):
    judge(await cases.claimed_while_stopped(cluster, seed=4109))
