"""A phone's ``run.delta``s add up to the ``run.completed`` that ends them when the node closing the run counts what
went out from a node whose rows went past the run (issue 41, chaos seed 3310: ``deltas_incomplete``,
``transcript_contradicts_client``; loomi_adapter/journal.py ``stored_run_text``, rows.py ``mark_sql``).

What the history showed: a phone got a ``/bench`` run of n3 through n1, 7,404 characters; n3 was killed and its
next life closed the run with the stream's last delta, 7,404 characters, having rendered none of its deltas. n1's
rows of the run were gone under later runs, and its mark of the message was swept with them; the stored frames
showed 6,472 sent (n3's previous life's rows, behind its publishes), so n3 rendered the 932 past them as a filler,
and the phone, moving to n3, got them a second time.

Here, as processes on a private PostgreSQL and Redis: n1 runs the run, phone Q paired there; phone P watches it
through n2. The test holds Q's device row, so n1's writer waits (its batches guard Q's epoch) while n2 goes on
storing and sending the run to P; n1 is killed, and P's own ``/bench`` on n2 pushes n2's rows past the run. n1's
next life, started once the run's last deltas are older than what a join folds again, closes the run; P, back on
n1, gets the close from n1's rows. Before, a filler of what n1's previous life's rows lacked came before it.
"""

from __future__ import annotations

import os
import signal
import time

import psycopg
import pytest

from bridge_core.scale.cluster import JOIN_BACK
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.killed import run_row
from tests.scale.phones import loomi_run, loomi_ws, pair_qr
from tests.waiting import until


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi")


async def test_the_rest_of_a_run_a_phone_got_through_a_node_whose_rows_went_past_it_is_not_given_again(nodes, engines):
    dsn, _ = engines
    n1, n2 = nodes("n1", "n2")
    q, p = LoomiApp("Q"), LoomiApp("P")
    reads = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    hold = await psycopg.AsyncConnection.connect(dsn)
    try:
        await q.pair(await pair_qr(n1))
        await p.pair(await pair_qr(n2))
        ack = await q.request("session.send", {"text": "/bench 40000 200"})  # 200 s of "tok ", 200 a second
        assert ack["payload"]["ok"] is True, ack
        run_id = ack["payload"]["result"]["run_id"]
        await p.until(lambda: len(p.run_text(run_id)) >= 4 * 100, timeout=30)
        await hold.execute("SELECT 1 FROM loomi_devices WHERE device_id=%s FOR UPDATE", (q.device_id,))
        before = len(p.run_text(run_id))  # n1's rows stop about here; n2's go on
        await p.until(lambda: len(p.run_text(run_id)) >= before + 4 * 200, timeout=30)
        n1.kill9()
        killed = time.monotonic()
        await hold.rollback()
        await loomi_run(p, "/bench 2000")  # n2's rows past the run (its newest 513 kept), its marks swept twice
        await p.disconnect()
        os.kill(n2.proc.pid, signal.SIGSTOP)  # n2 takes nobody for dead meanwhile (n1's run is closed by n1)
        try:  # the run's last deltas older than what a join folds again (n1's next life renders none of them)
            await until(lambda: time.monotonic() - killed > JOIN_BACK + 1, 30, "the run's deltas past JOIN_BACK")
            n1.start()  # closes the run as interrupted with the stream's last delta (TEXT_BACK)
        finally:
            os.kill(n2.proc.pid, signal.SIGCONT)

        async def closed() -> bool:
            row = await run_row(reads, run_id)
            return row is not None and row[1] is not None

        await until(closed, 30, "the run closed by n1's next life")
        cur = await reads.execute("SELECT node_id FROM cluster_runs WHERE run_id=%s", (run_id,))
        assert (await cur.fetchone())[0] == "n1"  # by n1's restart (not taken over by n2)
        await p.connect(loomi_ws(n1))
        done = (await p.wait_for("run.completed", run_id=run_id, timeout=30))["payload"]
        assert done["status"] == "failed", done
        got = p.run_text(run_id)
        assert got == done["text"], (len(got), len(done["text"]), before)
        seqs = p.seqs()
        assert seqs == sorted(set(seqs)) and p.dropped == [], seqs[-8:]
    finally:
        await hold.close()
        await reads.close()
        await close_all()
