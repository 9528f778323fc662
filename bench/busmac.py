"""What signing a bus entry costs (docs/scale-out.md "Signed entries"): µs per entry to sign
(the sender: header, HMAC-SHA256) and to verify (every reader: HMAC, header, window, counter),
for entries as the bus writes them: one delta-sized event (an event after a quiet spell), a
batch of 10 and of 100 (under load the writer puts what a 2 ms linger gathers in one entry),
and a command. One process, no Redis: the MAC's own cost, best of several repetitions.

``--bus SECONDS`` adds the bus alone on a private password-protected redis-server (as
``python -m bench.scale``'s last table: delta-sized events at ``--rate``/s, publish to deliver,
this process's CPU per event), with the HMAC and with the HMAC replaced by a constant (the
same entries, headers and checks otherwise), interleaved over ``--rounds``, medians.

    python -m bench.busmac                    # the table
    python -m bench.busmac --entries N        # entries per repetition (default 20000)
    python -m bench.busmac --bus 3 --rounds 3 # and the bus alone, with and without the HMAC
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time

import orjson

from bridge_core.scale import busauth
from bridge_core.scale.busauth import Signer, Verifier, derive_key

DELTA = {"event": "TextDelta", "conversation_id": "c" * 32, "run_id": "r" * 32, "message_id": "m" * 40,
         "text": "tok ", "ts": 1800000000.0, "origin": None}  # fmt: skip
COMMAND = {"t": "req", "id": "i" * 32, "cmd": "ResolveApproval", "args": {"approval_id": "a" * 32, "choice": "once"},
           "origin": {"surface": "pheby"}, "hosted": False}  # fmt: skip
REPEAT = 5


def _payloads() -> dict[str, tuple[bytes, int, str]]:
    item = b'["e",' + orjson.dumps(DELTA) + b"]"
    batch = {k: b"[" + b",".join([item] * k) + b"]" for k in (1, 10, 100)}
    return {"1 event": (batch[1], 1, "agent-bridge:events"), "10 events": (batch[10], 10, "agent-bridge:events"),
            "100 events": (batch[100], 100, "agent-bridge:events"),
            "a command": (orjson.dumps(COMMAND), 1, "agent-bridge:inbox:n2")}  # fmt: skip


def measure(payload: bytes, stream: str, entries: int) -> tuple[float, float]:
    """Best-of-REPEAT µs per entry: (sign, verify)."""
    key = derive_key("bench-pheby-secret-0123456789", "bench-lvmh-token-0123456789")
    best_sign = best_verify = float("inf")
    for rep in range(REPEAT):
        signer = Signer(key, "n1", f"epoch{rep}")
        t0 = time.perf_counter()
        signed = [signer.sign(stream, payload) for _ in range(entries)]
        t1 = time.perf_counter()
        verifier = Verifier(key)
        entry_id = f"{int(time.time() * 1000)}-0".encode()
        fields = [{b"h": h, b"b": payload, b"m": m} for h, m in signed]
        t2 = time.perf_counter()
        ok = sum(verifier.check(stream, entry_id, f) is not None for f in fields)
        t3 = time.perf_counter()
        assert ok == entries, verifier.dropped
        best_sign = min(best_sign, (t1 - t0) / entries * 1e6)
        best_verify = min(best_verify, (t3 - t2) / entries * 1e6)
    return best_sign, best_verify


@contextlib.contextmanager
def _no_hmac():
    """The HMAC replaced by a constant, for the A/B: everything else the signed bus does stays."""
    real = busauth.entry_mac
    busauth.entry_mac = lambda key, h, payload: b"\0" * 32
    try:
        yield
    finally:
        busauth.entry_mac = real


def bus_alone(seconds: float, rate: float, rounds: int) -> dict[str, list[float]]:
    """CPU µs per event of the Redis bus alone, with and without the HMAC, A B A B ..."""
    from bench.scale import bus_overhead
    from bridge_core.scale.redisbus import RedisBus
    from tests.engines import Redis, redis_missing

    if redis_missing():
        raise SystemExit(f"bench.busmac: {redis_missing()}")
    redis = Redis().start()
    out: dict[str, list[float]] = {"HMAC-SHA256": [], "no HMAC": []}
    try:
        for _ in range(rounds):
            for name in out:
                redis.flush()
                with _no_hmac() if name == "no HMAC" else contextlib.nullcontext():
                    row = asyncio.run(bus_overhead(lambda: RedisBus(redis.url, "bench", key=os.urandom(32)), rate,
                                                   seconds))  # fmt: skip
                out[name].append(row["cpu_us_per_event"])
    finally:
        redis.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.busmac", description=__doc__.split("\n\n")[0])
    p.add_argument("--entries", type=int, default=20000)
    p.add_argument("--bus", type=float, default=0.0, help="seconds of the bus alone per round (0: not measured)")
    p.add_argument("--rate", type=float, default=5000.0, help="events/s of the bus alone")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    print(f"{'entry':<14}{'bytes':>8}{'sign us':>10}{'verify us':>11}{'both us':>10}{'both us/event':>15}")
    for name, (payload, events, stream) in _payloads().items():
        sign, verify = measure(payload, stream, args.entries)
        print(f"{name:<14}{len(payload):>8}{sign:>10.2f}{verify:>11.2f}{sign + verify:>10.2f}"
              f"{(sign + verify) / events:>15.2f}")  # fmt: skip
    if args.bus > 0:
        rows = bus_alone(args.bus, args.rate, args.rounds)
        print(f"\nthe bus alone: {args.rate:g} delta-sized events/s for {args.bus:g} s, {args.rounds} rounds, median "
              "(min..max) CPU us per event")  # fmt: skip
        for name, vals in rows.items():
            print(f"{name:<14}{statistics.median(vals):>8.1f}  ({min(vals):.1f}..{max(vals):.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
