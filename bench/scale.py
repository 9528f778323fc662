"""The team load on one node and on several: ``python -m bench.scale``.

R runs at once, each ``/bench N RATE`` (an LLM's pace: RATE deltas/s, paced) in a
conversation of its own, started over lvmh REST on the nodes in turn (run i on node
i mod K, where its demo agent then runs). Each run is watched by three clients, one per
protocol, spread over the nodes: a Pheby client (on the first node) and a Loomi phone
(on the second) each see every run, as those protocols do; an lvmh browser per run
watches that run (one session per browser, as the web UI does), on the node after the
one running it. The client set is the same for every configuration, so every figure
compares like with like. Clients are processes of their own (``bench.team_client`` for
Pheby and Loomi, ``bench.scale_watch`` for the browsers).

Configurations, each measured on fresh nodes (a fresh database, Redis flushed), in turn
(A B C ... A B C for ``--rounds``; medians are printed):

- ``embedded``: one node, SQLite in its data dir, the in-process hub (the default);
- ``PostgreSQL``: one node on a private PostgreSQL, no bus;
- ``K node(s)`` for each K of ``--nodes``: K ``agent-bridge serve`` processes on one
  private PostgreSQL and one private Redis (``--bus``), as docs/scale-out.md runs them.

Figures: p50/p99 delivery latency of the deltas (receipt minus the frame's server
timestamp, every client's, pooled; then per protocol), the nodes' CPU per delivered
frame (schedstat of every node process, summed over the measured window, over every
frame the clients received), the engines' CPU per frame (PostgreSQL's processes and
redis-server), the peak RSS per node, and each as a ratio to ``embedded`` measured in
the same invocation. Then the bus alone on one node at the same event rate: the
in-process bus against the Redis Streams one (publish to delivery, CPU per event).
The engines run as tests/engines.py starts them (PostgreSQL with ``fsync=off``).
``--engine-stats``: after each configuration on the bus, what PostgreSQL did per table and
Redis per command, from their own counters (where the engines' CPU goes).

    python -m bench.scale [--nodes 1,2,3] [--runs 100] [--deltas 500] [--rate 50] [--rounds 1] [--quick]
                          [--only '3 nodes'] [--engine-stats]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import threading
import time
from typing import Optional

import aiohttp

from .load import _pct, pair_loomi_devices
from .proc import BENCH_SECRET, BENCH_TOKEN, ROOT, ProcWatch, Server

PROTOS = ("pheby", "loomi", "lvmh")


class Engines:
    """The private PostgreSQL and Redis of this invocation, and the CPU their processes use."""

    def __init__(self) -> None:
        sys.path.insert(0, ROOT)
        from tests.engines import Postgres, Redis

        self.pg = Postgres().start()
        self.redis = Redis().start()

    def stop(self) -> None:
        self.pg.stop()
        self.redis.stop()

    def watches(self) -> list[ProcWatch]:
        """PostgreSQL's postmaster and its children (a backend per connection), and redis-server."""
        with open(os.path.join(self.pg.dir, "data", "postmaster.pid")) as f:
            master = int(f.readline())
        pids = [master]
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as f:
                        if int(f.read().rsplit(")", 1)[1].split()[1]) == master:
                            pids.append(int(entry))
                except (OSError, ValueError, IndexError):
                    continue
        assert self.redis.proc is not None
        return [ProcWatch(p) for p in pids] + [ProcWatch(self.redis.proc.pid)]


class NodeLog:
    """A node's stderr, read as it comes (a pipe nobody reads would stall a node that logs much):
    its error lines counted, the first kept for the report."""

    def __init__(self, node: Server):
        self.errors = 0
        self.first: Optional[str] = None
        self.warnings: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(node.proc.stderr,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip()
            if " ERROR " in line or "Traceback" in line:
                self.errors += 1
                if self.first is None:
                    self.first = line
            if " WARNING " in line or " ERROR " in line:
                self.warnings.append(line)


def _cpu(watches: list[ProcWatch]) -> float:
    total = 0.0
    for w in watches:
        try:
            total += w.cpu()
        except (FileNotFoundError, ProcessLookupError):  # a backend that ended: its time is gone with it
            continue
    return total


async def _client(module: str, cfg: dict) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", module, json.dumps(cfg), cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 28)  # fmt: skip


async def _sessions_everywhere(http: aiohttp.ClientSession, nodes: list[Server], sids: list[str]) -> None:
    """Every node lists every session (the conversations reached them over the bus)."""
    auth = {"Authorization": f"Bearer {BENCH_TOKEN}"}
    deadline = time.monotonic() + 60
    for node in nodes:
        while True:
            async with http.get(f"http://127.0.0.1:{node.ports['lvmh']}/api/sessions", headers=auth) as r:
                listed = {s["id"] for s in await r.json()}
            if listed.issuperset(sids):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the sessions did not reach every node")
            await asyncio.sleep(0.05)  # polling another process's state, with a deadline


async def load_once(args_list: list[tuple], engines: Optional[Engines], runs: int, n: int, rate: float) -> dict:
    """One configuration on fresh nodes (``args_list``: each node's extra ``serve`` arguments)."""
    nodes = await asyncio.gather(*(asyncio.to_thread(Server, "bridge", "pheby,loomi,lvmh", None, False, a)
                                   for a in args_list))  # fmt: skip
    k = len(nodes)
    logs = [NodeLog(node) for node in nodes]
    procs: list[tuple[str, asyncio.subprocess.Process]] = []
    auth = {"Authorization": f"Bearer {BENCH_TOKEN}"}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            sids = []
            for i in range(runs):  # each on the node that will run it
                async with http.post(f"http://127.0.0.1:{nodes[i % k].ports['lvmh']}/api/conversations",
                                     json={"name": f"team {i}"}, headers=auth) as r:  # fmt: skip
                    sids.append((await r.json())["id"])
            await _sessions_everywhere(http, nodes, sids)
            (device,) = await pair_loomi_devices(http, nodes[1 % k].ports["loomi"], 1)
            common = {"runs": runs, "mine": 0, "n": n, "rate": rate, "secret": BENCH_SECRET, "index": 0}
            procs.append(("pheby", await _client("bench.team_client", {
                **common, "proto": "pheby", "port": nodes[0].ports["pheby"]})))  # fmt: skip
            procs.append(("loomi", await _client("bench.team_client", {
                **common, "proto": "loomi", "port": nodes[1 % k].ports["loomi"], "device": device})))  # fmt: skip
            for j, node in enumerate(nodes):  # run i's browser on node i+1 (another node than its own, if any)
                mine = [sid for i, sid in enumerate(sids) if (i + 1) % k == j]
                if mine:
                    procs.append(("lvmh", await _client("bench.scale_watch", {
                        "port": node.ports["lvmh"], "token": BENCH_TOKEN, "sessions": mine, "n": n})))  # fmt: skip
            for _, p in procs:
                line = await asyncio.wait_for(p.stdout.readline(), 120)
                if line.strip() != b"ready":
                    raise RuntimeError(f"a client was not ready: {line!r}")
            engine_watch = engines.watches() if engines is not None and len(args_list[0]) else []
            node_watch = [node.watch for node in nodes]
            cpu0, ecpu0 = _cpu(node_watch), _cpu(engine_watch)
            t0 = time.monotonic()
            for _, p in procs:
                p.stdin.write(b"go\n")
                await p.stdin.drain()
            text = f"/bench {n} {rate:g}"

            async def start(i: int, sid: str) -> None:
                async with http.post(f"http://127.0.0.1:{nodes[i % k].ports['lvmh']}/api/sessions/{sid}/prompt",
                                     json={"message": text}, headers=auth) as r:  # fmt: skip
                    if r.status != 200:
                        raise RuntimeError(f"a run did not start: {r.status} {await r.text()}")

            await asyncio.gather(*(start(i, sid) for i, sid in enumerate(sids)))
            results = []
            for proto, p in procs:
                line = await asyncio.wait_for(p.stdout.readline(), 120 + 4 * n / rate)
                results.append((proto, json.loads(line)))
            elapsed = time.monotonic() - t0
            cpu, ecpu = _cpu(node_watch) - cpu0, _cpu(engine_watch) - ecpu0
            rss = [node.watch.peak_rss() for node in nodes]
    finally:
        for _, p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        await asyncio.gather(*(asyncio.to_thread(node.stop) for node in nodes))
    frames = sum(r["frames"] for _, r in results)
    lat = [x for _, r in results for x in r["lat_us"]]
    out = {
        "p50_ms": _pct(lat, 50) / 1000,
        "p99_ms": _pct(lat, 99) / 1000,
        "cpu_us_per_frame": cpu / max(1, frames) * 1e6,
        "engines_us_per_frame": ecpu / max(1, frames) * 1e6 if engine_watch else float("nan"),
        "rss_mb_per_node": statistics.mean(rss) / 1e6,
        "frames": frames,
        "elapsed_s": elapsed,
        "exact": all(r["exact"] for _, r in results),
        "log_errors": sum(log.errors for log in logs),
        "first_error": next((log.first for log in logs if log.first), None),
        "bad": [f"{proto}: {b}" for proto, r in results for b in r.get("bad", [])],
        "warnings": [f"node {i}: {line}" for i, log in enumerate(logs) for line in log.warnings[:20]],
    }
    for proto in PROTOS:
        mine = [x for q, r in results if q == proto for x in r["lat_us"]]
        out[f"{proto}_p50_ms"], out[f"{proto}_p99_ms"] = _pct(mine, 50) / 1000, _pct(mine, 99) / 1000
    return out


async def bus_overhead(bus_factory, rate: float, seconds: float) -> dict:
    """The bus alone on one node: events of a delta's size published at ``rate``/s for ``seconds``;
    publish-to-deliver latency and this process's CPU per event."""
    sample = {"event": "TextDelta", "conversation_id": "c" * 22, "run_id": "r" * 22, "message_id": "m" * 24,
              "text": "tok ", "ts": 0.0, "origin": None}  # fmt: skip
    lat: list[float] = []
    got = asyncio.Event()
    total = int(rate * seconds)

    def deliver(n: int, node: str, data: dict) -> None:
        lat.append(time.perf_counter() - data["ts"])
        if len(lat) >= total:
            got.set()

    bus = bus_factory()
    await bus.start(deliver)
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    try:
        for i in range(total):
            due = t0 + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # pacing the load generator, not a test wait
            bus.publish(dict(sample, ts=time.perf_counter()))
        await asyncio.wait_for(got.wait(), timeout=seconds * 4 + 30)
    finally:
        cpu = time.process_time() - cpu0
        await bus.stop()
    return {"lat_p50_ms": _pct(lat, 50) * 1000, "lat_p99_ms": _pct(lat, 99) * 1000,
            "cpu_us_per_event": cpu / max(1, total) * 1e6}  # fmt: skip


def _reset_redis_stats(url: str) -> None:
    import redis

    r = redis.Redis.from_url(url)
    try:
        r.config_resetstat()
    finally:
        r.close()


def engine_stats(name: str, store: str, redis_url: str, frames: int) -> None:
    """What PostgreSQL and Redis did for one configuration's round, from their own counters (``--engine-stats``):
    per table, index scans, rows fetched by index, inserted, updated and deleted; per Redis command, its calls.
    Each configuration has its own database; Redis's counters are reset before each (``main``)."""
    import psycopg
    import redis

    print(f"\nengine counters, {name} ({frames} frames)")
    print(f"  {'table':28}{'idx scans':>11}{'idx fetched':>13}{'inserted':>11}{'updated':>10}{'deleted':>10}")
    with psycopg.connect(store, autocommit=True) as c:
        for row in c.execute(
                "SELECT relname, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0), n_tup_ins, n_tup_upd, n_tup_del "
                "FROM pg_stat_user_tables WHERE coalesce(idx_scan, 0) + n_tup_ins + n_tup_upd + n_tup_del > 0 "
                "ORDER BY coalesce(idx_tup_fetch, 0) + n_tup_ins + n_tup_upd + n_tup_del DESC"):  # fmt: skip
            print(f"  {row[0]:28}" + "".join(f"{v:>{w}}" for v, w in zip(row[1:], (11, 13, 11, 10, 10))))
        commits, fetched, updated = c.execute("SELECT xact_commit, tup_fetched, tup_updated FROM pg_stat_database "
                                              "WHERE datname = current_database()").fetchone()  # fmt: skip
    print(f"  the database: {commits} commits, {fetched} rows fetched, {updated} updated")
    r = redis.Redis.from_url(redis_url)
    try:
        calls = sorted(((v.get("calls", 0), k.removeprefix("cmdstat_")) for k, v in r.info("commandstats").items()),
                       reverse=True)  # fmt: skip
    finally:
        r.close()
    print("  Redis: " + ", ".join(f"{cmd} {n}" for n, cmd in calls[:8]))


def _median(rows: list[dict], key: str) -> float:
    vals = [r[key] for r in rows if r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")


def _cell(v: float, base: Optional[float]) -> str:
    if v != v:
        return "n/a"
    text = f"{v:.2f}" if abs(v) < 100 else f"{v:.0f}"
    if base and base == base:
        text += f" ({v / base:.2f}x)"
    return text


def _print(results: dict[str, list[dict]], args: argparse.Namespace) -> None:
    base = results["embedded"]
    print(f"\nteam load: {args.runs} runs x /bench {args.deltas} {args.rate:g} (paced), each watched by a Pheby "
          f"client, a Loomi phone and an lvmh browser spread over the nodes; {args.rounds} round(s), medians; "
          "ratios to the embedded default")  # fmt: skip
    keys = (("p50_ms", "p50 ms"), ("p99_ms", "p99 ms"), ("cpu_us_per_frame", "nodes CPU us/frame"),
            ("engines_us_per_frame", "engines CPU us/frame"), ("rss_mb_per_node", "peak RSS MB/node"))  # fmt: skip
    print(f"{'configuration':<24}" + "".join(f"{label:>22}" for _, label in keys) + f"{'frames':>10}{'exact':>7}")
    for name, rows in results.items():
        cells = [_cell(_median(rows, k), None if name == "embedded" else _median(base, k)) for k, _ in keys]
        print(f"{name:<24}" + "".join(f"{c:>22}" for c in cells)
              + f"{_median(rows, 'frames'):>10.0f}{str(all(r['exact'] for r in rows)):>7}")  # fmt: skip
    print("\ndelivery latency by protocol, p50 / p99 ms (ratio of p99 to the embedded default)")
    print(f"{'configuration':<24}" + "".join(f"{p:>26}" for p in PROTOS))
    for name, rows in results.items():
        cells = []
        for p in PROTOS:
            p50, p99 = _median(rows, f"{p}_p50_ms"), _median(rows, f"{p}_p99_ms")
            b99 = _median(base, f"{p}_p99_ms")
            cells.append(f"{p50:.2f} / {p99:.2f}" + (f" ({p99 / b99:.2f}x)" if name != "embedded" and b99 else ""))
        print(f"{name:<24}" + "".join(f"{c:>26}" for c in cells))
    for name, rows in results.items():
        errors = sum(r["log_errors"] for r in rows)
        if errors:  # the figures of a configuration whose nodes logged errors are not the figures of a sound one
            first = next(r["first_error"] for r in rows if r["first_error"])
            print(f"\nNOTE: {name}: the nodes logged {errors} error line(s); the first: {first[:300]}")
        for r in rows:  # which client missed which final text, and what the nodes warned of meanwhile
            if not r["exact"]:
                print(f"\nNOTE: {name}: not exact:")
                for line in r["bad"][:20] + r["warnings"]:
                    print(f"  {line[:300]}")


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", default="1,2,3", help="node counts on PostgreSQL + Redis, e.g. 1,2,3")
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--deltas", type=int, default=500)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--rounds", type=int, default=1, help="rounds over every configuration (medians are printed)")
    p.add_argument("--bus-seconds", type=float, default=10.0, help="length of the bus-alone measurement")
    p.add_argument("--only", default="", help="measure only these configurations, e.g. '3 nodes' or "
                   "'embedded,2 nodes' (the others print n/a)")
    p.add_argument("--engine-stats", action="store_true", help="after each configuration on the bus, print what "
                   "PostgreSQL did per table and Redis per command (their own counters)")
    p.add_argument("--quick", action="store_true", help="a smoke run (10 runs of /bench 50 50, 1 s of bus)")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.deltas, args.bus_seconds = 10, 50, 1.0
    try:
        counts = sorted({int(x) for x in args.nodes.split(",") if x.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        print("bench.scale: --nodes takes node counts, e.g. 1,2,3", file=sys.stderr)
        return 2
    sys.path.insert(0, ROOT)
    from tests.engines import pg_missing, redis_missing

    reason = pg_missing() or redis_missing()
    if reason:
        print(f"bench.scale: {reason}", file=sys.stderr)
        return 2
    from bridge_core.scale.bus import LocalBus
    from bridge_core.scale.redisbus import RedisBus

    from .proc import raise_fd_limit

    raise_fd_limit()
    t_start = time.monotonic()
    engines = Engines()
    results: dict[str, list[dict]] = {"embedded": [], "PostgreSQL, no bus": []}
    results.update({f"{c} node{'s' if c > 1 else ''}, Redis bus": [] for c in counts})
    rate = args.runs * args.rate
    try:
        for _ in range(args.rounds):  # A B C A B C: drift hits every configuration
            for name in results:
                if args.only and name.split(",")[0] not in args.only.split(","):
                    continue
                if name == "embedded":
                    node_args: list[tuple] = [()]
                elif name.startswith("PostgreSQL"):
                    node_args = [("--store", engines.pg.new_database())]
                else:
                    engines.redis.flush()
                    store, bus = engines.pg.new_database(), engines.redis.url
                    node_args = [("--store", store, "--bus", bus, "--node-id", f"n{i}")
                                 for i in range(int(name.split()[0]))]  # fmt: skip
                counted = args.engine_stats and "--bus" in node_args[0]  # (--engine-stats: the configurations on Redis)
                if counted:
                    _reset_redis_stats(engines.redis.url)
                results[name].append(asyncio.run(load_once(node_args, engines, args.runs, args.deltas, args.rate)))
                if counted:
                    engine_stats(name, node_args[0][1], engines.redis.url, results[name][-1]["frames"])
                print(f"  measured: {name} ({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True)
        bus_rows = {"in-process": asyncio.run(bus_overhead(lambda: LocalBus("bench"), rate, args.bus_seconds))}
        engines.redis.flush()
        bus_rows["Redis Streams"] = asyncio.run(bus_overhead(lambda: RedisBus(engines.redis.url, "bench",
                                                                              key=os.urandom(32)),
                                                             rate, args.bus_seconds))  # fmt: skip
    finally:
        engines.stop()
    _print(results, args)
    print(f"\nthe bus alone on one node: {rate:g} delta-sized events/s for {args.bus_seconds:g} s, publish to deliver")
    print(f"{'bus':<24}{'p50 ms':>16}{'p99 ms':>16}{'CPU us/event':>16}")
    for name, row in bus_rows.items():
        print(f"{name:<24}{row['lat_p50_ms']:>16.3f}{row['lat_p99_ms']:>16.3f}{row['cpu_us_per_event']:>16.1f}")
    print(f"\n(took {time.monotonic() - t_start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
