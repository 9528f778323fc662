"""``python -m bench chaos --keep DIR`` keeps a run's nodes' logs beside its history (bench/chaos.py
``keep_logs``): the history alone could not say why a restarted node left its run open (chaos seeds 2003
and 2015, docs/performance.md "Chaos"), and the run's directory, its logs with it, is removed after it."""

from __future__ import annotations

import os

from bench.chaos import keep_logs
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET
from tests.nemesis.world import EMBEDDED, World


def test_every_life_of_every_node_is_kept_and_holds_no_secret(tmp_path):
    world = World(str(tmp_path / "run"), EMBEDDED).boot()
    try:
        world.kill9("solo")  # a second life: each one's output is its own file
        world.procs["solo"].start()
    finally:
        world.shutdown()
    dest = keep_logs(world, str(tmp_path / "keep" / "history-1-embedded"))
    assert dest == str(tmp_path / "keep" / "history-1-embedded.logs")
    kept = sorted(os.listdir(os.path.join(dest, "solo")))
    assert kept == ["stderr.1.log", "stderr.2.log", "stdout.1.log", "stdout.2.log"], kept
    text = "".join(open(os.path.join(dest, "solo", name)).read() for name in kept)
    assert text == "".join(open(os.path.join(world.procs["solo"].log_dir, name)).read() for name in kept)
    assert "agent_bridge" in text  # the nodes' own lines, what an investigation reads
    assert PHEBY_SECRET not in text and LVMH_TOKEN not in text
