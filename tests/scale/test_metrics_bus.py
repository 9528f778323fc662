"""Metrics with a bus (bridge_core/kit/metrics.py, docs/operations.md): two nodes on the test's PostgreSQL
and Redis, a run on one; the other's scrape says how far behind the bus it is and what it delivered."""

from __future__ import annotations

import math

from tests.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp
from tests.core.test_metrics import REQUIRED, names, scrape, v
from tests.waiting import until


async def test_bus_lag_is_scraped_on_every_node(service_factory, engines, tmp_path):
    store, bus = engines
    a, b = [await service_factory(adapters=("pheby",), store=store, bus=bus, node_id=name, data_dir=tmp_path / name,
                                  metrics_port=0) for name in ("a", "b")]  # fmt: skip
    app = PhebyApp(f"ws://127.0.0.1:{a.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    try:
        cid = await app.create("Scraped")
        await app.chat(cid, "hello nodes")
        await app.wait_until(lambda: app.view(cid).run is None and app.view(cid).transcript())
        await until(lambda: cid in b.bridge.conversations and b.bridge.cluster.lag is not None, what="b delivered")
    finally:
        await app.close()
    for svc, node in ((a, "a"), (b, "b")):
        m = await scrape(svc.metrics_port)
        assert set(REQUIRED) <= names(m) and "agent_bridge_bus_lag_seconds" in names(m)
        lag = v(m, "agent_bridge_bus_lag_seconds")
        assert not math.isnan(lag) and 0 <= lag < 60  # plausible: the nodes share this machine's clock
        assert v(m, "agent_bridge_bus_events_delivered_total") > 0
        (info,) = [dict(labels) for name, labels in m if name == "agent_bridge_build_info"]
        assert info["node"] == node  # which node a series is from, whatever Prometheus calls the target
    # the run ran on a: counted there once, not again where its end was delivered
    assert v(await scrape(a.metrics_port), "agent_bridge_runs_total", status="completed") == 1
    assert v(await scrape(b.metrics_port), "agent_bridge_runs_total", status="completed") == 0
