"""``python -m bench chaos --minutes N``: the nemesis suite (tests/nemesis) run back to back for N
minutes, each run a new seed, and what it found.

Each run is a seeded plan (tests/nemesis/scenario.py): Loomi phones alternating nodes and dropping
their sockets, a Pheby client, an lvmh browser, all recording every frame, while the nemesis
kills (-9) and restarts nodes, stops them (SIGSTOP) for 0.5 to 3 s, runs two CPU spinners,
restarts Redis or flushes its keys and restarts PostgreSQL; then every fault is healed, every
client catches up, every node is read, and the checker (tests/nemesis/checker.py) judges the
history. Runs alternate between three nodes on one PostgreSQL and one Redis (started once, a
fresh database per run) and the embedded default (one node, SQLite: kill -9 of it included).

It prints one line per run (seed, operations, faults, anomalies) and the totals: operations,
faults injected per kind, anomalies per kind with the seeds that showed them. ``--keep DIR``
writes the history of every run with an anomaly there (JSON, History.from_json reads it back),
with the report and the nodes' logs (``history-<seed>-<topology>.logs/<node>/``) beside it. The exit status is 1 when any anomaly was found.

    python -m bench chaos --minutes 30
    python -m bench chaos --minutes 5 --topology cluster --seed 100 --keep /tmp/chaos
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections import Counter

from .proc import raise_fd_limit


def _parse(argv: list) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench chaos", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=5.0, help="how long to go on starting runs (default 5)")
    p.add_argument("--seconds", type=float, default=60.0, help="the length of each run's plan (default 60)")
    p.add_argument("--seed", type=int, default=None, help="the first seed (default: from the clock)")
    p.add_argument("--topology", choices=("both", "cluster", "embedded"), default="both")
    p.add_argument("--phones", type=int, default=3)
    p.add_argument("--keep", default="", help="a directory for the histories (and nodes' logs) of runs with anomalies")
    return p.parse_args(argv)


class Totals:
    def __init__(self) -> None:
        self.runs = 0
        self.operations = 0
        self.outcomes: Counter = Counter()
        self.faults: Counter = Counter()
        self.anomalies: Counter = Counter()
        self.seeds: dict = {}  # anomaly kind -> seeds

    def add(self, h, anomalies) -> None:
        self.runs += 1
        self.operations += len(h.ops)
        self.outcomes.update(o.outcome for o in h.ops)
        self.faults.update(h.fault_counts())
        for a in anomalies:
            self.anomalies[a.kind] += 1
            seeds = self.seeds.setdefault(a.kind, [])
            if f"{h.seed}/{h.topology}" not in seeds:
                seeds.append(f"{h.seed}/{h.topology}")

    def print(self, minutes: float) -> None:
        print(f"\nchaos: {self.runs} runs in {minutes:.1f} min")
        print(f"  operations: {self.operations} ({', '.join(f'{k} {v}' for k, v in sorted(self.outcomes.items()))})")
        print("  faults injected: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())))
        print(f"  anomalies: {sum(self.anomalies.values())}")
        for kind, n in sorted(self.anomalies.items()):
            print(f"    {kind}: {n} (seeds {', '.join(self.seeds[kind][:10])})")


async def _one(seed: int, topology: str, args: argparse.Namespace, engines: tuple, base: str):
    from tests.nemesis.checker import check
    from tests.nemesis.scenario import Run, plan
    from tests.nemesis.world import World

    pg, redis = engines
    if redis is not None:
        await asyncio.to_thread(redis.flush)
    world = World(os.path.join(base, f"run-{seed}"), topology, pg=pg, redis=redis)
    anomalies = None
    try:
        await world.start()
        h = await Run(plan(seed, topology, args.seconds, args.phones), world).execute()
        anomalies = check(h)
    finally:
        errors = world.errors()
        await world.stop()
        if args.keep and anomalies:  # before the run's directory goes: the nodes' side of what was found
            keep_logs(world, _stem(args, h))
        shutil.rmtree(os.path.join(base, f"run-{seed}"), ignore_errors=True)
    if errors:  # the nodes' own error lines: figures of a run whose nodes logged errors say so
        print(f"    the nodes logged {len(errors)} error lines; the first: {errors[0]}")
    return h, anomalies


def _stem(args: argparse.Namespace, h) -> str:
    return os.path.join(args.keep, f"history-{h.seed}-{h.topology}")


def keep_logs(world, stem: str) -> str:
    """Every node's whole output (each life's stdout and stderr, ``logs/`` under its directory) copied to
    ``<stem>.logs/<node>/``, the directory returned: what the history alone cannot say (why a restarted node
    did or did not close a run, chaos seeds 2003 and 2015) is in its nodes' logs, which go with the run's
    directory. The bridge logs no secret (fingerprints only: docs/security.md), so the copy holds none."""
    dest = stem + ".logs"
    for name, proc in world.procs.items():
        if os.path.isdir(proc.log_dir):
            shutil.copytree(proc.log_dir, os.path.join(dest, name), dirs_exist_ok=True)
    return dest


def _keep(args: argparse.Namespace, h, anomalies) -> None:
    from tests.nemesis.report import render

    os.makedirs(args.keep, exist_ok=True)
    stem = _stem(args, h)
    with open(stem + ".json", "w") as f:
        f.write(h.to_json())
    with open(stem + ".txt", "w") as f:
        f.write(render(h, anomalies, limit=50) + "\n")


def _engines():
    from tests.engines import Postgres, Redis, pg_missing, redis_missing

    missing = pg_missing() or redis_missing()
    if missing:
        print(f"chaos: only the embedded default: {missing}")
        return None, None
    return Postgres().start(), Redis().start()


def main(argv=None) -> int:
    from tests.nemesis.report import render, summary

    args = _parse(list(sys.argv[1:] if argv is None else argv))
    raise_fd_limit()
    os.environ.setdefault("AGENT_BRIDGE_METRICS_PORT", "off")
    seed = args.seed if args.seed is not None else int(time.time()) % 100000
    pg, redis = _engines() if args.topology != "embedded" else (None, None)
    base = tempfile.mkdtemp(prefix="ab-chaos-")
    totals = Totals()
    started = time.monotonic()
    print(f"chaos: {args.minutes:g} min of {args.seconds:g} s runs from seed {seed} ({args.topology})")
    try:
        k = 0
        while time.monotonic() - started < args.minutes * 60:
            topology = args.topology if args.topology != "both" else ("embedded" if k % 3 == 2 else "cluster")
            if topology == "cluster" and pg is None:
                topology = "embedded"
            h, anomalies = asyncio.run(_one(seed + k, topology, args, (pg, redis), base))
            totals.add(h, anomalies)
            s = summary(h, anomalies)
            print(f"  seed {h.seed} {h.topology}: {s['operations']} ops, faults {s['faults']}, "
                  f"anomalies {s['anomalies'] or 0}", flush=True)
            if anomalies:
                print("    " + render(h, anomalies, limit=3).replace("\n", "\n    "))
                if args.keep:
                    _keep(args, h, anomalies)
            k += 1
    finally:
        if redis is not None:
            redis.stop()
        if pg is not None:
            pg.stop()
        shutil.rmtree(base, ignore_errors=True)
    totals.print((time.monotonic() - started) / 60)
    return 1 if totals.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
