"""Nodes of one bridge in one process, on the test's PostgreSQL and Redis (tests/scale/conftest.py),
for the front ends' numbering tests: started and stopped one by one, and a node's bus deliveries
held back to make it lag behind the others in the stream."""

from __future__ import annotations

from typing import Any

from tests.conftest import make_config


class Nodes:
    def __init__(self, engines: tuple, tmp_path: Any, adapters: tuple):
        self.store, self.bus = engines
        self.tmp_path = tmp_path
        self.adapters = adapters
        self.running: list[Any] = []
        self._held: dict[Any, tuple] = {}

    async def start(self, name: str) -> Any:
        from bridge_core.bridge.demo import DemoAgent
        from cli.serve import Service

        cfg = make_config(self.tmp_path / name, self.adapters, store=self.store, bus=self.bus, node_id=name)
        svc = Service(cfg, DemoAgent())
        await svc.start()
        self.running.append(svc)
        return svc

    async def stop(self, svc: Any) -> None:
        self.running.remove(svc)
        await svc.stop()

    async def close(self) -> None:
        for svc in reversed(list(self.running)):
            await self.stop(svc)

    async def start_behind(self, name: str) -> Any:
        """A node started with every delivery held from its first, its join's included (a node just started, still
        behind: it renders nothing yet), until ``release``."""
        from bridge_core.scale.cluster import Cluster

        held: list = []
        deliver = Cluster._deliver
        Cluster._deliver = lambda cluster, n, node, data: held.append((n, node, data))  # (the bus takes it at start)
        try:
            svc = await self.start(name)
        finally:
            Cluster._deliver = deliver
        self._held[svc] = (svc.bridge.cluster._deliver, held)
        return svc

    def hold(self, svc: Any) -> None:
        """What the bus delivers to ``svc`` waits (the node lags behind in the stream) until ``release``."""
        bus = svc.bridge.cluster.bus
        held: list = []
        self._held[svc] = (bus._deliver, held)
        bus._deliver = lambda n, node, data: held.append((n, node, data))

    def release(self, svc: Any) -> None:
        deliver, held = self._held.pop(svc)
        svc.bridge.cluster.bus._deliver = deliver
        for item in held:
            deliver(*item)


def port(svc: Any, name: str) -> int:
    return svc.ports[name]
