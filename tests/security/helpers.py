"""Shared helpers for the security suite: `agent-bridge serve` as a subprocess, attackers on their own
loopback addresses, and counting how many wrong guesses get an answer.

Import the ``bridges`` fixture into a test module (``from .helpers import bridges  # noqa: F401``).
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import os
import sys
import time
from typing import Awaitable, Callable, Optional

import aiohttp
import orjson
import pytest

from bridge_core.kit.security import DEFAULT_WRONG_RATE
from tests import waiting
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, ROOT, BridgeProcess, process_factory
from tests.hardening.wsraw import HandshakeRefused, RawWS

__all__ = ["BridgeProcess", "LimitedBridge", "LVMH_TOKEN", "PHEBY_SECRET", "ROOT", "RawWS", "HandshakeRefused",
           "bridges", "http_from", "fire", "answered_within", "rate_bound", "cli", "until", "loomi_hello",
           "pheby_hello", "pair_device", "data_dir_state"]


class LimitedBridge(BridgeProcess):
    """A bridge started with a given RLIMIT_NOFILE (soft and hard: it raises its soft limit to the hard one)."""

    def __init__(self, base: str, nofile: int, **kw):
        super().__init__(base, **kw)
        self.nofile = nofile

    def command(self) -> list:
        setlimit = ("import os, resource, sys; n = int(sys.argv[1]); resource.setrlimit(resource.RLIMIT_NOFILE, (n, n)); "
                    "os.execv(sys.executable, [sys.executable, *sys.argv[2:]])")
        return [sys.executable, "-c", setlimit, str(self.nofile), *super().command()[1:]]


@pytest.fixture
def bridges(tmp_path):
    """``make(name, **kw)`` starts a bridge process (``cls=LimitedBridge, nofile=N`` for a low limit)."""
    make, stop_all = process_factory(str(tmp_path))
    yield make
    stop_all()


def http_from(source: str) -> aiohttp.ClientSession:
    """A client whose connections come from ``source`` (a 127.x address), with no connection limit."""
    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(local_addr=(source, 0), limit=0))


async def until(check: Callable[[], Awaitable[bool]], timeout: float = 10.0, what: str = "condition") -> None:
    """tests.waiting.until, polled every 50 ms: the checks here are requests that count against the limits."""
    await waiting.until(check, timeout, what, interval=0.05)


# --- guess counting --------------------------------------------------------------------------------------


async def fire(n: int, attempt: Callable[[int], Awaitable[str]]) -> tuple[float, list[tuple[float, str]]]:
    """Start ``n`` attempts at once; each returns "verdict" (the credential was judged), "refused"
    (429 / reset: nothing learnt) or anything else. Returns the start time and (arrival, outcome) pairs."""

    async def one(i: int) -> tuple[float, str]:
        try:
            outcome = await attempt(i)
        except (aiohttp.ClientError, ConnectionError, HandshakeRefused, asyncio.IncompleteReadError, OSError):
            outcome = "refused"
        return time.monotonic(), outcome

    t0 = time.monotonic()
    results = await asyncio.gather(*(one(i) for i in range(n)))
    return t0, list(results)


def answered_within(t0: float, results: list[tuple[float, str]], window: float) -> int:
    """Verdicts that arrived within ``window`` seconds of the start."""
    return sum(1 for t, outcome in results if outcome == "verdict" and t - t0 <= window)


def rate_bound(window: float, rate: float = DEFAULT_WRONG_RATE, slack: int = 5) -> int:
    """At most one answer at once and then ``rate`` per second, plus slack."""
    return int(rate * window) + 1 + slack


# --- clients -----------------------------------------------------------------------------------------------


async def cli(*args: str, env: Optional[dict] = None) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "cli", *args, cwd=ROOT, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def loomi_hello(port: int, payload: dict, source: Optional[str] = None) -> tuple[Optional[dict], Optional[int]]:
    """One raw Loomi hello: (first frame, close code). The socket is closed after."""
    ws = await RawWS.connect(port, local_addr=source)
    try:
        ws.send_text(orjson.dumps({"v": 1, "type": "hello", "payload": {"protocol_version": 1, **payload}}))
        data = await ws.recv_text(15)
        first = orjson.loads(data) if data is not None else None
        if first is not None and first.get("type") == "hello.ok":
            return first, None
        while (await ws.recv_text(15)) is not None:
            pass
        return first, ws.close_code
    finally:
        ws.abort()


async def pheby_hello(port: int, secret: str, source: Optional[str] = None) -> Optional[dict]:
    """One raw Pheby hello: its answer frame (``ready`` or ``error``)."""
    ws = await RawWS.connect(port, local_addr=source)
    try:
        ws.send_text(orjson.dumps({"type": "hello", "secret": secret, "protocol_version": 1}))
        data = await ws.recv_text(15)
        return orjson.loads(data) if data is not None else None
    finally:
        ws.abort()


async def pair_device(srv: BridgeProcess, name: str, source: Optional[str] = None) -> tuple[str, str]:
    """A new phone paired through the CLI's token (admin key) and a hello from ``source``: (device_id, credential)."""
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", srv.data_dir, env=srv.env)
    assert rc == 0, err
    token = orjson.loads(out)["token"]
    first, _ = await loomi_hello(srv.ports["loomi"], {"token": token, "device_info": {"model": name}}, source)
    assert first is not None and first["type"] == "hello.ok", first
    return first["payload"]["device_id"], first["payload"]["credential"]


# --- one process per data directory ---------------------------------------------------------------------


def data_dir_state(data_dir: str) -> dict:
    """What a second process on ``data_dir`` must leave as it is: the Loomi journal files (by inode: none
    deleted or replaced) and ``run/`` files (by their content's hash, never the admin key itself; None: gone)."""
    state: dict = {os.path.basename(p): os.stat(p).st_ino for p in glob.glob(os.path.join(data_dir, "loomi-journal.*"))}
    for name in ("ports.json", "admin.key", "endpoints.json"):
        try:
            with open(os.path.join(data_dir, "run", name), "rb") as f:
                state[name] = hashlib.sha256(f.read()).hexdigest()
        except FileNotFoundError:
            state[name] = None
    return state
