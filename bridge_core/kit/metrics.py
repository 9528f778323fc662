"""The Prometheus endpoint of ``agent-bridge serve`` (docs/operations.md).

Nothing is counted for it on the hot path: ``BridgeCollector`` (bridge_core/kit/metric_families.py)
reads, at scrape time, what the bridge keeps anyway (the conversations' pending decisions, each front end's open sockets and
``FrontEndCounts``, the runs ended by status, the push deliveries' results, the bus's lag and
drops, the store's state) and yields gauge and counter families from it, on a registry of its
own (never prometheus_client's global one). The only additions elsewhere are int adds where
something happens once: a write of frames (``outbox.Outbox._sent``), a replay, a run's end, a
push attempt, a bus delivery. The registry, and prometheus_client with it, is made at the first
scrape: a node whose endpoint nobody reads does not hold the library.

``MetricsServer`` serves ``GET /metrics`` in the Prometheus text format on its own port,
loopback by default, like an exporter. With a ``[metrics] token`` (required off loopback,
``config.parse_metrics``) a scrape presents it as ``Authorization: Bearer``: compared in
constant time, a wrong one answered at the address's next slot like every wrong credential
(``security.AuthLimiter``). On loopback without a token a request must name a loopback
``Host``: a web page cannot read it through DNS rebinding.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional

from aiohttp import web

from .frontend import close_listener, listen
from .security import AuthLimiter, bearer_token, client_address, host_is_loopback, is_loopback, same_secret

if TYPE_CHECKING:
    import ssl

    from prometheus_client import CollectorRegistry

    from ..bridge.bridge import Bridge
    from .config import Config

log = logging.getLogger("agent_bridge.metrics")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"  # what generate_latest writes
REFUSED = b'{"error":{"code":"rate_limited","message":"Too many unauthenticated connections from this address"}}'


def bridge_registry(bridge: "Bridge", frontends: Mapping[str, Any], notifier: Any = None,
                    node_id: str = "") -> "CollectorRegistry":
    """A registry of our own: the bridge's families and this process's (``agent_bridge_process_*``).
    prometheus_client is imported here, not with this module (bridge_core/kit/metric_families.py)."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.process_collector import ProcessCollector

    from .metric_families import PREFIX, BridgeCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(BridgeCollector(bridge, frontends, notifier, node_id))
    ProcessCollector(namespace=PREFIX, registry=registry)
    return registry


class MetricsServer:
    """``GET /metrics`` on its own port (module docstring: who may read it). ``registry``: a function that
    makes the registry (``bridge_registry``), called at the first scrape that is let in."""

    def __init__(self, registry: "Callable[[], CollectorRegistry]", cfg: "Config"):
        self.make_registry = registry
        self.registry: "Optional[CollectorRegistry]" = None
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
        from prometheus_client import generate_latest

        if self.registry is None:
            self.registry = self.make_registry()
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE})


__all__ = ["MetricsServer", "bridge_registry"]
