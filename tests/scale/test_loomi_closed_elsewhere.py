"""A phone's ``run.delta``s add up to the ``run.completed`` that ends them when the node that closes the run
never rendered its deltas (issue 41, chaos seed 2022 at 2561942 ``deltas_incomplete`` and
``transcript_contradicts_client``; loomi_adapter/runtexts.py).

What the history showed: phone-3 got a ``/bench`` run's deltas from n3, the run's origin; n3 was killed with
-9 holding its last 25 deltas (never published: no node, no phone got them, but its draft had them); its next
life, which saw none of the run's deltas, closed the run as interrupted with the draft (100 characters more
than the phone got), and the phone's deltas did not add up to it. The filler ``run.delta`` (the missing rest)
was made only from the deltas the completing node itself rendered: here there were none. Now such a node counts
what went out from the run's stored frames (journal.py ``stored_run_text``, exact).

Here, as processes on a private PostgreSQL and Redis: n1 streams a run to the phone; Redis pauses every write
(the origin's publishes wait, its draft in PostgreSQL goes on) until the draft is past what the phone got; n1 is
killed with -9 and started again, and closes the run with the draft. A run whose start the rows still hold, and
one longer than they keep.
"""

from __future__ import annotations

import psycopg
import pytest
import redis.asyncio as aioredis

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.phones import loomi_ws, pair_qr
from tests.waiting import until


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi")


def _draft(dsn: str, run_id: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as c:
        row = c.execute("SELECT text FROM messages WHERE message_id=%s", (f"draft-{run_id}",)).fetchone()
    return row[0] if row else ""


@pytest.mark.parametrize("bench, out", [("/bench 4000 100", 20), ("/bench 40000 1000", 800)],
                         ids=["its start in the rows", "longer than the rows keep"])
async def test_a_node_that_never_rendered_the_deltas_closes_the_run_with_the_rest_as_a_delta(nodes, engines, bench,
                                                                                              out):
    """``out``: the deltas the phone gets before the pause; 800 are more than a node's rows keep (its newest 513
    frames: cluster.py ``_prune``), the run's start pruned (seed 2022: 1429 deltas), counted past a mark."""
    dsn, bus = engines
    (n1,) = nodes("n1")
    phone = LoomiApp()
    r = aioredis.from_url(bus)
    try:
        await phone.pair(await pair_qr(n1))
        ack = await phone.request("session.send", {"text": bench})  # 40 s of "tok "
        assert ack["payload"]["ok"] is True, ack
        run_id = ack["payload"]["result"]["run_id"]
        await phone.until(lambda: len(phone.run_text(run_id)) >= 4 * out, timeout=30)
        await r.execute_command("CLIENT", "PAUSE", 60000, "WRITE")  # the origin's publishes wait from here
        await until(lambda: len(_draft(dsn, run_id)) > len(phone.run_text(run_id)) + 40, timeout=20,
                    what="the draft saved past what the phone got")
        n1.kill9()  # holding the deltas its draft has and nobody got
        await r.execute_command("CLIENT", "UNPAUSE")
        sent = phone.run_text(run_id)
        n1.start()  # closes its run as interrupted, with the draft: it rendered none of its deltas
        hello = await phone.connect(loomi_ws(n1))
        assert hello["payload"]["truncated"] is False, hello
        done = (await phone.wait_for("run.completed", run_id=run_id, timeout=30))["payload"]
        assert done["status"] == "failed" and len(done["text"]) > len(sent) and done["text"].startswith(sent), \
            (done["status"], len(done["text"]), len(sent))  # fmt: skip
        assert phone.run_text(run_id) == done["text"], (len(phone.run_text(run_id)), len(done["text"]))
        kinds = [f["type"] for f in phone.events if f.get("run_id") == run_id]
        assert kinds.index("run.completed") == max(i for i, k in enumerate(kinds) if k == "run.delta") + 1, kinds[-4:]
        seqs = phone.seqs()
        assert seqs == sorted(set(seqs)) and phone.dropped == [], seqs[-8:]
    finally:
        try:
            await r.execute_command("CLIENT", "UNPAUSE")
        finally:
            await r.aclose()
            await close_all()
