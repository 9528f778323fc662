"""A close sent again that some nodes had already is shown once (chaos seed 2509, ``event_twice``; issue 41;
bridge_core/scale/unsent.py, docs/scale-out.md "A close the store has and the stream lacks").

n1 is killed (-9) with a run waiting at an approval and comes back at once: it closes the run itself. The close
reaches Redis and every other node, but nothing comes back to n1 (a TCP proxy passes its writes and no more), so
its row of the close's forms stays. n1 is killed, Redis loses its stream and n1 comes back: the stream lacks the
close, n1 sends it again. Before: n2 and n3, which had shown it, showed the run's end, the approval's resolution
and the notice a second time, under new numbers (a second run end on Pheby and Loomi clients, a second
``agent_end`` row in the lvmh events). Now n1 does not send it again: n2 and n3 recorded that they delivered it
(``reached:`` rows), and the row goes. With n3 (the phone's node) killed and restarted between the two, its memory
of the first gone (chaos seed 2918): before, its new life showed the close again, on the phone and in the lvmh
events; now nothing is sent again.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest
import redis.asyncio as aioredis

from bridge_core.scale.unsent import DOES, REACHED
from tests.conformance.loomi_client import LoomiApp
from tests.scale.killed import pheby_app
from tests.scale.phones import loomi_ws, pair_qr
from tests.scale.test_close_unsent import _Case, _of, _proxied
from tests.waiting import until


def _ends(phone: LoomiApp, run_id: str, kind: str) -> list:
    """The phone's frames of ``kind`` for the run."""
    return [f for f in phone.events if f["type"] == kind and f.get("run_id") == run_id]


@pytest.mark.parametrize("restarted", [False, True], ids=["alive", "n3_restarted"])
async def test_a_close_sent_again_is_shown_once_by_the_nodes_that_had_it(serve_nodes, engines, tmp_path, restarted):
    proxy, n1 = await _proxied(tmp_path, engines, "n1")
    n2, n3 = serve_nodes("n2", "n3", adapters="pheby,loomi,lvmh")
    case = _Case(await psycopg.AsyncConnection.connect(engines[0], autocommit=True))
    r = aioredis.Redis.from_url(engines[1])
    a1, a2, a3 = pheby_app(n1), pheby_app(n2), pheby_app(n3)
    phone = LoomiApp("On n3")
    try:
        await phone.pair(dict(await pair_qr(n3), url=loomi_ws(n3)))
        for app in (a1, a2, a3):
            await app.connect()
        await case.ask(a1, a2, "closed, shown, sent again")
        n1.kill9()
        proxy.needle, proxy.armed, proxy.down = case.run_id.encode(), True, True
        await asyncio.to_thread(n1.start)  # closes its run: to every node, never back to n1
        await asyncio.wait_for(proxy.held.wait(), 60)  # (a restart's close under heavy load: 30 s was not enough once)
        for app in (a2, a3):
            await app.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == case.run_id, 30)
        await phone.until(lambda: _ends(phone, case.run_id, "run.failed"), 30)
        await case.closed_in_store()
        assert await case.one("SELECT 1 FROM settings WHERE key=%s", "unsent:" + case.run_id), "n1 read its close back"
        n1.kill9()
        proxy.cut()
        await r.flushall()  # the stream lost: n1's next start finds the close missing from it
        if restarted:  # (the stream lost: its join cannot fold the close again) once every form of it is recorded
            # delivered (by n2, n3 or both: one row each)
            (row,) = await case.one("SELECT value FROM settings WHERE key=%s", "unsent:" + case.run_id)
            forms = len([f for f in json.loads(row)["forms"] if f["event"] in DOES])  # (a filler delta: no record)

            async def recorded() -> bool:
                key = f"{REACHED}{case.run_id}:%"
                (count,) = await case.one("SELECT count(*) FROM settings WHERE key LIKE %s", key)
                return count == forms

            await until(recorded, 15, "the close recorded delivered")
            n3.kill9()
            await asyncio.to_thread(n3.start)
            await a3.close()
            a3 = pheby_app(n3)
            await a3.connect()
            await phone.connect(loomi_ws(n3))
        await asyncio.to_thread(n1.start)
        await a1.close()
        a1 = pheby_app(n1)
        await a1.connect()
        # (seen_once waits for the row to go: n1 found the records of the nodes that had the close)
        await case.seen_once((a2,) if restarted else (a2, a3), (n1, n2, n3), opened=(a1, a3) if restarted else (a1,))
        mark = await a1.create("after the close")  # delivered after what n1 sent at its start, on every node
        for app in (a2, a3):
            await app.wait_frame(lambda f, m=mark: f.get("conversation_id") == m, 30)
        await phone.until(lambda: [f for f in phone.events if f.get("task_id") == mark], 30)
        for app in (a2, a3):  # (a3 restarted: connected after the close, none)
            assert len(_of(app, "run.finished", "run_id", case.run_id)) == (0 if restarted and app is a3 else 1)
        for kind in ("run.completed", "run.failed"):  # the phone on n3: the run's end once, its seqs in order
            assert len(_ends(phone, case.run_id, kind)) == 1, [f["type"] for f in phone.events]
        assert not phone.dropped and phone.seqs() == sorted(set(phone.seqs()))
    finally:
        for app in (a1, a2, a3):
            await app.close()
        await phone.disconnect()
        await case.reads.close()
        await r.aclose()
        n1.stop()
        proxy.cut()
        proxy.server.close()
