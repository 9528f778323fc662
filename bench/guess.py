"""``python -m bench.guess``: how fast one address can guess each secret, next to the legitimate rate.

Against a fresh ``agent-bridge serve`` (demo agent, every front end), for each
secret: ``--concurrency`` connections from one loopback address send wrong
credentials for ``--seconds``; a *guess answered* is a verdict on the
credential (401/403), while 429 (the address's unauthenticated connections
are at the cap) tells the guesser nothing. Then the same endpoint with the
right credential, from another address, as a legitimate client would.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import time

import aiohttp

from .proc import BENCH_SECRET, BENCH_TOKEN, Server, admin_headers_for

ATT = "0" * 32  # a well-formed attachment id that does not exist: the right credential gets 404


async def _hammer(url: str, headers, source: str, concurrency: int, seconds: float, verdicts: set) -> dict:
    counts = {"verdict": 0, "ok": 0, "refused": 0, "other": 0}
    deadline = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(local_addr=(source, 0), limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker(w: int) -> None:
            i = 0
            while time.monotonic() < deadline:
                i += 1
                try:
                    async with http.get(url, headers=headers(w, i)) as r:
                        await r.read()
                        status = r.status
                except (aiohttp.ClientError, OSError):
                    counts["refused"] += 1
                    continue
                if status in verdicts:
                    counts["verdict"] += 1
                elif status in (200, 404):
                    counts["ok"] += 1
                elif status == 429:
                    counts["refused"] += 1
                else:
                    counts["other"] += 1

        t0 = time.monotonic()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        counts["elapsed"] = time.monotonic() - t0
    return counts


async def run(seconds: float, concurrency: int) -> list[tuple]:
    srv = Server("bridge")
    try:
        p = srv.ports
        async with aiohttp.ClientSession() as http:
            from .load import pair_loomi_devices

            (device_id, credential), = await pair_loomi_devices(http, p["loomi"], 1)
        admin = admin_headers_for(p["loomi"])
        targets = [
            ("Pheby secret", f"http://127.0.0.1:{p['pheby']}/attachments/{ATT}",
             lambda w, i: {"Authorization": f"Bearer wrong-{w}-{i}"}, {"Authorization": f"Bearer {BENCH_SECRET}"}, {401}),
            ("Loomi credential", f"http://127.0.0.1:{p['loomi']}/attachments/{ATT}",
             lambda w, i: {"Authorization": f"Bearer {device_id}:wrong-{w}-{i}"},
             {"Authorization": f"Bearer {device_id}:{credential}"}, {401}),
            ("lvmh token", f"http://127.0.0.1:{p['lvmh']}/api/sessions",
             lambda w, i: {"Authorization": f"Bearer wrong-{w}-{i}"}, {"Authorization": f"Bearer {BENCH_TOKEN}"}, {401}),
            ("admin key", f"http://127.0.0.1:{p['loomi']}/internal/devices",
             lambda w, i: {"Authorization": f"Bearer wrong-{w}-{i}"}, admin, {403}),
        ]
        rows = []
        for k, (name, url, wrong, right, verdicts) in enumerate(targets):
            bad = await _hammer(url, wrong, f"127.0.0.{101 + k}", concurrency, seconds, verdicts)
            good = await _hammer(url, lambda w, i, h=right: h, f"127.0.0.{111 + k}", concurrency, seconds, verdicts)
            rows.append((name, "/" + url.split("/", 3)[3].replace(ATT, "<id>"),
                         bad["verdict"] / bad["elapsed"], bad["refused"] / bad["elapsed"], good["ok"] / good["elapsed"],
                         good["verdict"] + good["refused"] + good["other"], bad["ok"]))
        return rows
    finally:
        srv.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.guess", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=5.0, help="per secret and per side (default 5)")
    ap.add_argument("--concurrency", type=int, default=64, help="connections from the one address (default 64)")
    args = ap.parse_args(argv)
    print(f"agent-bridge guess rate  {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  "
          f"{platform.machine()} {os.cpu_count()} cores  Python {platform.python_version()}  "
          f"{args.concurrency} connections from one address, {args.seconds:g} s each")
    rows = asyncio.run(run(args.seconds, args.concurrency))
    print(f"\n{'secret':<18} {'endpoint':<22} {'guesses answered/s':>19} {'refused (429)/s':>16} {'legitimate req/s':>17}")
    ok = True
    for name, path, guesses, refused, legit, legit_failed, bad_ok in rows:
        print(f"{name:<18} {path:<22} {guesses:>19.1f} {refused:>16.0f} {legit:>17.0f}")
        ok &= guesses <= 21.0 * 1.05 and legit_failed == 0 and bad_ok == 0
    print("\n(a guess answered = a verdict on the credential; 429 = refused at the unauthenticated-connection cap, "
          "nothing learnt)")
    print(f"at most ~20 guesses per second per address, every legitimate request served: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
