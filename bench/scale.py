"""The team load on the store engines: ``python -m bench.scale``.

R runs at once, each streaming ``/bench N RATE`` (an LLM's pace: RATE deltas/s, paced),
each started by one of W Pheby clients per run (Pheby broadcasts every event to every
client, so every client watches every run). For each configuration: p50/p99 delivery
latency of the deltas (server timestamp to receipt), server CPU per delivered frame and
the server's peak memory, and each as a ratio to the embedded default measured in the same
run (SQLite in the data dir, in-process hub).

Configurations: ``embedded`` (the default) and ``postgresql`` (one node, ``--store`` on a
private PostgreSQL this script starts in a temporary directory, tests/engines.py). Then the
bus alone on one node at the same event rate (runs x rate): the in-process bus against the
Redis Streams one on a private redis-server, publish-to-deliver latency and CPU per event.
Several nodes on a bus are not measured here yet (docs/scale-out.md); ``--nodes`` is refused.

    python -m bench.scale [--runs 100] [--deltas 500] [--rate 50] [--watchers 3] [--rounds 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

import aiohttp
import orjson

from .load import ClientStats, _frames, _parse_iso, _pct, connect_pheby
from .proc import BENCH_SECRET, BENCH_TOKEN, ROOT, ProcWatch


class Node:
    """One ``agent-bridge serve`` (Pheby only) on the given store."""

    def __init__(self, store: Optional[str]):
        self.tmp = tempfile.mkdtemp(prefix="bench-scale-")
        env = dict(os.environ, PHEBY_SECRET=BENCH_SECRET, LVMH_TOKEN=BENCH_TOKEN, PYTHONPATH=ROOT)
        cmd = [sys.executable, "-m", "cli", "serve", "--data-dir", self.tmp, "--adapters", "pheby",
               "--pheby-port", "0", "--log-level", "WARNING"]  # fmt: skip
        if store:
            cmd += ["--store", store]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        portfile = os.path.join(self.tmp, "run", "ports.json")
        deadline = time.monotonic() + 60
        while not os.path.exists(portfile):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bridge did not start: {self.proc.stderr.read().decode()[-2000:]}")
            time.sleep(0.05)
        with open(portfile) as f:
            self.port = json.load(f)["pheby"]
        self.watch = ProcWatch(self.proc.pid)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)


async def _watch(ws, st: ClientStats, mine: set, finished: dict, total: int) -> None:
    """Count every frame; time every delta; done when all ``total`` runs finished."""
    async for now, frame in _frames(ws, st):
        t = frame.get("type")
        if t == "message.delta":
            ts = _parse_iso(frame["ts"])
            if not st.events:
                st.first = now
            st.events += 1
            st.last = now
            st.latencies.append(now - ts)
        elif t == "message.complete" and frame.get("kind") != "notice" and frame.get("conversation_id") in mine:
            finished[frame["conversation_id"]] = frame.get("text")
        elif t == "run.finished":
            st.final_at = now
            finished.setdefault("_runs", set()).add(frame.get("run_id"))
            if len(finished["_runs"]) >= total:
                st.done.set()
                return


async def team_load(port: int, watch: ProcWatch, runs: int, deltas: int, rate: float, watchers: int) -> dict:
    async with aiohttp.ClientSession() as http:
        socks = [await connect_pheby(http, port, BENCH_SECRET) for _ in range(runs * watchers)]
        starters = socks[::watchers]
        cids = []
        for i, ws in enumerate(starters):
            await ws.send_str(orjson.dumps({"type": "conversation.create", "name": f"team {i}", "request_id": f"c{i}"}).decode())
            while True:
                f = orjson.loads((await ws.receive(timeout=30)).data)
                if f["type"] == "conversation.created" and f.get("request_id") == f"c{i}":
                    cids.append(f["conversation_id"])
                    break
        # let the conversation.updated broadcasts settle: drain what is already there
        for ws in socks:
            while True:
                try:
                    await ws.receive(timeout=0.2)
                except asyncio.TimeoutError:
                    break
        stats = [ClientStats() for _ in socks]
        finished: list[dict] = [{} for _ in socks]
        readers = [asyncio.create_task(_watch(ws, st, set(cids), fin, runs))
                   for ws, st, fin in zip(socks, stats, finished)]  # fmt: skip
        cpu0 = watch.cpu()
        t0 = time.time()
        for i, (ws, cid) in enumerate(zip(starters, cids)):
            await ws.send_str(orjson.dumps({"type": "chat.send", "conversation_id": cid,
                                            "text": f"/bench {deltas} {rate:g}", "request_id": f"b{i}"}).decode())  # fmt: skip
        await asyncio.wait_for(asyncio.gather(*(st.done.wait() for st in stats)), timeout=deltas / rate * 4 + 120)
        elapsed = time.time() - t0
        cpu = watch.cpu() - cpu0
        for r in readers:
            r.cancel()
        for ws in socks:
            await ws.close()
    lat = [x for st in stats for x in st.latencies]
    frames = sum(st.frames for st in stats)
    exact = all(fin.get(c) == "tok " * deltas for fin in finished for c in cids)
    return {
        "lat_p50_ms": _pct(lat, 50) * 1000,
        "lat_p99_ms": _pct(lat, 99) * 1000,
        "cpu_us_per_frame": cpu / max(1, frames) * 1e6,
        "frames": frames,
        "elapsed_s": elapsed,
        "peak_rss_mb": watch.peak_rss() / 1e6,
        "exact_final_text": exact,
    }


async def measure(store: Optional[str], args: argparse.Namespace) -> dict:
    node = Node(store)
    try:
        return await team_load(node.port, node.watch, args.runs, args.deltas, args.rate, args.watchers)
    finally:
        node.stop()


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


def _median(rows: list[dict], key: str) -> float:
    vals = sorted(r[key] for r in rows)
    return vals[len(vals) // 2]


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=100)
    p.add_argument("--deltas", type=int, default=500)
    p.add_argument("--rate", type=float, default=50.0)
    p.add_argument("--watchers", type=int, default=3, help="Pheby clients per run")
    p.add_argument("--rounds", type=int, default=1, help="A/B rounds per configuration (medians are printed)")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--bus-seconds", type=float, default=10.0, help="length of the bus-alone measurement")
    args = p.parse_args(argv)
    if args.nodes != 1:
        print("bench.scale: measuring several nodes is not in this benchmark yet (docs/scale-out.md)",
              file=sys.stderr)  # fmt: skip
        return 2
    sys.path.insert(0, ROOT)
    from tests.engines import Postgres, pg_missing

    reason = pg_missing()
    if reason:
        print(f"bench.scale: {reason}", file=sys.stderr)
        return 2
    from bridge_core.bus import LocalBus
    from tests.engines import Redis, redis_missing

    pg = Postgres().start()
    bus_rows: dict[str, dict] = {}
    try:
        results: dict[str, list[dict]] = {"embedded": [], "postgresql": []}
        for _ in range(args.rounds):  # A B A B: drift hits both
            results["embedded"].append(asyncio.run(measure(None, args)))
            results["postgresql"].append(asyncio.run(measure(pg.new_database(), args)))
    finally:
        pg.stop()
    rate = args.runs * args.rate
    bus_rows["in-process"] = asyncio.run(bus_overhead(lambda: LocalBus("bench"), rate, args.bus_seconds))
    if not redis_missing():
        from bridge_core.redisbus import RedisBus

        rs = Redis().start()
        try:
            bus_rows["Redis Streams"] = asyncio.run(bus_overhead(lambda: RedisBus(rs.url, "bench"), rate, args.bus_seconds))
        finally:
            rs.stop()
    print(f"team load: {args.runs} runs x /bench {args.deltas} {args.rate:g} (paced), {args.watchers} Pheby "
          f"clients per run (each sees every run), {args.rounds} round(s), one node")  # fmt: skip
    keys = (("lat_p50_ms", "p50 ms"), ("lat_p99_ms", "p99 ms"), ("cpu_us_per_frame", "CPU us/frame"),
            ("peak_rss_mb", "peak RSS MB"))  # fmt: skip
    base = {k: _median(results["embedded"], k) for k, _ in keys}
    print(f"{'configuration':<26}" + "".join(f"{label:>16}" for _, label in keys) + f"{'exact text':>12}")
    for name, rows in results.items():
        cells = []
        for k, _ in keys:
            v = _median(rows, k)
            cells.append(f"{v:.2f}" + (f" ({v / base[k]:.2f}x)" if name != "embedded" and base[k] else ""))
        exact = all(r["exact_final_text"] for r in rows)
        label = "embedded (SQLite)" if name == "embedded" else "PostgreSQL store"
        print(f"{label:<26}" + "".join(f"{c:>16}" for c in cells) + f"{str(exact):>12}")
    print(f"\nthe bus alone on one node: {rate:g} delta-sized events/s for {args.bus_seconds:g} s, publish to deliver")
    print(f"{'bus':<26}{'p50 ms':>16}{'p99 ms':>16}{'CPU us/event':>16}")
    for name, row in bus_rows.items():
        print(f"{name:<26}{row['lat_p50_ms']:>16.3f}{row['lat_p99_ms']:>16.3f}{row['cpu_us_per_event']:>16.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
