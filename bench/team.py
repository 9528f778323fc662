"""The team load: R concurrent paced runs x K clients, bridge and baseline alternated on fresh servers.

Every run is ``/bench n rate`` (an LLM's pace: ``rate`` deltas per second) in
a conversation of its own, and every client sees every run. The runs start
spread over one pacing interval (``START_SPREAD``), so that their deltas fall
due at independent moments, as a team's do. The clients are
processes of their own (``bench.team_client``). Per configuration and
server: p50/p99/max delivery latency (receipt minus the frame's server
timestamp), server CPU per run-second (all threads, schedstat), peak RSS,
every client's exact final text of every run, and the event-loop lag
inside the server (``bench.lagmon``: max lag, stalls, what they coincided
with), and the machine's own freezes in the window (``bench.canary``: a
process with no work that woke late). The figures are ratios to the
baseline in the same invocation.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from typing import Optional

import aiohttp

from .canary import Canary
from .load import _pct, pair_loomi_devices
from .proc import BENCH_SECRET, ROOT, Server

DRAFT_INTERVAL_MS = 40.0
# the runs start spread evenly over this many pacing intervals (1 / rate), at the same offsets for the
# bridge and the baseline. Runs started in one instant keep their paced deltas due at the same moments
# for their whole length, so a server that started them closer together (in one turn of its loop) had
# fewer wake-ups and larger batched writes for it: an alignment no team's runs have.
START_SPREAD = 1.0
# the delivery latency is also reported apart for the deltas received this long after "go" (-v): the runs'
# starts (their requests, conversations and store writes) fall there, and the frames already streaming
# wait behind them (the durability barrier: docs/architecture.md)
START_WINDOW = 0.25


def _steal_ms() -> float:
    """CPU time the hypervisor took from this machine's CPUs so far (ms, all CPUs; 0 where not reported)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) * 1000 / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


async def team_once(proto: str, kind: str, runs: int, clients: int, n: int, rate: float,
                    server_args: tuple = ()) -> dict:
    srv = Server(kind, adapters=proto, lag=True, args=server_args if kind == "bridge" else ())
    procs = []
    canary = Canary()  # the machine's own freezes in the window (bench/canary.py)
    w0 = w1 = 0.0
    try:
        port = srv.ports[proto]
        devices: list = [None] * clients
        if proto == "loomi" and kind == "bridge":
            async with aiohttp.ClientSession() as http:
                devices = await pair_loomi_devices(http, port, clients)
        env = dict(os.environ, PYTHONPATH=ROOT)
        for i in range(clients):
            mine = runs // clients + (1 if i < runs % clients else 0)
            cfg = {"proto": proto, "port": port, "runs": runs, "mine": mine, "n": n, "rate": rate,
                   "secret": BENCH_SECRET, "device": devices[i], "index": i, "clients": clients,
                   "spread": START_SPREAD / rate, "start_window": START_WINDOW}
            procs.append(await asyncio.create_subprocess_exec(
                sys.executable, "-m", "bench.team_client", json.dumps(cfg), cwd=ROOT, env=env,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, limit=1 << 28))
        for p in procs:
            line = await asyncio.wait_for(p.stdout.readline(), 60)
            if line.strip() != b"ready":
                raise RuntimeError(f"{kind} {proto} client not ready: {line!r}")
        srv.lag_window(True)
        cpu0 = srv.watch.cpu()
        split0 = srv.watch.cpu_split()
        steal0 = _steal_ms()
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        w0 = time.monotonic()
        for p in procs:
            p.stdin.write(b"go\n")
        for p in procs:
            await p.stdin.drain()
        results = []
        for p in procs:
            line = await asyncio.wait_for(p.stdout.readline(), 120 + 2 * n / rate)
            results.append(json.loads(line))
        elapsed = loop.time() - t0
        w1 = time.monotonic()
        cpu = srv.watch.cpu() - cpu0
        split1 = srv.watch.cpu_split()
        steal = _steal_ms() - steal0
        srv.lag_window(False)
        rss = srv.watch.peak_rss()
        for p in procs:
            await p.wait()
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                await p.wait()
        srv.stop(keep=True)
        freezes = canary.stop(w0, w1)
    lag = srv.lag_report() or {}
    srv.cleanup()
    lat = sorted(x for r in results for x in r["lat_us"])
    lat_after = sorted(x for r in results for x in r["lat_after_us"])
    return {
        "p50_ms": _pct(lat, 50) / 1000,
        "p99_ms": _pct(lat, 99) / 1000,
        "max_ms": (lat[-1] / 1000) if lat else float("nan"),
        "max_start_ms": max(r["max_start_us"] for r in results) / 1000,
        "max_after_ms": max(r["max_after_us"] for r in results) / 1000,
        "p99_after_ms": _pct(lat_after, 99) / 1000,
        # per run-second of the run's nominal length (n / rate): a server that falls behind stretches its
        # runs, and dividing by the time it took would flatter it
        "cpu_ms_per_run_s": cpu * 1000 / (runs * n / rate),
        # the event loop's thread, and the others (the bridge's store writer and checkpointer; both: the lag monitor)
        "cpu_loop_ms_per_run_s": (split1[0] - split0[0]) * 1000 / (runs * n / rate),
        "cpu_threads_ms_per_run_s": (split1[1] - split0[1]) * 1000 / (runs * n / rate),
        "peak_rss_mb": rss / 1e6,
        "exact": all(r["exact"] for r in results),
        "bytes_per_client": statistics.mean(r["bytes"] for r in results),
        "elapsed_s": elapsed,
        "lag_max_ms": lag.get("max_lag_ms", float("nan")),
        "lag_p99_ms": lag.get("p99_lag_ms", float("nan")),
        "stalls": lag.get("stalls", 0),
        "stalls_with_gc": lag.get("stalls_with_gc", 0),
        "gc_max_ms": lag.get("gc_max_ms", []),
        "stall_stacks": lag.get("stall_stacks", []),
        "stall_kinds": lag.get("stall_kinds", {}),
        "steal_ms": steal,
        "stall_ms": lag.get("stall_ms", {}),
        # the canary's late wake-ups in the window: the machine's freezes, which delay either server alike
        "freezes": len(freezes),
        "freeze_max_ms": max(((b - a) * 1000 for a, b in freezes), default=0.0),
    }


def _fmt(x: float) -> str:
    if x != x:
        return "n/a"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.1f}"


async def team_table(protos: list[str], runs_list: list[int], clients_list: list[int], n: int, rate: float,
                     rounds: int, verbose: bool = False) -> list[dict]:
    rows = []
    for proto in protos:
        for r in runs_list:
            for k in clients_list:
                per: dict[str, list] = {"bridge": [], "baseline": []}
                for _ in range(rounds):
                    for kind in ("bridge", "baseline"):  # A B A B, fresh servers
                        per[kind].append(await team_once(proto, kind, r, k, n, rate))
                row = {"proto": proto, "runs": r, "clients": k, **per}
                rows.append(row)
                _print_row(row, verbose)
    return rows


def _med(xs: list) -> float:
    xs = [x for x in xs if x == x]
    return statistics.median(xs) if xs else float("nan")


def target_of(row: dict) -> dict:
    """The issue's bounds for this row, from the baseline's medians (ms, or a ratio for CPU)."""
    raw_p99 = _med([x["p99_ms"] for x in row["baseline"]])
    raw_max = _med([x["max_ms"] for x in row["baseline"]])
    if row["proto"] == "loomi":
        return {"p99_ms": 2 * raw_p99, "max_ms": 3 * raw_max, "cpu": 1.0}
    return {"p99_ms": DRAFT_INTERVAL_MS + 2 * raw_p99, "max_ms": DRAFT_INTERVAL_MS + 3 * raw_max, "cpu": 1.0}


def verdict(row: dict) -> tuple[bool, dict]:
    t = target_of(row)
    b = {f: _med([x[f] for x in row["bridge"]]) for f in ("p99_ms", "max_ms", "cpu_ms_per_run_s")}
    a_cpu = _med([x["cpu_ms_per_run_s"] for x in row["baseline"]])
    cpu_ratio = b["cpu_ms_per_run_s"] / a_cpu if a_cpu else float("nan")
    checks = {
        "p99": b["p99_ms"] <= t["p99_ms"],
        "max": b["max_ms"] <= t["max_ms"],
        "cpu": cpu_ratio <= t["cpu"],
        "exact": all(x["exact"] for x in row["bridge"] + row["baseline"]),
    }
    return all(checks.values()), checks


def _print_row(row: dict, verbose: bool) -> None:
    b, a = row["bridge"], row["baseline"]

    def both(f):
        return _med([x[f] for x in b]), _med([x[f] for x in a])

    p50, p99, mx = both("p50_ms"), both("p99_ms"), both("max_ms")
    cpu, rss, lag = both("cpu_ms_per_run_s"), both("peak_rss_mb"), both("lag_max_ms")
    ok, checks = verdict(row)
    miss = ",".join(k for k, v in checks.items() if not v)
    print(f"{row['proto']:<6}{row['runs']:>4}{row['clients']:>4}  "
          f"p50 {_fmt(p50[0])}/{_fmt(p50[1])}  p99 {_fmt(p99[0])}/{_fmt(p99[1])} ({_fmt(p99[0] / p99[1])}x)  "
          f"max {_fmt(mx[0])}/{_fmt(mx[1])} ({_fmt(mx[0] / mx[1])}x)  cpu {_fmt(cpu[0] / cpu[1])}x  "
          f"rss {rss[0]:.0f}/{rss[1]:.0f}MB  lag max {_fmt(lag[0])}/{_fmt(lag[1])}  "
          f"{'ok' if ok else 'MISS ' + miss}", flush=True)
    if verbose:
        start, after, p99_after = both("max_start_ms"), both("max_after_ms"), both("p99_after_ms")
        print(f"    max latency while the runs start (the first {START_WINDOW * 1000:.0f} ms) {_fmt(start[0])}/"
              f"{_fmt(start[1])} ms, after {_fmt(after[0])}/{_fmt(after[1])} ms; p99 after "
              f"{_fmt(p99_after[0])}/{_fmt(p99_after[1])} ms ({_fmt(p99_after[0] / p99_after[1])}x)")
        for kind, res in (("bridge", b), ("baseline", a)):
            for x in res:
                print(f"    {kind}: stalls {x['stalls']} (with gc {x['stalls_with_gc']}), gc max ms "
                      f"{[round(g, 1) for g in x['gc_max_ms']]}, cpu {x['cpu_ms_per_run_s']:.2f} ms/run-s "
                      f"(loop {x['cpu_loop_ms_per_run_s']:.2f}, other threads {x['cpu_threads_ms_per_run_s']:.2f}), "
                      f"exact {x['exact']}")
                if x["stall_kinds"]:
                    print("      stalls by what the loop thread did: " + ", ".join(
                        f"{k} {n} ({x['stall_ms'].get(k, 0):.0f} ms)" for k, n in x["stall_kinds"].items())
                        + f"; the hypervisor took {x['steal_ms']:.0f} ms of CPU from the machine meanwhile"
                        " (a stolen CPU shows as 'blocked')")
                if x.get("freezes"):
                    print(f"      the machine held a process with no work {x['freezes']} time(s) meanwhile, up to "
                          f"{x['freeze_max_ms']:.0f} ms (bench/canary.py): a delay of that order is the machine's")
                for where, count in x["stall_stacks"][:4]:
                    print(f"      {count:>3}x {where}")


def print_header(n: int, rate: float, rounds: int) -> None:
    print(f"\nTeam load: R runs of /bench {n} {rate:g} (each {n / rate:g} s, own conversation) x K clients "
          f"seeing every run; bridge/baseline medians over {rounds} round(s), fresh servers, alternated")
    print("  latency = receipt - frame ts (ms); cpu = server CPU per run-second, bridge/baseline; "
          "lag = max event-loop lag in the server (ms)")
    print(f"  targets: Loomi p99 <= 2x raw, max <= 3x raw; Pheby p99 <= {DRAFT_INTERVAL_MS:g} ms + 2x raw, "
          f"max <= {DRAFT_INTERVAL_MS:g} ms + 3x raw; cpu <= 1.0x")
    print(f"{'proto':<6}{'R':>4}{'K':>4}")


def cpu_split(rows: list[dict], rate: float) -> list[dict]:
    """Where the event loop's CPU goes, per protocol and R measured at two K or more: the loop's CPU per
    run-second fitted as ``a + b * K`` over every round, so ``a`` is what an event costs whoever
    watches (the agent, the core, encoding, the loop's wake-ups) and ``b`` what one more client costs
    (its frame's queueing and send). In microseconds per event and per client frame (``rate`` events
    per run-second), for the bridge and the baseline."""
    out = []
    groups: dict[tuple, list[dict]] = {}
    for row in rows:
        groups.setdefault((row["proto"], row["runs"]), []).append(row)
    for (proto, runs), group in groups.items():
        if len({row["clients"] for row in group}) < 2:
            continue
        fit = {}
        for kind in ("bridge", "baseline"):
            points = [(row["clients"], x["cpu_loop_ms_per_run_s"]) for row in group for x in row[kind]]
            b, a = statistics.linear_regression([k for k, _ in points], [y for _, y in points])
            fit[kind] = (a * 1000 / rate, b * 1000 / rate)
        out.append({"proto": proto, "runs": runs, "clients": sorted(row["clients"] for row in group), **fit})
    return out


def print_cpu_split(rows: list[dict], rate: float) -> None:
    split = cpu_split(rows, rate)
    if not split:
        return
    print("  where the loop's CPU goes (least squares over K): per event whoever watches, per client frame; "
          "bridge / baseline, us")
    for s in split:
        (ea, fa), (eb, fb) = s["bridge"], s["baseline"]
        print(f"  {s['proto']:<6}R={s['runs']:<4} K={','.join(map(str, s['clients']))}: per event "
              f"{ea:.1f} / {eb:.1f} ({_fmt(ea / eb)}x), per client frame {fa:.1f} / {fb:.1f} ({_fmt(fa / fb)}x)")


def run_team(quick: bool, rounds: int, protos: Optional[list[str]] = None, verbose: bool = False,
             runs: Optional[list[int]] = None, clients: Optional[list[int]] = None) -> bool:
    n, rate = (100, 50.0) if quick else (500, 50.0)
    print_header(n, rate, rounds)
    rows = asyncio.run(team_table(protos or ["pheby", "loomi"], runs or [10, 50, 100], clients or [3, 10],
                                  n, rate, rounds, verbose))
    print_cpu_split(rows, rate)
    return all(verdict(r)[0] for r in rows)
