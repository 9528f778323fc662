"""Event-loop lag monitor for the server under test (benchmark only: never imported by the bridge).

``python -m bench.lagmon <module> [args...]`` runs ``<module>`` (``cli`` or
``bench.baseline``) as ``__main__`` with the monitor installed; the bench
starts both the bridge and the baseline this way, so both pay the same
small cost. The report (JSON) goes to the file named by ``BENCH_LAGMON``,
rewritten every half second and at exit; nothing is logged. The bench
sends SIGUSR1 when its measured window starts (start-up is forgotten) and
SIGUSR2 when it ends (the report is written and frozen: shutdown is not
measured).

What it measures:

- loop lag: a callback due every ``TICK`` seconds notes how late it ran
  (max, p99, and how many ticks were later than ``STALL``);
- what a stall coincides with: a watchdog thread that finds the loop
  without a tick for longer than ``TICK + STALL`` samples the loop
  thread's stack (the innermost frames of the bridge, aiohttp, asyncio),
  and every garbage collection is timed (``gc.callbacks``) so a stall
  can be matched with a collection and its generation;
- what the loop thread did during a stall, from the kernel's accounting of
  it (``/proc/self/task/<tid>/schedstat``: time on a CPU, time waiting in a
  run queue): ``running`` (it executed: the server's own work), ``cpu`` (it
  was runnable but the machine gave it no CPU: the other processes'
  doing), ``blocked`` (neither: it waited for the GIL held by another
  thread, or in a blocking call). A ``select`` sample of a ``cpu`` stall
  is the machine's, not the server's.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import gc
import json
import os
import runpy
import signal
import sys
import threading
import time

TICK = 0.005
STALL = 0.005
WATCH_EVERY = 0.005  # the watchdog's own GIL hand-offs stay rare


class LagMonitor:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lags: list[float] = []
        self.max_lag = 0.0
        self.stalls = 0
        self.last_tick = time.monotonic()
        self.loop_thread = threading.get_ident()
        self.gc_max = [0.0, 0.0, 0.0]
        self.gc_count = [0, 0, 0]
        self.gc_total = 0.0
        self._gc_start = 0.0
        self.stacks: collections.Counter = collections.Counter()  # stall samples by innermost frames
        self.stall_gc = 0  # stalls during which a collection ran
        self._gc_in_stall = False
        self._in_stall = False
        self._lock = threading.Lock()
        self.started = time.time()
        self.frozen = False
        self.loop_tid = 0  # the loop thread's kernel id (schedstat)
        self._stall_start: tuple = ()  # (monotonic, on-CPU ns, run-queue ns) when the current stall began
        self.stall_kinds = {"running": 0, "cpu": 0, "blocked": 0}
        self.stall_ms = {"running": 0.0, "cpu": 0.0, "blocked": 0.0}

    # --- in the loop -------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop_thread = threading.get_ident()
        self.loop_tid = threading.get_native_id()
        self._due = loop.time() + TICK
        self._loop = loop
        loop.call_at(self._due, self._tick)
        gc.callbacks.append(self._on_gc)
        threading.Thread(target=self._watch, name="bench-lagmon", daemon=True).start()

    def reset(self) -> None:
        """The measured window starts (SIGUSR1 from the bench): forget start-up."""
        self.lags = []
        self.max_lag = 0.0
        self.stalls = self.stall_gc = 0
        self.gc_max = [0.0, 0.0, 0.0]
        self.gc_count = [0, 0, 0]
        self.gc_total = 0.0
        self.stacks = collections.Counter()
        self.stall_kinds = {"running": 0, "cpu": 0, "blocked": 0}
        self.stall_ms = {"running": 0.0, "cpu": 0.0, "blocked": 0.0}
        self.frozen = False

    def freeze(self) -> None:
        """The measured window ends (SIGUSR2): write the report and record no more (shutdown is not measured)."""
        self.frozen = True
        self.write(force=True)

    def _tick(self) -> None:
        loop = self._loop
        if self.frozen:
            return
        now = loop.time()
        lag = now - self._due
        self.lags.append(lag)
        if lag > self.max_lag:
            self.max_lag = lag
        if lag > STALL:
            self.stalls += 1
        self.last_tick = time.monotonic()
        self._due = now + TICK
        loop.call_at(self._due, self._tick)

    def _on_gc(self, phase: str, info: dict) -> None:
        if self.frozen:
            return
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        dt = time.perf_counter() - self._gc_start
        g = info.get("generation", 0)
        self.gc_count[g] += 1
        self.gc_total += dt
        if dt > self.gc_max[g]:
            self.gc_max[g] = dt
        if self._in_stall:
            self._gc_in_stall = True

    # --- the watchdog thread -------------------------------------------------------
    def _watch(self) -> None:
        next_write = time.monotonic() + 0.5
        while True:
            time.sleep(WATCH_EVERY)
            if self.frozen:
                continue
            now = time.monotonic()
            if now - self.last_tick > TICK + STALL:
                if not self._in_stall:
                    self._in_stall = True
                    self._stall_start = (self.last_tick, *self._sched())
                    frame = sys._current_frames().get(self.loop_thread)
                    if frame is not None:
                        self.stacks[_where(frame)] += 1
            elif self._in_stall:
                self._in_stall = False
                self._classify(now)
                if self._gc_in_stall:
                    self.stall_gc += 1
                    self._gc_in_stall = False
            if now >= next_write:
                next_write = now + 0.5
                self.write()

    def _sched(self) -> tuple[int, int]:
        """The loop thread's time on a CPU and waiting in a run queue so far (ns)."""
        try:
            with open(f"/proc/self/task/{self.loop_tid}/schedstat") as f:
                on_cpu, waiting = f.read().split()[:2]
            return int(on_cpu), int(waiting)
        except (OSError, ValueError):
            return 0, 0

    def _classify(self, now: float) -> None:
        """A stall just ended: what the loop thread was doing through most of it."""
        if not self._stall_start:
            return
        began, cpu0, wait0 = self._stall_start
        cpu1, wait1 = self._sched()
        span = max(1e-9, now - began)
        ran, waited = (cpu1 - cpu0) / 1e9, (wait1 - wait0) / 1e9
        kind = "running" if ran >= max(waited, span / 2) else "cpu" if waited >= span / 2 else "blocked"
        self.stall_kinds[kind] += 1
        self.stall_ms[kind] += span * 1000

    def report(self) -> dict:
        lags = sorted(self.lags)
        n = len(lags)
        return {
            "ticks": n,
            "max_lag_ms": self.max_lag * 1000,
            "p99_lag_ms": (lags[min(n - 1, int(0.99 * (n - 1)))] * 1000) if n else 0.0,
            "stalls": self.stalls,
            "stalls_with_gc": self.stall_gc,
            "gc_count": self.gc_count,
            "gc_max_ms": [x * 1000 for x in self.gc_max],
            "gc_total_ms": self.gc_total * 1000,
            "stall_stacks": self.stacks.most_common(8),
            "stall_kinds": dict(self.stall_kinds),
            "stall_ms": {k: round(v, 1) for k, v in self.stall_ms.items()},
        }

    def write(self, force: bool = False) -> None:
        if self.frozen and not force:
            return
        with self._lock:
            try:
                tmp = self.path + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(self.report(), f)
                os.replace(tmp, self.path)
            except Exception:
                pass


def _where(frame) -> str:
    """The innermost frames of a stall sample, as ``file:function`` (at most 4, innermost first)."""
    out = []
    while frame is not None and len(out) < 4:
        code = frame.f_code
        name = os.path.basename(code.co_filename)
        out.append(f"{name}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return " < ".join(out)


class _Policy(asyncio.DefaultEventLoopPolicy):
    def __init__(self, monitor: LagMonitor) -> None:
        super().__init__()
        self.monitor = monitor
        self.installed = False

    def new_event_loop(self):
        loop = super().new_event_loop()
        if not self.installed:
            self.installed = True
            loop.call_soon(self.monitor.start, loop)
        return loop


def install(path: str) -> LagMonitor:
    mon = LagMonitor(path)
    policy = _Policy(mon)
    asyncio.set_event_loop_policy(policy)  # the baseline's asyncio.run
    try:  # the bridge's own loop (agent-bridge serve makes it with bridge_core.kit.looping, not the policy)
        from bridge_core.kit import looping
    except ImportError:
        looping = None
    if looping is not None:
        make = looping.new_event_loop

        def new_event_loop():
            loop = make()
            if not policy.installed:
                policy.installed = True
                loop.call_soon(mon.start, loop)
            return loop

        looping.new_event_loop = new_event_loop
    atexit.register(mon.write)
    return mon


def main() -> None:
    path = os.environ.get("BENCH_LAGMON")
    module, sys.argv = sys.argv[1], [sys.argv[1]] + sys.argv[2:]
    if path:
        mon = install(path)

        def _term(signum, frame):  # the baseline has no handler of its own: report, then exit
            mon.write()
            raise SystemExit(0)

        signal.signal(signal.SIGTERM, _term)
        signal.signal(signal.SIGUSR1, lambda s, f: mon.reset())
        signal.signal(signal.SIGUSR2, lambda s, f: mon.freeze())
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
