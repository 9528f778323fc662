"""A restart's close that reached the store and never the stream is sent when the node comes back (chaos seed 2024,
``decision_not_once``; issue 41; docs/scale-out.md "A close the store has and the stream lacks").

n1 is killed (-9) with a run waiting at an approval; it comes back at once and closes the run itself
(``Bridge.report_interrupted``: the completion, the approval denied ``restart``, the run's end, a notice). Its bus
connection goes through a TCP proxy that holds everything from the first command naming the run: the store commits
the close, the stream never gets it. n1 is killed again and comes back. Before: its start found the run closed in the
store and published nothing; no other node, no client and no lvmh events table ever had the run's end or the
approval's resolution. Now the close's bus forms are in the store beside it (bridge_core/scale/unsent.py) and its
start sends them, once: every node's clients, state and the lvmh events table have them exactly once.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from typing import Any

import psycopg

from bridge_core.bridge.decisions import PENDING_KEY
from tests.conformance.lvmh_client import Rest
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, BridgeProcess
from tests.scale.killed import pheby_app
from tests.waiting import until

ADAPTERS = "pheby,lvmh"


class _HoldNaming:
    """A TCP proxy in front of Redis. Armed, a client connection is held (nothing more of it passed on, the
    held bytes dropped at ``cut``) from the first chunk it sends that holds ``needle``; with ``down``, that
    chunk and what follows it go to Redis and nothing more comes back on any connection (the client never reads
    its own writes)."""

    def __init__(self, port: int):
        self.port, self.armed, self.needle, self.down = port, False, b"", False
        self.held = asyncio.Event()
        self.conns: list = []
        self.deaf = False  # (``down``) nothing comes back any more

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, cr, cw):
        sr, sw = await asyncio.open_connection("127.0.0.1", self.port)
        self.conns.append((cw, sw))
        down = asyncio.ensure_future(self._back(sr, cw))
        tail, holding = b"", False
        try:
            while True:
                data = await cr.read(65536)
                if not data:
                    break
                if self.armed and self.needle and self.needle in tail + data:
                    if self.down:
                        self.deaf = True
                    else:
                        holding = True
                    self.held.set()
                tail = data[-len(self.needle):] if self.needle else b""
                if not holding:
                    sw.write(data)
                    await sw.drain()
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            down.cancel()
            cw.transport.abort()
            sw.transport.abort()

    async def _back(self, sr, cw):
        try:
            while data := await sr.read(65536):
                if self.deaf:
                    continue
                cw.write(data)
                await cw.drain()
        except (asyncio.CancelledError, ConnectionError):
            pass

    def cut(self) -> None:
        """Every connection closed, what was held never sent; disarmed."""
        self.armed = self.down = self.deaf = False
        for cw, sw in self.conns:
            cw.transport.abort()
            sw.transport.abort()
        self.conns.clear()


def _of(app: PhebyApp, kind: str, key: str, value: str) -> list:
    return [f for f in app.frames if f["type"] == kind and f.get(key) == value]


def _lvmh(proc) -> Rest:
    return Rest(f"http://127.0.0.1:{proc.ports['lvmh']}", LVMH_TOKEN)


async def _proxied(tmp_path, engines, name: str, adapters: str = ADAPTERS) -> tuple:
    """Node ``name`` started with its bus through a ``_HoldNaming`` proxy (on this loop: started in a thread)."""
    store, bus = engines
    url = urllib.parse.urlsplit(bus)
    proxy = _HoldNaming(url.port)
    via = urllib.parse.urlunsplit(url._replace(netloc=f"{url.netloc.rsplit(':', 1)[0]}:{await proxy.start()}"))
    node = BridgeProcess(str(tmp_path / name), adapters=adapters,
                         extra_args=["--store", store, "--bus", via, "--node-id", name])  # fmt: skip
    await asyncio.to_thread(node.start)
    return proxy, node


class _Case:
    """A run asking an approval on ``origin`` (its Pheby client ``app``), the store read beside."""

    def __init__(self, reads: Any):
        self.reads = reads
        self.cid = self.run_id = self.aid = ""

    async def one(self, sql: str, *params: Any) -> Any:
        return await (await self.reads.execute(sql, params)).fetchone()

    async def ask(self, app: PhebyApp, watcher: PhebyApp, title: str) -> None:
        self.cid = await app.create(title)
        await watcher.wait_frame(lambda f: f.get("conversation_id") == self.cid)
        self.run_id = (await app.chat(self.cid, "/approve make all"))["run_id"]
        asked = await watcher.wait_frame(
            lambda f: f["type"] == "approval.request" and f.get("run_id") == self.run_id, 15)  # fmt: skip
        self.aid = asked["approval_id"]
        await until(lambda: self.one("SELECT 1 FROM settings WHERE key=%s", PENDING_KEY + self.aid), 15,
                    "the approval stored")  # fmt: skip

    async def closed_in_store(self) -> None:
        async def closed() -> bool:
            return bool(await self.one(
                "SELECT 1 FROM runs r JOIN cluster_runs c ON c.run_id=r.run_id WHERE r.run_id=%s "
                "AND r.finished_at IS NOT NULL AND c.state='done'", self.run_id)) and \
                not await self.one("SELECT 1 FROM settings WHERE key=%s", PENDING_KEY + self.aid)  # fmt: skip

        await until(closed, 30, "the close committed")

    async def seen_once(self, apps: tuple, nodes: tuple, opened: tuple = ()) -> None:
        """Every client of ``apps`` got the run's end and the approval denied by restart once; every node's lvmh
        events hold them once, the same on all; no client's history has the run or the approval pending (those of
        ``opened`` too: connected after the close was sent); the row dropped."""
        for app in apps:
            await app.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == self.run_id, 30)
        rests = [_lvmh(n) for n in nodes]
        try:
            async def stored() -> list:
                got = [await r.events(self.cid) for r in rests]
                ok = all("agent_end" in [e["type"] for e in v] for v in got) and all(v == got[0] for v in got)
                return got[0] if ok else []

            events = await until(stored, 20, "the run's end in the lvmh events, the same from every node")
        finally:
            for r in rests:
                await r.close()
        resolved = [e for e in events if e["type"] == "approval_resolved" and e["approvalId"] == self.aid]
        assert [(e["choice"], e["decidedBy"]) for e in resolved] == [("deny", "restart")], events
        assert [e["type"] for e in events].count("agent_end") == 1, [e["type"] for e in events]
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs)), seqs
        for app in apps:
            assert len(_of(app, "run.finished", "run_id", self.run_id)) == 1
            assert [f["decided_by"] for f in _of(app, "approval.resolved", "approval_id", self.aid)] == ["restart"]
        for app in apps + opened:
            history = await app.open(self.cid)
            assert history["approvals"] == [] and history["run"] is None, history

        async def dropped() -> bool:
            return not await self.one("SELECT 1 FROM settings WHERE key LIKE %s", "unsent:%")

        await until(dropped, 10, "the close's row dropped once its forms came back")


async def test_a_restart_close_the_store_has_and_the_stream_lacks_reaches_every_node_once(
        serve_nodes, engines, tmp_path):
    proxy, n1 = await _proxied(tmp_path, engines, "n1")
    (n2,) = serve_nodes("n2", adapters=ADAPTERS)
    case = _Case(await psycopg.AsyncConnection.connect(engines[0], autocommit=True))
    a1, a2 = pheby_app(n1), pheby_app(n2)
    try:
        await a1.connect()
        await a2.connect()
        await case.ask(a1, a2, "closed, never sent")
        n1.kill9()  # the run open, its approval pending, in the store and on every node
        proxy.needle, proxy.armed = case.run_id.encode(), True
        # at once, before n2 takes n1 for dead: n1 closes its run itself, the bus never gets the close
        await asyncio.to_thread(n1.start)
        await asyncio.wait_for(proxy.held.wait(), 60)  # (a restart's close under heavy load: 30 s was not enough once)
        await case.closed_in_store()
        n1.kill9()
        proxy.cut()
        assert not _of(a2, "run.finished", "run_id", case.run_id), "the stream had the close: nothing was held"

        await asyncio.to_thread(n1.start)
        await a1.close()
        a1 = pheby_app(n1)
        await a1.connect()
        await case.seen_once((a2,), (n1, n2), opened=(a1,))
    finally:
        await a1.close()
        await a2.close()
        await case.reads.close()
        n1.stop()
        proxy.cut()
        proxy.server.close()


async def test_a_survivors_close_the_store_has_and_the_stream_lacks_reaches_every_node_once(
        serve_nodes, engines, tmp_path):
    """The same for a dead node's run closed by a survivor (``Cluster._take_over`` -> ``Bridge.interrupt``): n2's
    bus goes through the proxy; n1 killed with the run asking, n2 takes it over and closes it, the store commits,
    the bus never gets it; n2 killed; n1 back, then n2 back: its start sends the close."""
    (n1,) = serve_nodes("n1", adapters=ADAPTERS)
    proxy, n2 = await _proxied(tmp_path, engines, "n2")
    case = _Case(await psycopg.AsyncConnection.connect(engines[0], autocommit=True))
    a1, a2 = pheby_app(n1), pheby_app(n2)
    try:
        await a1.connect()
        await a2.connect()
        await case.ask(a1, a2, "taken over, never sent")
        proxy.needle, proxy.armed = case.run_id.encode(), True
        n1.kill9()
        await asyncio.wait_for(proxy.held.wait(), 45)  # n2 took n1 for dead and closed its run
        await case.closed_in_store()
        n2.kill9()
        proxy.cut()
        await a1.close()
        n1.start()
        a1 = pheby_app(n1)
        await a1.connect()
        history = await a1.open(case.cid)  # n1 loads the store: the run closed there
        assert history["run"] is None, history
        assert not _of(a1, "run.finished", "run_id", case.run_id), "the stream had the close: nothing was held"

        await asyncio.to_thread(n2.start)
        await case.seen_once((a1,), (n1, n2))
    finally:
        await a1.close()
        await a2.close()
        await case.reads.close()
        n2.stop()
        proxy.cut()
        proxy.server.close()
