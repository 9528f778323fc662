"""The Prometheus endpoint of ``agent-bridge serve`` (docs/operations.md).

Nothing is counted for it on the hot path: ``BridgeCollector`` reads, at scrape time, what the
bridge keeps anyway (the conversations' pending decisions, each front end's open sockets and
``FrontEndCounts``, the runs ended by status, the push deliveries' results, the bus's lag and
drops, the store's state) and yields gauge and counter families from it, on a registry of its
own (never prometheus_client's global one). The only additions elsewhere are int adds where
something happens once: a write of frames (``outbox.Outbox._sent``), a replay, a run's end, a
push attempt, a bus delivery.

``MetricsServer`` serves ``GET /metrics`` in the Prometheus text format on its own port,
loopback by default, like an exporter. With a ``[metrics] token`` (required off loopback,
``config.parse_metrics``) a scrape presents it as ``Authorization: Bearer``: compared in
constant time, a wrong one answered at the address's next slot like every wrong credential
(``security.AuthLimiter``). On loopback without a token a request must name a loopback
``Host``: a web page cannot read it through DNS rebinding.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import platform
import time
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.process_collector import ProcessCollector

from .frontend import close_listener, listen
from .security import AuthLimiter, bearer_token, client_address, host_is_loopback, is_loopback, same_secret

if TYPE_CHECKING:
    import ssl

    from ..bridge.bridge import Bridge
    from .config import Config

log = logging.getLogger("agent_bridge.metrics")

PREFIX = "agent_bridge"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes
RUN_STATUSES = ("completed", "failed", "cancelled")
PUSH_RESULTS = ("ok", "retry", "gone", "drop")  # push/channels.outcome
REFUSED = b'{"error":{"code":"rate_limited","message":"Too many unauthenticated connections from this address"}}'


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


def bridge_registry(bridge: "Bridge", frontends: Mapping[str, Any], notifier: Any = None,
                    node_id: str = "") -> CollectorRegistry:
    """A registry of our own: the bridge's families and this process's (``agent_bridge_process_*``)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BridgeCollector(bridge, frontends, notifier, node_id))
    ProcessCollector(namespace=PREFIX, registry=registry)
    return registry


class MetricsServer:
    """``GET /metrics`` on its own port (module docstring: who may read it)."""

    def __init__(self, registry: CollectorRegistry, cfg: "Config"):
        self.registry = registry
        self.host = cfg.metrics.host
        self.token = cfg.metrics.token
        self.limiter = AuthLimiter(rate=cfg.wrong_auth_rate, cap=cfg.unauth_per_address, refusal_body=REFUSED)
        self.runner: Optional[web.AppRunner] = None
        self.listener: Any = None
        self.port: Optional[int] = None

    async def start(self, port: int, ssl_context: "Optional[ssl.SSLContext]" = None) -> int:
        """Listen (PortInUse when it cannot); the bound port."""
        app = web.Application(client_max_size=1024)
        app.router.add_get("/metrics", self.handle)
        self.runner, self.listener, self.port = await listen(app, "metrics", self.limiter, self.host, port,
                                                             ssl_context)  # fmt: skip
        return self.port

    async def stop(self) -> None:
        runner, listener, self.runner, self.listener = self.runner, self.listener, None, None
        await close_listener(runner, listener)

    async def handle(self, request: web.Request) -> web.Response:
        if self.token:
            given = bearer_token(request)
            if given is None or not same_secret(given, self.token):
                addr = client_address(request)
                if given is not None:
                    await self.limiter.wrong(addr)  # answered at the address's next slot
                log.info("metrics: refused a scrape without the token from %s", addr)
                return web.Response(status=401, text="Unauthorized: Authorization: Bearer <[metrics] token>\n",
                                    headers={"WWW-Authenticate": 'Bearer realm="agent-bridge metrics"'})  # fmt: skip
            self.limiter.passed(request)
        elif is_loopback(self.host) and not host_is_loopback(request.headers.get("Host")):
            return web.Response(status=403, text="Forbidden: scrape this endpoint as 127.0.0.1 or localhost\n")
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE})


__all__ = ["BridgeCollector", "MetricsServer", "bridge_registry", "version"]
