"""Private PostgreSQL and Redis instances for the several-nodes tests (tests/store, tests/scale, bench/scale.py).

Each one runs from a temporary directory on a free loopback port and is stopped (and its
directory removed) by its owner: never a system service, never shared between test modules.
PostgreSQL refuses to run as root, so under root its files belong to ``nobody`` and its
commands run through ``runuser``. A missing engine is a missing peer (tests/peers.py): plain
pytest skips with the reason, CI fails (scripts/install-peers installs both).
"""

from __future__ import annotations

import atexit
import glob
import os
import random
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Optional

from .peers import missing_peer


def free_port() -> int:
    """A free loopback port for a server that keeps it across restarts (PostgreSQL, Redis, a nemesis node),
    from below the kernel's ephemeral range: while that server is down (killed, restarting), a port-0 bind of
    another process, such as any server of the suite running beside it, never lands on it (chaos at 9f922a9:
    a node's restart found its port taken and the run stopped)."""
    low = _ephemeral_low()
    pick = random.SystemRandom()
    for _ in range(100):
        port = pick.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every pick taken: the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def pg_bindir() -> Optional[str]:
    for cand in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(cand, "initdb")):
            return cand
    found = shutil.which("initdb")
    return os.path.dirname(found) if found else None


def pg_missing() -> Optional[str]:
    """The skip reason when PostgreSQL's server (or the psycopg driver) is not here, else None."""
    if pg_bindir() is None:
        return missing_peer("postgresql", "no initdb (scripts/install-peers postgresql installs Debian's postgresql)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return missing_peer("postgresql", "the psycopg driver is not installed (pip install -e '.[test]')")
    return None


def redis_missing() -> Optional[str]:
    if shutil.which("redis-server") is None:
        return missing_peer("redis", "no redis-server (scripts/install-peers redis installs Debian's redis-server)")
    try:
        import redis  # noqa: F401
    except ImportError:
        return missing_peer("redis", "the redis client is not installed (pip install -e '.[test]')")
    return None


def _wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.02)  # polling a port until it answers, with a deadline
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


_INITDB: dict[str, str] = {}


def _initdb_once(bindir: str, as_user: list[str]) -> str:
    """A freshly initdb'd data directory, made once per test process, that each server starts from a copy of."""
    if bindir not in _INITDB:
        top = tempfile.mkdtemp(prefix="ab-pg-initdb-")
        atexit.register(shutil.rmtree, top, True)
        if as_user:
            os.chown(top, 65534, 65534)
        data = os.path.join(top, "data")
        subprocess.run(as_user + [os.path.join(bindir, "initdb"), "-D", data, "-A", "trust", "-U", "postgres",
                                  "--no-sync", "-E", "UTF8"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        _INITDB[bindir] = data
    return _INITDB[bindir]


LIVE: set = set()  # the engines started and not stopped yet (``stop_live``)


def stop_live() -> None:
    """Stop every engine still running: a test past its limit is about to end the process (tests/hangs.py, at
    pytest-timeout's ``os._exit`` no fixture's teardown runs), and a server daemonized (``pg_ctl``) or a child
    left behind would outlive it, holding its port and memory for good."""
    for engine in list(LIVE):
        try:
            engine.stop()
        except Exception:  # noqa: BLE001  (a last resort: stop what can be stopped)
            pass


class Postgres:
    """One private PostgreSQL server; ``new_database()`` gives each test a database of its own."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ab-pg-")
        self.port = free_port()
        self.bindir = pg_bindir()
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses root: its files and processes belong to nobody
            os.chown(self.dir, 65534, 65534)
            self.as_user = ["runuser", "-u", "nobody", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run(self.as_user + list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> "Postgres":
        data = os.path.join(self.dir, "data")
        # a copy of one initdb'd cluster per test process (0.4 s against initdb's 1.1 s, for each module's server)
        self._run("cp", "-a", _initdb_once(self.bindir, self.as_user), data)
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        LIVE.add(self)
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"), "-w",
                  "-t", "60", "-o", opts, "start")  # fmt: skip
        return self

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def new_database(self) -> str:
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        """Stop the server at once (as a crash would) and start it again on the same port and data."""
        data = os.path.join(self.dir, "data")
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop")
        opts = f"-k {self.dir} -p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        self._run(os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "log"), "-w",
                  "-t", "60", "-o", opts, "start")  # fmt: skip

    def stop(self) -> None:
        LIVE.discard(self)
        try:
            self._run(os.path.join(self.bindir, "pg_ctl"), "-D", os.path.join(self.dir, "data"), "-m", "immediate",
                      "-w", "stop")  # fmt: skip
        except subprocess.CalledProcessError:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Redis:
    """One private redis-server, no persistence, needing a password as a deployed one should
    (docs/scale-out.md "Signed entries"): ``url`` carries it; ``flush()`` empties it for the next test."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="ab-redis-")
        self.port = free_port()
        self.password = secrets.token_hex(12)
        self.proc: Optional[subprocess.Popen] = None

    def start(self) -> "Redis":
        conf = os.path.join(self.dir, "redis.conf")  # the password in a 0600 file, not on a command line
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"requirepass {self.password}\n")
        self.proc = subprocess.Popen(
            ["redis-server", conf, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir, "--save", "",
             "--appendonly", "no", "--protected-mode", "no"],  # fmt: skip
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        LIVE.add(self)
        _wait_port(self.port, self.proc, "redis-server")
        return self

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    @property
    def url_without_password(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def flush(self) -> None:
        import redis

        r = redis.Redis(host="127.0.0.1", port=self.port, password=self.password)
        try:
            r.flushall()
        finally:
            r.close()

    def restart(self) -> None:
        """Killed and started again on the same port: without persistence, every key is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.start()

    def stop(self) -> None:
        LIVE.discard(self)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)
