"""The core's own cost per event, in one process, without sockets: the team load's per-event part, low-noise.

The team load (``bench/team.py``) measures the server as a whole, with its
clients on the same two cores: its CPU ratios swing by 5-10% between runs,
more than most single changes to the core move them. This measure isolates
what the core does for one streamed delta, from the agent's ``ctx.delta``
to the frames kept for replay: the ``TextDelta``, ``Bridge.publish`` (the
conversation's state, the draft saver, the push notifier), and Loomi's
``on_event`` (the render, each paired device's seq splice and replay
window, the journal record). Devices are paired but not connected (a device
offline gets no frame, only its seq and window entry) unless ``live`` is given
(then each frame goes into a stand-in outbox, a short deque): what a connection's write costs is the team
load's per-client slope. The journaled replay rows reach the store when a
journal file is half full (about every 7,700 deltas here): that insert, by
the store's writer thread sharing the GIL, falls inside some repetitions.

A run's start is measured the same way: ``SendMessage`` of ``/bench`` in a
new conversation, as a phone's ``session.send`` arrives, each awaited (the
conversation, the user's message, the run and their store writes, the
agent's task and its first delta), best of several batches of starts. At a
team's start a hundred of these fall within one pacing interval, and the
frames already streaming wait behind them.

Every configuration runs in a fresh interpreter (``python -m bench.event_cost
DEVICES N [COLD [live]]``, which prints one JSON line; ``live``: each device as if
connected, its frame made and put into an outbox, as in a team load); the figure is the best of several
repetitions, the closest to the work itself on a shared machine. Each figure is
also taken on the thread's CPU clock (``time.thread_time``): on a machine other
processes load, the wall clock also counts the time they held the CPU.

The same delta is also measured cold: one at a time, each after a read of a
buffer as large as the last-level cache (``Evictor``), so that it finds
neither its code nor its objects cached, nor their pages in the TLB. That is
the state a team load's deltas meet: between two events of paced runs the
clients and the other processes run on the same two cores. Hot, the loop
runs a delta's code thousands of times in a row and the figure is the
least the work can cost; cold is what it costs the server at a run's pace
(docs/performance.md, "Loomi's CPU at few runs").
"""

from __future__ import annotations

import asyncio
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import types

from .proc import ROOT

REPS = 7
STARTS = 100  # run starts per repetition (each in a conversation of its own, left streaming slowly)
COLD = 1000  # deltas measured cold, one at a time (the median is the figure)
LLC_DEFAULT = 32 * 1024 * 1024


def llc_bytes(base: str = "/sys/devices/system/cpu/cpu0/cache") -> int:
    """The size of the CPU's last-level cache (the largest in sysfs), LLC_DEFAULT when it is not known."""
    best = 0
    try:
        names = os.listdir(base)
    except OSError:
        return LLC_DEFAULT
    for name in names:
        try:
            with open(os.path.join(base, name, "size")) as f:
                text = f.read().strip().upper()
        except OSError:
            continue
        mult = {"K": 1024, "M": 1024 * 1024, "G": 1024 ** 3}.get(text[-1:], 1)
        try:
            size = int(text.rstrip("KMG")) * mult
        except ValueError:
            continue
        best = max(best, size)
    return best or LLC_DEFAULT


class Evictor:
    """Reads a buffer as large as the last-level cache: what the next step touches is cached no more."""

    def __init__(self, size: int = 0) -> None:
        # written once (not zero pages the kernel would map to one page): every cache line is real memory
        self.buf = bytearray(b"\x01") * (size or llc_bytes())

    def __call__(self) -> None:
        self.buf.find(b"\x02")  # one pass over every byte (there is no such byte)


async def _measure(devices: int, n: int, cold_n: int = COLD, live: bool = False) -> dict:
    from bridge_core.model import commands as cmd
    from bridge_core.model import events as ev
    from bridge_core.bridge.agent import RunContext
    from bridge_core.bridge.demo import DemoAgent
    from cli.config import build_config
    from bridge_core.model.ids import new_id
    from cli.serve import Service
    from loomi_adapter import codec

    tmp = tempfile.mkdtemp(prefix="bench-event-cost-")
    try:
        cfg = build_config({"data_dir": tmp, "adapters": "loomi", "loomi_port": 0, "host": "127.0.0.1",
                            "metrics_port": "off"}, {})
        svc = Service(cfg, DemoAgent())
        await svc.start()
        try:
            registry = svc.frontends["loomi"].registry
            for i in range(devices):
                await registry.pair(codec.DeviceInfo(name=f"bench-{i}"))
            if live:  # each device as if connected: its frame made and put into an outbox (a short deque)
                for d in registry.devices.values():
                    put = collections.deque(maxlen=16).append
                    d.conn = types.SimpleNamespace(outbox=types.SimpleNamespace(put=put))
            bridge = svc.bridge
            conv = bridge.create_conversation("bench")
            ctx = RunContext(bridge, bridge.default_source, conv.conversation_id, new_id())
            bridge.publish(ev.RunStarted(conversation_id=conv.conversation_id, run_id=ctx.run_id,
                                         message_id=ctx.message_id))
            delta = ctx.delta
            cpu = time.thread_time
            per_event = []
            per_event_cpu = []
            for _ in range(REPS):
                c0 = cpu()
                t0 = time.perf_counter()
                for _ in range(n):
                    delta("tok ")
                per_event.append((time.perf_counter() - t0) / n * 1e6)
                per_event_cpu.append((cpu() - c0) / n * 1e6)
                await asyncio.sleep(0)  # the loop's own work between repetitions (timers, the store's callbacks)
            evict = Evictor()
            cold = []
            cold_cpu = []
            for i in range(cold_n):
                evict()
                c0 = cpu()
                t0 = time.perf_counter()
                delta("tok ")
                cold.append((time.perf_counter() - t0) * 1e6)
                cold_cpu.append((cpu() - c0) * 1e6)
                if i % 50 == 49:
                    await asyncio.sleep(0)
            ctx.complete()
            per_start = []
            origin = cmd.Origin(surface="loomi", connection="bench")
            for rep in range(REPS):
                t0 = time.perf_counter()
                for i in range(STARTS):
                    await bridge.execute(cmd.SendMessage(text="/bench 5 0.1", request_id=f"s{rep}-{i}"), origin)
                per_start.append((time.perf_counter() - t0) / STARTS * 1e6)
                await asyncio.sleep(0)
            return {"devices": devices, "n": n, "live": live, "best_us": min(per_event),
                    "median_us": statistics.median(per_event),
                    "start_best_us": min(per_start), "cold_median_us": statistics.median(cold) if cold else None,
                    # the same on the thread's CPU clock: what the delta cost, not the time other processes
                    # of a shared machine took the CPU from it meanwhile
                    "cpu_best_us": min(per_event_cpu),
                    "cold_cpu_median_us": statistics.median(cold_cpu) if cold_cpu else None}
        finally:
            await svc.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(devices: int, n: int, cold_n: int = COLD) -> dict:
    """One configuration in a fresh interpreter, on the bridge's own loop."""
    out = subprocess.run([sys.executable, "-m", "bench.event_cost", str(devices), str(n), str(cold_n)], cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"bench.event_cost failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(quick: bool, rounds: int) -> bool:
    n = 2000 if quick else 20000
    cold_n = 200 if quick else COLD
    print(f"\nThe core's cost per streamed delta, in process, no sockets (best of {REPS} x {n} deltas; "
          f"median of {rounds} interpreter(s)): agent -> publish -> state -> Loomi replay per paired device; and a run's "
          f"start (a new conversation's /bench, best of {REPS} x {STARTS}); cold: the median of {cold_n} deltas, each "
          f"after the {llc_bytes() >> 20} MiB last-level cache was evicted (as between two events of paced runs)")
    rows = []
    for devices in (0, 1, 3, 10):
        got = [measure(devices, n, cold_n) for _ in range(rounds)]
        best = [g["best_us"] for g in got]
        rows.append((devices, statistics.median(best), min(best), max(best),
                     statistics.median(g["start_best_us"] for g in got),
                     statistics.median(g["cold_median_us"] for g in got),
                     statistics.median(g["cpu_best_us"] for g in got),
                     statistics.median(g["cold_cpu_median_us"] for g in got)))
    for devices, med, lo, hi, start, cold, cpu, cold_cpu in rows:
        print(f"  {devices:>3} paired device(s): {med:6.2f} us/event [{lo:.2f}..{hi:.2f}], cold {cold:6.2f} us; "
              f"on the thread's CPU clock {cpu:6.2f}, cold {cold_cpu:6.2f}; a run's start {start:6.1f} us")
    for label, col in (("hot", 1), ("cold", 5), ("hot, CPU clock", 6), ("cold, CPU clock", 7)):
        by = {r[0]: r[col] for r in rows}
        per_device = (by[10] - by[1]) / 9
        print(f"  split, {label}: the core alone {by[0]:.2f} us (no device: Loomi renders nothing); Loomi's render and "
              f"journal record {by[1] - by[0] - per_device:.2f} us; each paired device's seq splice and replay "
              f"window {per_device:.2f} us")
    return True


def main() -> None:
    from bridge_core.kit import looping

    devices, n = int(sys.argv[1]), int(sys.argv[2])
    cold_n = int(sys.argv[3]) if len(sys.argv) > 3 else COLD
    live = len(sys.argv) > 4 and sys.argv[4] == "live"
    with asyncio.Runner(loop_factory=looping.new_event_loop) as runner:
        print(json.dumps(runner.run(_measure(devices, n, cold_n, live))))


if __name__ == "__main__":
    main()
