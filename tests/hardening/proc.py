"""The bridge under attack: ``python -m cli serve`` as a separate process.

``BridgeProcess`` writes a config file, starts the server on port 0 in its own
data directory, reads ``<data-dir>/run/ports.json``, and can stop it cleanly
(SIGTERM, exit 0), kill it with SIGKILL and start it again on the same data
directory. Everything the process prints goes to files under ``logs/`` so the
secrets test can grep all of it. CPU, RSS and descriptors come from
``bench.proc.ProcWatch`` (/proc).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import weakref
from typing import Optional

from bench.proc import ProcWatch, admin_headers_for, note_admin_key, raise_fd_limit  # noqa: F401 (re-exported)

from tests.waiting import until, until_sync

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PHEBY_SECRET = "hardening-pheby-secret-7f3a9c1e5b2d4f60"
LVMH_TOKEN = "hardening-lvmh-token-2c8e4a6b0d1f3957"




def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))


def write_toml(path: str, sections: dict) -> None:
    lines = []
    for key, value in sections.items():
        if not isinstance(value, dict):
            lines.append(f"{key} = {_toml_value(value)}")
    for name, body in sections.items():
        if isinstance(body, dict):
            lines.append(f"[{name}]")
            lines += [f"{k} = {_toml_value(v)}" for k, v in body.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


MADE: "weakref.WeakSet[BridgeProcess]" = weakref.WeakSet()  # every bridge process made (``kill_made``)


def kill_made() -> None:
    """Kill every bridge process still running (tests/hangs.py: the test process is about to end, its fixtures'
    teardown with it, and a child left running would serve on for good)."""
    for p in list(MADE):
        if p.alive:
            p.proc.kill()


class BridgeProcess:
    """One bridge server process (restartable on the same data directory)."""

    def __init__(
        self,
        base: str,
        adapters: str = "pheby,loomi,lvmh",
        config: Optional[dict] = None,
        env: Optional[dict] = None,
        log_level: str = "INFO",
        extra_args: Optional[list] = None,
    ):
        MADE.add(self)
        self.base = base
        self.data_dir = os.path.join(base, "data")
        self.log_dir = os.path.join(base, "logs")
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(self.log_dir, exist_ok=True)
        self.adapters = adapters
        self.config_path = os.path.join(base, "config.toml")
        write_toml(self.config_path, config or {})
        self.env = dict(os.environ, PHEBY_SECRET=PHEBY_SECRET, LVMH_TOKEN=LVMH_TOKEN, PYTHONPATH=ROOT)
        self.env.pop("AGENT_BRIDGE_DATA", None)
        self.env.pop("AGENT_BRIDGE_CONFIG", None)
        self.env.pop("DOCKER_HOST", None)
        # never reach out: GitLab and Docker point at nothing unless a test gives its fake
        self.env["LVMH_GITLAB_URL"] = "http://127.0.0.1:9"
        self.env["LVMH_DOCKER_URL"] = "unix:///nonexistent/agent-bridge-hardening/docker.sock"
        self.env.update(env or {})
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.proc: Optional[subprocess.Popen] = None
        self.watch: Optional[ProcWatch] = None
        self.ports: dict = {}
        self.starts = 0
        self.idle_sockets = 0

    @property
    def portfile(self) -> str:
        return os.path.join(self.data_dir, "run", "ports.json")

    def command(self) -> list:
        return [sys.executable, "-m", "cli", "serve", "--data-dir", self.data_dir, "--config", self.config_path,
                "--adapters", self.adapters, "--pheby-port", "0", "--loomi-port", "0", "--lvmh-port", "0",
                "--log-level", self.log_level, *self.extra_args]

    def start(self, timeout: float = 30.0) -> dict:
        assert self.proc is None or self.proc.poll() is not None, "already running"
        try:
            os.unlink(self.portfile)  # a SIGKILLed server leaves its ports.json behind
        except FileNotFoundError:
            pass
        self.starts += 1
        out = open(os.path.join(self.log_dir, f"stdout.{self.starts}.log"), "wb")
        err = open(os.path.join(self.log_dir, f"stderr.{self.starts}.log"), "wb")
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=self.env, stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL)
        out.close()
        err.close()

        def listening() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bridge exited with {self.proc.returncode}: {self.stderr()[-3000:]}")
            return os.path.exists(self.portfile)

        try:
            until_sync(listening, timeout, "ports.json", interval=0.05)
        except AssertionError:
            raise RuntimeError(f"bridge did not start in {timeout} s: {self.stderr()[-3000:]}") from None
        with open(self.portfile) as f:
            self.ports = json.load(f)
        note_admin_key(self.ports, self.data_dir)  # pairing helpers find it by the Loomi port
        self.watch = ProcWatch(self.proc.pid)
        self.idle_sockets = self.tcp_connections()  # its listeners (and loop internals), no client yet
        return self.ports

    def run_to_exit(self, timeout: float = 30.0) -> int:
        """Start a process expected to exit on its own (bad configuration); its exit status."""
        self.starts += 1
        out = open(os.path.join(self.log_dir, f"stdout.{self.starts}.log"), "wb")
        err = open(os.path.join(self.log_dir, f"stderr.{self.starts}.log"), "wb")
        self.proc = subprocess.Popen(self.command(), cwd=ROOT, env=self.env, stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL)
        out.close()
        err.close()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20.0) -> Optional[int]:
        """SIGTERM and wait; the exit status (None when it was not running)."""
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def stderr(self) -> str:
        return self._read(f"stderr.{self.starts}.log")

    def all_output(self) -> str:
        parts = []
        for name in sorted(os.listdir(self.log_dir)):
            parts.append(self._read(name))
        return "\n".join(parts)

    def _read(self, name: str) -> str:
        try:
            with open(os.path.join(self.log_dir, name), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    async def wait_log(self, text: str, count: int = 1, timeout: float = 30.0) -> bool:
        """Wait until the current process's stderr contains ``text`` ``count`` times (False past ``timeout``)."""
        try:
            await until(lambda: self.stderr().count(text) >= count, timeout, repr(text), interval=0.05)
        except AssertionError:
            return False
        return True

    async def quiesce(self, held: int = 0, timeout: float = 30.0) -> None:
        """Until the server holds no client sockets beyond the ``held`` ones the test keeps open (the
        sockets it had just after starting are its own: listeners). Resource baselines come after it."""
        try:
            await until(lambda: self.tcp_connections() <= self.idle_sockets + held, timeout, "", interval=0.05)
        except AssertionError:
            raise AssertionError(f"the server still holds {self.tcp_connections() - self.idle_sockets} client "
                                 f"sockets after {timeout:g}s (the test holds {held})") from None

    async def fds_back(self, target: int, timeout: float = 30.0) -> int:
        """Until the server's descriptors are back to ``target`` (or fewer); the count (checked by the caller)."""
        try:
            await until(lambda: self.fds() <= target, timeout, "the descriptors back", interval=0.1)
        except AssertionError:
            pass
        return self.fds()

    def rss(self) -> int:
        return self.watch.rss() if self.watch else 0

    def fds(self) -> int:
        return self.watch.fds() if self.watch else 0

    def tcp_connections(self) -> int:
        """Sockets this process holds (its open descriptors that are sockets)."""
        if self.proc is None:
            return 0
        n = 0
        fd_dir = f"/proc/{self.proc.pid}/fd"
        for fd in os.listdir(fd_dir):
            try:
                if os.readlink(os.path.join(fd_dir, fd)).startswith("socket:"):
                    n += 1
            except OSError:
                pass
        return n

    def admin_key(self) -> str:
        """This run's admin key (``<data-dir>/run/admin.key``)."""
        from bridge_core.kit.security import read_admin_key

        return read_admin_key(self.data_dir) or ""

    def admin_headers(self) -> dict:
        return {"Authorization": f"Bearer {self.admin_key()}"}

    def db_path(self) -> str:
        return os.path.join(self.data_dir, "bridge.db")


def count_rows(db: str, sql: str, params: tuple = ()) -> int:
    """``SELECT count(*) ...`` on a running server's database, read-only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


async def wait_rows(db: str, sql: str, params: tuple, n: int, timeout: float = 10.0) -> None:
    """Until ``sql`` (a count) reaches ``n``: what was delivered is committed."""
    try:
        await until(lambda: count_rows(db, sql, params) >= n, timeout, f"{n} rows committed", interval=0.02)
    except AssertionError:
        raise AssertionError(f"only {count_rows(db, sql, params)} of {n} rows committed") from None


def process_factory(base: str):
    """``(make, stop_all)``: ``make(name, start=True, cls=BridgeProcess, **kw)`` starts a bridge process
    under ``base``; ``stop_all()`` stops every one made (SIGTERM). The fixtures of tests/hardening
    (``bridge_factory``) and tests/security (``bridges``) are this."""
    procs: list = []

    def make(name: str = "bridge", start: bool = True, cls: type = BridgeProcess, **kw) -> BridgeProcess:
        p = cls(os.path.join(base, name), **kw)
        procs.append(p)
        if start:
            p.start()
        return p

    def stop_all() -> None:
        for p in procs:
            p.stop()

    return make, stop_all
