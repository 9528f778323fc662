"""A serving process's interpreter settings (bridge_core/kit/runtime.py), applied by Service.start."""

from __future__ import annotations

import sys

from bridge_core.kit import runtime
from bridge_core.bridge.demo import DemoAgent
from cli.config import build_config
from cli.app import Service


async def test_a_started_service_hands_the_gil_over_at_the_short_interval(tmp_path):
    """The store's writer thread takes the GIL back from a busy loop within SWITCH_INTERVAL at each
    SQLite step: Service.start sets it (CPython's default, 5 ms, held a run's first frames ~20 ms)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    cfg = build_config({"data_dir": str(tmp_path), "adapters": "loomi", "loomi_port": 0, "host": "127.0.0.1",
                        "metrics_port": "off"}, {})
    svc = Service(cfg, DemoAgent())
    try:
        await svc.start()
        assert abs(sys.getswitchinterval() - runtime.SWITCH_INTERVAL) < 1e-9
        assert runtime.SWITCH_INTERVAL <= 0.0001
    finally:
        await svc.stop()
        sys.setswitchinterval(before)
