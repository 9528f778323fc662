"""Durable before shown across `agent-bridge serve` processes (docs/scale-out.md "Durable before
shown"; lvmh_adapter/persistence.py ``after_durable``, relay.py ``writes``), on a private PostgreSQL
and Redis, with the spec-model lvmh browser and a Pheby client.

A bridge conversation's run streams on its origin node; midway PostgreSQL starts holding every write
into the lvmh events table (the test takes a lock on it: the origin's batch of the run's last rows
waits, as a batch a crash cuts off does); the origin is killed with -9 before that batch commits, then restarted. A
browser on another node sees the run only once it is stored (by that node, which stores the rows it
shows: the same seqs and bytes), so its view, its ``after=seq`` refetch and the REST history from
every node agree. On the code before, the browser saw the run live while only the origin stored it:
killed, its rows were lost, and the history lacked events the browser had shown.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.conformance.lvmh_client import Browser, Rest, eventually, until
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET
from tests.scale.pi import lvmh_http


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="pheby,lvmh")


def _settled(browser: Browser, sid: str) -> int:
    return sum(t == "agent_settled" for t in browser.view(sid).types())


def _deltas(browser: Browser, sid: str) -> int:
    return sum(1 for f in browser.frames if f.get("type") == "events" and f["sessionId"] == sid
               for e in f["events"] if e["type"] == "message_update")


def _inserts_waiting(store: str) -> int:
    """Writes into the lvmh events table waiting for the test's lock (one per node writing there)."""
    with psycopg.connect(store, autocommit=True) as c:
        return c.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type='Lock' "
                         "AND query LIKE 'INSERT INTO events%%'").fetchone()[0]


async def test_a_browser_on_another_node_sees_only_what_is_stored_when_the_origin_dies(nodes, clients, engines):
    store = engines[0]
    n1, n2, n3 = nodes("n1", "n2", "n3")
    rest1, rest2 = clients(Rest(lvmh_http(n1), LVMH_TOKEN)), clients(Rest(lvmh_http(n2), LVMH_TOKEN))
    status, created = await rest1.call("POST", "/api/conversations", {"name": "Durable"})
    assert status in (200, 201), (status, created)
    sid = created["id"]
    browser = clients(Browser(lvmh_http(n2), LVMH_TOKEN))
    await browser.connect()
    await until(lambda: browser.listed(sid), what="the conversation listed on n2")
    await browser.subscribe(sid)
    app = clients(PhebyApp(f"ws://127.0.0.1:{n3.ports['pheby']}/ws", PHEBY_SECRET))
    await app.connect()
    await app.open(sid)

    status, _ = await rest1.prompt(sid, "run 1")  # runs on n1, its origin
    assert status in (200, 202), status
    await until(lambda: _settled(browser, sid) == 1, what="the first run in n2's browser")

    deltas = _deltas(browser, sid)
    since = len(app.conn_frames)
    status, _ = await rest1.prompt(sid, "/bench 400 200")  # 2 s of deltas
    assert status in (200, 202), status
    await until(lambda: _deltas(browser, sid) > deltas + 10, what="the second run streaming on n2")
    lock = psycopg.connect(store)
    try:
        lock.execute("LOCK TABLE events IN SHARE MODE")  # reads go on; every insert waits from now
        await app.wait_frame(lambda f: f["type"] == "run.finished" and f.get("conversation_id") == sid, since=since)
        # n2 has the run (rendered from the bus): it shows it (the code before) or waits for its own write
        await until(lambda: _settled(browser, sid) == 2 or _inserts_waiting(store) >= 2, timeout=15,
                    what="the run rendered on n2")
        n1.kill9()  # the origin dies before its batch of the run's rows committed
    finally:
        lock.rollback()
        lock.close()
    await until(lambda: _settled(browser, sid) == 2, timeout=15, what="the second run in n2's browser")
    n1.start()
    rest1 = clients(Rest(lvmh_http(n1), LVMH_TOKEN))

    view = browser.view(sid)  # it saw the second run settle (above): the history must hold all of it

    async def agreeing():  # (the restarted origin may still close what its store has open: live too)
        stored = await rest2.events(sid)
        return stored if view.persisted() == stored else None

    try:
        stored = await eventually(agreeing, timeout=15, what="the browser's view and the history agreeing")
    except AssertionError:
        stored = await rest2.events(sid)
        raise AssertionError(([e["seq"] for e in view.persisted()], [e["seq"] for e in stored])) from None
    assert await rest1.events(sid) == stored  # the restarted origin reads the same history
    assert view.texts()[:2] == ["Echo: run 1", "tok " * 400]
    refetch = Rest(lvmh_http(n2), LVMH_TOKEN)
    try:  # a browser's refetch after what it saw first: the rest of it, nothing more
        first = [e["seq"] for e in view.persisted()][5]
        assert await refetch.events(sid, after=first) == [e for e in stored if e["seq"] > first]
    finally:
        await refetch.close()
    assert browser.twice == []
    live = [e["seq"] for e in view.events]
    assert live == sorted(set(live))
    for proc in (n2, n3):
        assert "Traceback" not in proc.stderr()
