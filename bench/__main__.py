"""``python -m bench``: agent-bridge against the in-project aiohttp baseline, side by side.

Bridge and baseline run in the same invocation, interleaved (A B A B) for
several rounds; each figure is printed as the bridge/baseline ratio with its
spread (min..max over rounds), next to the absolute medians. Absolute numbers
on shared 2-core machines swing; the ratio is the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import time

import aiohttp

from . import event_cost, extra, team
from .load import loomi_run, pair_loomi_devices, pheby_run
from .proc import BENCH_SECRET, Server

TARGETS = {  # (figure, C) -> (op, bound) on the bridge/baseline ratio
    ("events_per_s_per_client", 1): (">=", 0.5),
    ("events_per_s_per_client", 10): (">=", 0.8),
    ("events_per_s_per_client", 100): (">=", 0.8),
    ("cpu_us_per_frame", 1): ("<=", 2.5),
    ("cpu_us_per_frame", 10): ("<=", 1.5),
    ("cpu_us_per_frame", 100): ("<=", 1.3),
}
LAT_TARGET_MS = {1: 5.0, 10: 5.0, 100: 20.0}  # absolute p99 while the client keeps up
PACED_SECONDS = 2.0
BYTES_BOUND = 1.5  # Pheby bytes per client / final text for an unpaced /bench 20000 at 10 clients


def paced_rate(clients: int) -> float:
    """Deltas per second for the latency run: at most 20,000 frames/s in all, 5,000 deltas/s at most."""
    return min(5000.0, 20000.0 / clients)


def _fmt(x: float) -> str:
    if x != x:  # nan
        return "n/a"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


async def _loomi_once(kind: str, clients: int, n: int) -> dict:
    srv = Server(kind, adapters="loomi")
    try:
        port = srv.ports["loomi"]
        if kind == "bridge":
            async with aiohttp.ClientSession() as http:
                devices = await pair_loomi_devices(http, port, clients)
        else:
            devices = [None] * clients
        res = await loomi_run(port, devices, n, srv.watch)
        # latency while the client keeps up: a paced run (C x rate frames/s within the load client's reach)
        rate = paced_rate(clients)
        paced = await loomi_run(port, devices, int(rate * PACED_SECONDS), None, rate=rate)
        res["lat_p50_ms"], res["lat_p99_ms"] = paced["lat_p50_ms"], paced["lat_p99_ms"]
        res["peak_rss_mb"] = srv.watch.peak_rss() / 1e6
        return res
    finally:
        srv.stop()


async def loomi_table(clients_list: list[int], n: int, rounds: int) -> list[dict]:
    rows = []
    for c in clients_list:
        per = {"bridge": [], "baseline": []}
        for r in range(rounds):
            for kind in ("bridge", "baseline"):  # A B A B
                per[kind].append(await _loomi_once(kind, c, n))
        rows.append({"clients": c, **per})
    return rows


def print_loomi(rows: list[dict], n: int) -> bool:
    ok = True
    print(f"\nLoomi /bench {n}: bridge vs baseline (ratio = bridge/baseline; median [min..max] over rounds)")
    print(f"  latency from a paced run of {PACED_SECONDS:g} s at min(5000, 20000/C) deltas/s, so the client keeps up")
    print(f"{'C':>4} {'figure':<26} {'bridge':>10} {'baseline':>10} {'ratio':>7} {'spread':>15} {'target':>8}")
    for row in rows:
        c = row["clients"]
        for fig, label in (
            ("events_per_s_per_client", "run.delta events/s/client"),
            ("frames_per_s", "frames/s (all clients)"),
            ("first_delta_ms", "first delta ms after send"),
            ("lat_p50_ms", "latency p50 ms (paced)"),
            ("lat_p99_ms", "latency p99 ms (paced)"),
            ("cpu_us_per_frame", "server CPU us/frame"),
            ("peak_rss_mb", "peak RSS MB"),
        ):
            b = [x[fig] for x in row["bridge"]]
            a = [x[fig] for x in row["baseline"]]
            ratios = [x / y if y else float("nan") for x, y in zip(b, a)]
            target = TARGETS.get((fig, c))
            tgt = ""
            if target:
                op, bound = target
                med = statistics.median(ratios)
                good = med >= bound if op == ">=" else med <= bound
                ok &= good
                tgt = f"{op}{bound} {'ok' if good else 'MISS'}"
            if fig == "lat_p99_ms":
                bound = LAT_TARGET_MS[c]
                good = statistics.median(b) <= bound
                ok &= good
                tgt = f"<={bound:g}ms {'ok' if good else 'MISS'}"
            print(f"{c:>4} {label:<26} {_fmt(statistics.median(b)):>10} {_fmt(statistics.median(a)):>10} "
                  f"{_fmt(statistics.median(ratios)):>7} {_fmt(min(ratios)) + '..' + _fmt(max(ratios)):>15} {tgt:>8}")
        exact = all(x["exact_final_text"] for x in row["bridge"])
        print(f"{c:>4} {'every client exact text':<26} {str(exact):>10}")
        ok &= exact
    return ok


async def pheby_coalescing(clients: int, n: int, rounds: int) -> bool:
    print(f"\nPheby /bench {n} at C={clients} (cumulative drafts, coalesced per client)")
    results = []
    for _ in range(rounds):
        srv = Server("bridge", adapters="pheby")
        try:
            results.append(await pheby_run(srv.ports["pheby"], BENCH_SECRET, clients, n, srv.watch))
        finally:
            srv.stop()
    exact = all(r["exact_final_text"] for r in results)
    after = [r["last_draft_after_ms"] for r in results]
    ratio = [r["bytes_per_client_over_text"] for r in results]
    print(f"  every client exact final text + run.finished: {exact}")
    print(f"  last draft after the agent's last delta: median {_fmt(statistics.median(after))} ms "
          f"[{_fmt(min(after))}..{_fmt(max(after))}]  target <= 50 ms {'ok' if max(after) <= 50 else 'MISS'}")
    # the bytes guarantee of cumulative drafts (pheby_adapter/pacing.py): what a phone receives for a long answer
    # that arrives fast is little more than the final text
    print(f"  bytes per client / final text: median {_fmt(statistics.median(ratio))} "
          f"[{_fmt(min(ratio))}..{_fmt(max(ratio))}]  target <= {BYTES_BOUND} "
          f"{'ok' if max(ratio) <= BYTES_BOUND else 'MISS'}")
    print(f"  drafts per client: {statistics.median([r['frames_per_s'] * r['elapsed_s'] / clients for r in results]):.0f} frames")
    return exact and max(after) <= 50 and max(ratio) <= BYTES_BOUND


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["long"]:  # python -m bench long: long conversations in the web UI (bench/long.py)
        from . import long

        return long.main(argv[1:])
    if argv[:1] == ["chaos"]:  # python -m bench chaos --minutes N (bench/chaos.py)
        from . import chaos

        return chaos.main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--clients", default="1,10,100")
    p.add_argument("-n", type=int, default=2000, help="deltas per /bench run for the Loomi table")
    p.add_argument("--quick", action="store_true", help="one round, smaller runs (a smoke check, not a measurement)")
    p.add_argument("--only", default="", help="comma list: loomi,pheby,extra,core,team,ingest "
                   "(ingest: lvmh ingest alone, --rounds times; extra includes it once)")
    p.add_argument("--team-runs", default="10,50,100", help="R for the team load")
    p.add_argument("--team-clients", default="3,10", help="K for the team load")
    p.add_argument("--team-protos", default="pheby,loomi")
    p.add_argument("--team-rounds", type=int, default=None, help="rounds of the team load (default: --rounds)")
    p.add_argument("-v", "--verbose", action="store_true", help="team load: lag stalls and where they were")
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.n = 1, 500
    only = set(filter(None, args.only.split(",")))
    clients = [int(x) for x in args.clients.split(",")]
    print(f"agent-bridge benchmark  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"{platform.machine()} {os.cpu_count()} cores  Python {platform.python_version()}  rounds={args.rounds}")
    ok = True
    if not only or "loomi" in only:
        rows = asyncio.run(loomi_table(clients, args.n, args.rounds))
        ok &= print_loomi(rows, args.n)
    if not only or "pheby" in only:
        ok &= asyncio.run(pheby_coalescing(10, 2000 if args.quick else 20000, args.rounds))
    if not only or "extra" in only:
        ok &= asyncio.run(extra.run_all(args.quick, args.rounds))
    if "ingest" in only:  # the lvmh ingest of extra alone (bench/extra.py), a round per --rounds
        for _ in range(args.rounds):
            ok &= asyncio.run(extra.lvmh_ingest(args.quick))
    if not only or "core" in only:
        ok &= event_cost.run(args.quick, args.rounds)
    if not only or "team" in only:
        ok &= team.run_team(args.quick, args.team_rounds or args.rounds, args.team_protos.split(","), args.verbose,
                            [int(x) for x in args.team_runs.split(",")],
                            [int(x) for x in args.team_clients.split(",")])
    print(f"\nall targets met: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
