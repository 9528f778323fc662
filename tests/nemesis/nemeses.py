"""The faults (the nemesis), each recorded in the history with its span.

| kind | what it does | healed by |
|---|---|---|
| ``kill9`` | SIGKILL of a node (the embedded default's only one included) | restarted (same data dir, ports, name) |
| ``pause`` | SIGSTOP of a node for ``seconds`` (0.5 to 3) | SIGCONT |
| ``spin`` | two processes burning a core each beside the nodes | killed after ``seconds`` |
| ``redis_restart`` | redis-server killed and started again (no persistence: every key is gone) | itself |
| ``redis_flush`` | FLUSHALL under the running nodes (Redis losing its keys) | itself |
| ``pg_restart`` | PostgreSQL stopped at once (``-m immediate``, as a crash) and started again | itself |

A client's own faults (``drop``: its socket reset; ``cut``: half a frame, then FIN) are the
clients' (clients.py). ``heal`` (World.heal) ends whatever is still on at the end of a run.

The waits here are the faults' durations (how long a node stays stopped or down), not waits for
a state: a fault's shape is time.
"""

from __future__ import annotations

import asyncio

from .history import History
from .world import World

CLUSTER_FAULTS = {"kill9": 3, "pause": 3, "spin": 2, "redis_restart": 1, "redis_flush": 1, "pg_restart": 1}
EMBEDDED_FAULTS = {"kill9": 3, "pause": 3, "spin": 2}


async def inject(world: World, h: History, kind: str, target: str, seconds: float) -> None:
    """One fault, from its start to its healing."""
    if kind == "kill9":
        if not world.alive(target) or sum(world.alive(n) for n in world.names) < len(world.names):
            return  # one node down at a time: the clients always have somewhere to go
        fault = h.fault(kind, target)
        world.kill9(target)
        await asyncio.sleep(seconds)
        await world.restart(target)
    elif kind == "pause":
        if not world.up(target):
            return
        fault = h.fault(kind, target)
        world.pause(target)
        await asyncio.sleep(seconds)
        world.resume(target)
    elif kind == "spin":
        fault = h.fault(kind, "host")
        world.spin(2)
        await asyncio.sleep(seconds)
        world.unspin()
    else:
        fault = h.fault(kind, "redis" if kind.startswith("redis") else "postgresql")
        await asyncio.to_thread(_engine(world, kind))
    h.healed(fault)


def _engine(world: World, kind: str):
    return {"redis_restart": world.redis.restart, "redis_flush": world.redis.flush,
            "pg_restart": world.pg.restart}[kind]  # fmt: skip
