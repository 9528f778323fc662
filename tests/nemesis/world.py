"""The bridge under the nemesis: real ``python -m cli serve`` processes (kill -9 and SIGSTOP need
processes), either the embedded default (one node, SQLite in its data dir) or several nodes on one
private PostgreSQL and one private Redis (tests/engines.py), each node on fixed ports so that a
node restarted after a kill -9 answers where its clients knew it.

Everything blocking (a node's start, an engine's restart) runs in a thread: the clients' loop keeps
reading while a node comes back.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Optional

import aiohttp

from tests.engines import Postgres, Redis, free_port
from tests.hardening.proc import BridgeProcess, admin_headers_for

EMBEDDED = "embedded"
CLUSTER = "cluster"
FRONTS = ("pheby", "loomi", "lvmh")
# a decision nobody answers (its client was cut off) times out instead of holding its run past the end
CONFIG = {"demo": {"approval_timeout": 20}}


class World:
    def __init__(self, base: str, topology: str, nodes: int = 3, pg: Optional[Postgres] = None,
                 redis: Optional[Redis] = None, bus_db: int = 0):
        self.base = base
        self.topology = topology
        self.pg, self.redis = pg, redis
        self.bus_db = bus_db  # the Redis database of its bus: two bridges can share one redis-server
        self._own_engines = False
        self.names = ["solo"] if topology == EMBEDDED else [f"n{k + 1}" for k in range(nodes)]
        self.procs: dict[str, BridgeProcess] = {}
        self.ports: dict[str, dict[str, int]] = {}
        self.paused: set[str] = set()
        self.spinners: list[subprocess.Popen] = []

    # --- life ------------------------------------------------------------------------------------------

    def boot(self) -> "World":
        """Start the engines (unless given) and every node; blocking (a fixture's, or in a thread)."""
        extra: list[str] = []
        if self.topology == CLUSTER:
            if self.pg is None:
                self._own_engines = True
                self.pg, self.redis = Postgres().start(), Redis().start()
            bus = self.redis.url.rsplit("/", 1)[0] + f"/{self.bus_db}"
            extra = ["--store", self.pg.new_database(), "--bus", bus]
        for name in self.names:
            ports = {front: free_port() for front in FRONTS}
            args = [*extra, "--node-id", name] if extra else []
            for front, port in ports.items():
                args += [f"--{front}-port", str(port)]
            self.ports[name] = ports
            self.procs[name] = BridgeProcess(os.path.join(self.base, name), config=CONFIG, extra_args=args)
            self.procs[name].start()
        return self

    async def start(self) -> "World":
        return await asyncio.to_thread(self.boot)

    def shutdown(self) -> None:
        """Every node stopped (continued first: a stopped process does not see SIGTERM), own engines too."""
        self.unspin()
        for name in list(self.paused):
            self.resume(name)
        for proc in self.procs.values():
            proc.stop()
        if self._own_engines:
            self.redis.stop()
            self.pg.stop()

    async def stop(self) -> None:
        await asyncio.to_thread(self.shutdown)

    # --- where -----------------------------------------------------------------------------------------

    def url(self, name: str, front: str) -> str:
        port = self.ports[name][front]
        return f"http://127.0.0.1:{port}" if front == "lvmh" else f"ws://127.0.0.1:{port}/ws"

    def alive(self, name: str) -> bool:
        return self.procs[name].alive

    def up(self, name: str) -> bool:
        """Alive and not stopped: it answers."""
        return self.alive(name) and name not in self.paused

    def pick(self, name: str) -> str:
        """``name`` if it is alive, else the next alive node after it (a client going elsewhere)."""
        k = self.names.index(name)
        for step in range(len(self.names)):
            cand = self.names[(k + step) % len(self.names)]
            if self.alive(cand):
                return cand
        return name

    async def pair_token(self, name: str) -> dict:
        """A QR payload from ``name``'s loopback-only pairing endpoint (what `loomi pair --json` prints)."""
        port = self.ports[name]["loomi"]
        async with aiohttp.ClientSession() as http:
            async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                                 headers=admin_headers_for(port)) as r:
                assert r.status == 200, await r.text()
                return (await r.json())["payload"]

    # --- faults ------------------------------------------------------------------------------------------

    def kill9(self, name: str) -> None:
        self.paused.discard(name)
        self.procs[name].kill9()

    async def restart(self, name: str) -> None:
        if not self.procs[name].alive:
            await asyncio.to_thread(self.procs[name].start)

    def pause(self, name: str) -> None:
        os.kill(self.procs[name].proc.pid, signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        if name in self.paused:
            self.paused.discard(name)
            if self.procs[name].alive:
                os.kill(self.procs[name].proc.pid, signal.SIGCONT)

    def spin(self, n: int = 2) -> None:
        """``n`` processes burning a core each, beside the nodes."""
        for _ in range(n):
            self.spinners.append(subprocess.Popen([sys.executable, "-c", "while True: pass"],
                                                  stdin=subprocess.DEVNULL))  # fmt: skip

    def unspin(self) -> None:
        for p in self.spinners:
            p.kill()
            p.wait()
        self.spinners = []

    async def heal(self) -> None:
        """Every node running and answering, no spinner: the state the final reads need."""
        self.unspin()
        for name in list(self.paused):
            self.resume(name)
        for name in self.names:
            await self.restart(name)

    def lines(self, *loggers: str, most: int = 60) -> list[str]:
        """The nodes' log lines at WARNING or above from ``loggers`` (the last ``most``), each named by
        its node: what a failure shows of the nodes' side. Every node's whole output stays in its
        ``logs/`` under ``base`` (pytest keeps the last runs' tmp dirs; ``--basetemp`` to choose where)."""
        out = []
        for name, proc in self.procs.items():
            for line in proc.all_output().splitlines():
                if any(f" {logger}" in line for logger in loggers) and " INFO " not in line and " DEBUG " not in line:
                    out.append(f"{name}: {line[:240]}")
        return out[len(out) - most:] if most > 0 else []

    def errors(self) -> list[str]:
        """The nodes' ERROR and Traceback lines (for the report)."""
        out = []
        for name, proc in self.procs.items():
            for line in proc.all_output().splitlines():
                if " ERROR " in line or line.startswith("Traceback"):
                    out.append(f"{name}: {line[:200]}")
        return out
