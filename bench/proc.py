"""Server processes for the benchmark: start, find ports, read CPU time and RSS from /proc."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from typing import Optional

from bridge_core.kit.security import raise_nofile_limit, read_admin_key

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_SECRET = "bench-pheby-secret-0123456789abcdef"
BENCH_TOKEN = "bench-lvmh-token-0123456789abcdef"


# one function for the server and the load clients (children inherit the limit)
raise_fd_limit = raise_nofile_limit


# the admin key of each running server, by its Loomi port: the loopback-only endpoints
# (pairing) need it, and load clients know a server by its ports only
_ADMIN_KEYS: dict[int, str] = {}


def note_admin_key(ports: dict, data_dir: str) -> None:
    """Remember the admin key of the server whose ``ports.json`` was just read (written before it)."""
    key = read_admin_key(data_dir)
    if key and isinstance(ports.get("loomi"), int):
        _ADMIN_KEYS[ports["loomi"]] = key


def admin_headers_for(port: int) -> dict:
    """``Authorization`` for the loopback-only endpoints of the server on this Loomi port."""
    return {"Authorization": f"Bearer {_ADMIN_KEYS.get(port, '')}"}


class ProcWatch:
    def __init__(self, pid: int):
        self.pid = pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def cpu(self) -> float:
        """CPU seconds of the process so far, all threads, in nanosecond resolution (schedstat).

        /proc/<pid>/stat counts clock ticks (10 ms), too coarse for a per-frame figure.
        """
        total = 0
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                try:
                    with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                        total += int(f.read().split()[0])
                except (FileNotFoundError, ProcessLookupError):
                    continue
            return total / 1e9
        except FileNotFoundError:
            pass
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / self.tick

    def cpu_split(self) -> tuple[float, float]:
        """CPU seconds so far of the main thread (the event loop) and of all the other threads together."""
        main = other = 0
        try:
            for tid in os.listdir(f"/proc/{self.pid}/task"):
                try:
                    with open(f"/proc/{self.pid}/task/{tid}/schedstat") as f:
                        ns = int(f.read().split()[0])
                except (FileNotFoundError, ProcessLookupError):
                    continue
                if tid == str(self.pid):
                    main += ns
                else:
                    other += ns
        except FileNotFoundError:
            pass
        return main / 1e9, other / 1e9

    def _status(self, key: str) -> int:
        with open(f"/proc/{self.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        return 0

    def rss(self) -> int:
        return self._status("VmRSS")

    def peak_rss(self) -> int:
        return self._status("VmHWM")

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.pid}/fd"))


class Server:
    """A server subprocess (the bridge or the baseline) and its ports."""

    def __init__(self, kind: str, adapters: str = "pheby,loomi,lvmh", extra_env: Optional[dict] = None,
                 lag: bool = False, args: tuple = ()):
        self.kind = kind
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{kind}-")
        env = dict(os.environ, PHEBY_SECRET=BENCH_SECRET, LVMH_TOKEN=BENCH_TOKEN, PYTHONPATH=ROOT)
        env.update(extra_env or {})
        # lag: the server runs under bench.lagmon (the same for the bridge and the baseline)
        self.lag_path = os.path.join(self.tmp, "lag.json") if lag else None
        run = [sys.executable, "-m"] + (["bench.lagmon"] if lag else [])
        if lag:
            env["BENCH_LAGMON"] = self.lag_path
        if kind == "bridge":
            # the load clients open hundreds of sockets at once from one address: above the default cap of
            # unauthenticated connections per address (a security default, not what is measured here)
            conf = os.path.join(self.tmp, "bench.toml")
            with open(conf, "w") as f:
                f.write("[security]\nunauthenticated_per_address = 100000\n")
            cmd = run + ["cli", "serve", "--config", conf, "--data-dir", self.tmp, "--adapters", adapters,
                   "--pheby-port", "0", "--loomi-port", "0", "--lvmh-port", "0", "--metrics-port", "0",
                   "--log-level", "WARNING", *args]
            self.portfile = os.path.join(self.tmp, "run", "ports.json")
        else:
            self.portfile = os.path.join(self.tmp, "ports.json")
            cmd = run + ["bench.baseline", "--portfile", self.portfile]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.ports = self._wait_ports()
        self.watch = ProcWatch(self.proc.pid)

    def _wait_ports(self, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited: {self.proc.stderr.read().decode()[-2000:]}")
            if os.path.exists(self.portfile):
                with open(self.portfile) as f:
                    ports = json.load(f)
                if self.kind == "bridge":
                    note_admin_key(ports, self.tmp)
                return ports
            time.sleep(0.05)
        raise RuntimeError(f"{self.kind} did not start")

    def lag_window(self, start: bool) -> None:
        """Tell the lag monitor that the measured window starts (True) or ends (False)."""
        if self.lag_path and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGUSR1 if start else signal.SIGUSR2)

    def lag_report(self) -> Optional[dict]:
        """The lag monitor's report (after ``stop``, its final one), or None without a monitor."""
        if not self.lag_path or not os.path.exists(self.lag_path):
            return None
        with open(self.lag_path) as f:
            return json.load(f)

    def stop(self, keep: bool = False) -> None:
        """SIGTERM (then kill); the data dir is removed unless ``keep`` (call ``cleanup`` later)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep:
            self.cleanup()

    def cleanup(self) -> None:
        import shutil

        shutil.rmtree(self.tmp, ignore_errors=True)
