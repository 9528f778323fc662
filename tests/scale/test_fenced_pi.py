"""Fenced ownership of a pi session across `agent-bridge serve` processes (docs/scale-out.md, "Fenced
ownership"; bridge_core/scale/fencing.py, lvmh_adapter/persistence.py, lvmh_adapter/relay.py), on a
private PostgreSQL and Redis, the spec-model pi plugin, a Pheby client and an lvmh browser.

A node stopped with SIGSTOP holds a pi plugin's socket; the plugin gives up on it (without closing it:
the frames it sent there still arrive, the worst case of a half-open TCP connection) and says hello to
another node, which takes the session under a new epoch and gets the events resent. Continued, the
stopped node reads the frames waiting in its socket: its writes for the session are refused by the store
(the epoch moved on), nothing of them is shown, relayed or translated into shared events, and it closes
that socket (4002, ``replaced``) at once. The browser's history has no gap and nothing twice; the core
has one run per pi run; the session stays online. The legitimate path beside it: the plugin comes back
to the continued node, which takes the session again and stores and shows its next run.

On the code before the fence, the continued node stored an event the plugin never sent to the node that
held the session, relayed the frames it read to every node's browsers a second time, and translated them
into a run of their own; and it kept the socket open.

Who can reach what (the attacker's view): an epoch is the store's alone; no frame carries one, a
plugin's hello only makes the node it reached take a new one (the last hello of the session's own
credential wins, as on one node: docs/security.md), and a field named so in a frame is ignored.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid

import psycopg
import pytest

from tests.conformance.lvmh_client import Browser, Plugin, Rest, until
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET
from tests.scale.pi import lvmh_http, plugin_url

CLOSE_REPLACED = 4002


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="pheby,lvmh")


def _live(browser: Browser, sid: str) -> list[dict]:
    return [e for f in browser.frames if f.get("type") == "events" and f["sessionId"] == sid for e in f["events"]]


def _stored(plugin: Plugin) -> list[dict]:
    return [e for e in plugin.sent if e["type"] != "message_update"]


def _runs(app: PhebyApp, sid: str) -> list[str]:
    return [f["run_id"] for f in app.conn_frames if f.get("conversation_id") == sid and f["type"] == "run.accepted"]


def _epoch(store: str, sid: str) -> int:
    with psycopg.connect(store) as c:
        return c.execute("SELECT epoch FROM sessions WHERE id=%s", (sid,)).fetchone()[0]


class Abandoned:
    """The plugin's socket to a node, given up on but not closed: what arrives on it is recorded."""

    def __init__(self, plugin: Plugin):
        self.ws, reader = plugin.ws, plugin.reader
        assert self.ws is not None and reader is not None
        plugin.ws = plugin.reader = None  # the plugin's next connect leaves this socket alone
        reader.cancel()
        self.frames: list[dict] = []
        self.task = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type.name == "TEXT":
                self.frames.append(json.loads(msg.data))

    @property
    def close_code(self):
        return self.ws.close_code if self.task.done() else None

    async def send(self, event: dict) -> None:
        await self.ws.send_str(json.dumps(event))

    async def close(self) -> None:
        self.task.cancel()
        await self.ws.close()


async def test_a_stopped_node_continued_after_its_pi_session_was_claimed_elsewhere_is_fenced(nodes, clients, engines):
    n1, n2, n3 = nodes("n1", "n2", "n3")
    sid = f"pi-{uuid.uuid4()}"
    plugin = clients(Plugin(lvmh_http(n1), LVMH_TOKEN, sid))
    app = clients(PhebyApp(f"ws://127.0.0.1:{n3.ports['pheby']}/ws", PHEBY_SECRET))
    await app.connect()
    browser = clients(Browser(lvmh_http(n3), LVMH_TOKEN))
    await browser.connect()
    rest3 = clients(Rest(lvmh_http(n3), LVMH_TOKEN))
    assert await plugin.connect() == 0
    await app.wait_frame(lambda f: f.get("conversation_id") == sid)  # the pi session's conversation, open
    assert (await app.open(sid))["type"] == "conversation.history"
    await until(lambda: browser.listed(sid), what="the session in n3's session_list")
    await browser.subscribe(sid)
    await plugin.run("on the first node", prompt="one")
    await rest3.settled(sid)
    assert _epoch(engines[0], sid) == 1

    last = _stored(plugin)[-1]["seq"]
    old = Abandoned(plugin)
    os.kill(n1.proc.pid, signal.SIGSTOP)
    try:
        # a run begins on the stopped node's socket (read by n1 only once continued) and one event far
        # ahead that the plugin never sends anywhere else: neither may ever be stored, shown or run by n1
        mid = f"a{plugin.seq + 1}"
        for event in (plugin.next("message_start", message={"role": "user", "id": "u2"}),
                      plugin.next("agent_start"),
                      plugin.next("message_start", message={"role": "assistant", "id": mid}),
                      plugin.next("message_update", delta="two ")):
            await old.send(event)
        await old.send(plugin.envelope("agent_start", plugin.seq + 100))
        # the plugin gives up on n1 and says hello to n2 (n1 never lets go: n2 waits its handover time)
        plugin.url = plugin_url(n2)
        assert await plugin.connect() == last  # and it resends what follows
        await plugin.emit("message_update", delta="three")
        await plugin.finish(mid, "two three")
        stored = await rest3.settled(sid, runs=2)
        assert [e["seq"] for e in stored] == [e["seq"] for e in _stored(plugin)]
        assert _epoch(engines[0], sid) == 2
    finally:
        os.kill(n1.proc.pid, signal.SIGCONT)

    # n1 reads what waited in its socket: refused by the store, nothing of it goes anywhere, socket closed
    await until(lambda: old.close_code is not None, timeout=10, what="n1 closing the plugin's old socket")
    assert old.close_code == CLOSE_REPLACED, old.close_code
    assert old.frames == [], old.frames
    assert n1.alive

    # the legitimate path: the plugin comes back to n1, which takes the session again (epoch 3)
    await plugin.drop()
    plugin.url = plugin_url(n1)
    assert await plugin.connect() == _stored(plugin)[-1]["seq"]
    assert _epoch(engines[0], sid) == 3
    await plugin.run("back on the first node", prompt="three")
    stored = await rest3.settled(sid, runs=3)
    assert [e["seq"] for e in stored] == [e["seq"] for e in _stored(plugin)]  # nothing of n1's stale frames
    for rest in (clients(Rest(lvmh_http(n1), LVMH_TOKEN)), clients(Rest(lvmh_http(n2), LVMH_TOKEN))):
        assert await rest.events(sid) == stored
    await until(lambda: browser.view(sid).persisted() == stored, what="n3's browser up to date")
    assert browser.twice == [], browser.twice  # no frame relayed twice
    seqs = [e["seq"] for e in _live(browser, sid)]
    assert seqs == sorted(set(seqs)), seqs
    assert (await rest3.session(sid))["online"] is True  # n1's close took nothing offline
    await until(lambda: len(_runs(app, sid)) >= 3 and app.view(sid).run is None, what="three runs on Pheby")
    assert len(set(_runs(app, sid))) == 3, _runs(app, sid)  # one run per pi run: none translated twice by n1
    assert [t for r, t in app.view(sid).transcript() if r == "assistant"] == [
        "on the first node", "two three", "back on the first node"]
    for node in (n1, n2, n3):
        assert "Traceback" not in node.stderr()
    await old.close()


async def test_an_epoch_is_the_stores_alone(nodes, clients, engines):
    """A frame carrying an epoch changes nothing: each hello takes the next one, whatever it says."""
    (n1,) = nodes("n1")
    sid = f"pi-{uuid.uuid4()}"
    plugin = clients(Plugin(lvmh_http(n1), LVMH_TOKEN, sid))
    plugin.session = dict(plugin.session, epoch=10**6)
    assert await plugin.connect() == 0
    await plugin.emit("agent_start", epoch=10**6)
    rest = clients(Rest(lvmh_http(n1), LVMH_TOKEN))
    await until(lambda: _epoch(engines[0], sid) == 1, what="the first epoch")
    await plugin.drop()
    await plugin.connect()
    assert _epoch(engines[0], sid) == 2
    assert [e["seq"] for e in await rest.events(sid)] == [1]
