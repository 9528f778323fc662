"""The ``agent_bridge_*`` families of the Prometheus endpoint (bridge_core/kit/metrics.py), read from the
running bridge at each scrape. A node imports this module, and prometheus_client with it, at its endpoint's
first scrape (``metrics.bridge_registry``): a node nobody scrapes holds neither (the library's import is
about 2.6 MB of a node's memory, docs/performance.md "Per-node memory").
"""

from __future__ import annotations

import importlib.metadata
import math
import platform
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

if TYPE_CHECKING:
    from ..bridge.bridge import Bridge

PREFIX = "agent_bridge"
RUN_STATUSES = ("completed", "failed", "cancelled")
PUSH_RESULTS = ("ok", "retry", "gone", "drop")  # push/channels.outcome


def version() -> str:
    try:
        return importlib.metadata.version("agent-bridge")
    except importlib.metadata.PackageNotFoundError:
        return "0"


def _counter(name: str, doc: str, labels: Iterable[str], values: Iterable[tuple[tuple, float]]) -> CounterMetricFamily:
    family = CounterMetricFamily(f"{PREFIX}_{name}", doc, labels=list(labels))
    for label_values, value in values:
        family.add_metric(list(label_values), value)
    return family


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", doc, value=value)


class BridgeCollector:
    """Every ``agent_bridge_*`` family, read from the running bridge at each scrape."""

    def __init__(self, bridge: "Bridge", frontends: Mapping[str, Any], notifier: Any = None, node_id: str = ""):
        self.bridge = bridge
        self.frontends = frontends  # name -> FrontEnd (the started ones)
        self.notifier = notifier
        self.node_id = node_id

    def collect(self) -> Iterable[Any]:
        yield InfoMetricFamily(f"{PREFIX}_build", "The running agent-bridge",
                               value={"version": version(), "python": platform.python_version(),
                                      "node": self.node_id})  # fmt: skip
        yield from self._frontends()
        yield from self._conversations()
        yield from self._push()
        yield from self._bus()
        yield from self._store()

    def _frontends(self) -> Iterable[Any]:
        fes = sorted(self.frontends.items())
        conns = GaugeMetricFamily(f"{PREFIX}_connections", "Open authenticated sockets", labels=["front_end"])
        for name, fe in fes:
            conns.add_metric([name], fe.connections())
        yield conns
        yield _counter("frames_sent", "Frames written to clients' sockets", ["front_end"],
                       (((name,), fe.counts.frames_sent) for name, fe in fes))  # fmt: skip
        yield _counter("replay_events", "Events resent to a client catching up (Loomi replay, lvmh ?after=)",
                       ["front_end"], (((name,), fe.counts.replay_events) for name, fe in fes))  # fmt: skip
        yield _counter("auth_failures", "Wrong credentials presented", ["front_end"],
                       (((name,), fe.limiter.wrong_total) for name, fe in fes))  # fmt: skip

    def _conversations(self) -> Iterable[Any]:
        bridge = self.bridge
        ended = bridge.runs_ended
        statuses = list(RUN_STATUSES) + sorted(set(ended) - set(RUN_STATUSES))
        yield _counter("runs", "Runs ended on this node, by status", ["status"],
                       (((s,), ended.get(s, 0)) for s in statuses))  # fmt: skip
        asked: list[float] = []  # one pass: a scrape with 10,000 conversations takes a few ms (bench/metrics_cost.py)
        clarifications = active = 0
        for conv in bridge.conversations.values():
            if conv.approvals:
                asked += [a.ts for a in conv.approvals.values()]
            if conv.clarifications:
                clarifications += len(conv.clarifications)
            if conv.run is not None:
                active += 1
        yield _gauge("approvals_pending", "Approvals waiting for an answer", len(asked))
        yield _gauge("approvals_oldest_age_seconds", "How long the oldest pending approval has waited (0: none)",
                     max(0.0, time.time() - min(asked)) if asked else 0.0)  # fmt: skip
        yield _gauge("clarifications_pending", "Clarifications waiting for an answer", clarifications)
        yield _gauge("runs_active", "Conversations with a run under way", active)
        yield _gauge("conversations", "Conversations known", len(bridge.conversations))

    def _push(self) -> Iterable[Any]:
        deliveries = getattr(self.notifier, "deliveries", None)
        if deliveries is None:
            return
        results = deliveries.results
        cfg = deliveries.cfg
        channels = {c for c, on in (("webpush", cfg.web_push), ("ntfy", cfg.ntfy_url), ("webhook", cfg.webhook_url))
                    if on} | {c for c, _ in results}  # fmt: skip
        yield _counter("push_deliveries", "Push attempts by channel and result (ok, retry, gone, drop)",
                       ["channel", "result"],
                       (((c, r), results.get((c, r), 0)) for c in sorted(channels) for r in PUSH_RESULTS))  # fmt: skip
        yield _gauge("push_queued", "Notifications waiting for their endpoint", deliveries.queued())
        stats = deliveries.stats
        yield CounterMetricFamily(f"{PREFIX}_push_dropped", "Notifications given up (expired, refused, overflow)",
                                  value=stats["dropped"] + stats["overflow"])  # fmt: skip

    def _bus(self) -> Iterable[Any]:
        cluster = getattr(self.bridge, "cluster", None)
        if cluster is None:
            return
        lag = cluster.lag
        yield _gauge("bus_lag_seconds", "From the last delivered event's publish to its delivery here",
                     math.nan if lag is None else max(0.0, lag))  # fmt: skip
        bus = cluster.bus
        yield CounterMetricFamily(f"{PREFIX}_bus_events_delivered", "Events the bus delivered here",
                                  value=getattr(bus, "delivered", 0))  # fmt: skip
        dropped = getattr(bus, "dropped", None) or {}
        yield _counter("bus_dropped", "Bus entries dropped, by reason", ["reason"],
                       (((str(k),), v) for k, v in sorted(dropped.items())))  # fmt: skip
        yield CounterMetricFamily(f"{PREFIX}_runs_taken_over", "Runs of dead nodes this node closed",
                                  value=cluster.taken_over)  # fmt: skip

    def _store(self) -> Iterable[Any]:
        store = self.bridge.store
        yield _gauge("store_write_failing", "1 while the store's last write failed (disk full, read-only, away)",
                     1 if getattr(store, "failed", None) is not None else 0)  # fmt: skip
        yield CounterMetricFamily(f"{PREFIX}_store_commits", "Store commits", value=getattr(store, "commits", 0))


__all__ = ["PREFIX", "BridgeCollector", "version"]
