"""A clarification answered on a node killed (-9) right after, its store never having the answer, is
answered once when the node comes back at once under its own name (issue 41, chaos seed 2003
``decision_not_once``; docs/scale-out.md "Joining").

Before: the node's start found the clarification pending in the store (the answer's write lost in the
kill) and the run open, and closed the run by the one rule, answering it a second time (empty,
``decided_by`` restart) on every front end, though every phone had the first answer. Now its start reads
the run's decisions back from the stream with its end (``Cluster.read_ends``), folds them and writes them
before it closes the run: the close finds nothing pending.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own
transaction holds the pending clarification's row (the batch with the answer waits) while the node is
killed. The answer is long (the run streams it back word by word): the node dies mid-stream, its run open.
"""

from __future__ import annotations

from bridge_core.bridge.decisions import PENDING_KEY
from tests.conformance.pheby_client import PhebyApp
from tests.scale.killed import pheby_app, pheby_pair
from tests.waiting import until

ANSWER = " ".join(["w"] * 31_000)  # streamed back a word a delta (each one through the bus): a long run after it


def _of(app: PhebyApp, kind: str, run_id: str) -> list:
    return [f for f in app.frames if f["type"] == kind and f.get("run_id") == run_id]


def _answers(app: PhebyApp, clarify_id: str) -> list:
    return [f for f in app.frames if f["type"] == "clarify.resolved" and f.get("clarify_id") == clarify_id]


async def test_a_clarification_answered_right_before_a_kill_is_answered_once_after_an_immediate_restart(
        serve_nodes, engines):
    async with pheby_pair(serve_nodes, engines, "answered, then killed") as pair:
        n1, n2, a1, a2, reads, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.reads, pair.cid
        run_id = (await a1.chat(cid, "/clarify go on?"))["run_id"]
        asked = await a2.wait_frame(lambda f: f["type"] == "clarify.request" and f.get("run_id") == run_id, 15)
        did = asked["clarify_id"]
        key = PENDING_KEY + did

        async def pending() -> bool:
            cur = await reads.execute("SELECT 1 FROM settings WHERE key=%s", (key,))
            return await cur.fetchone() is not None

        await until(pending, what="the pending clarification's row committed")
        await pair.hold("UPDATE settings SET value=value WHERE key=%s", (key,))  # n1's answer waits for it
        await a1.send({"type": "clarify.respond", "request_id": "r1", "clarify_id": did,
                       "response": ANSWER})  # fmt: skip
        await a2.wait_until(lambda: _answers(a2, did), 15)
        n1.kill9()  # the answer in the stream (every phone had it), not in the store; the run streaming
        await pair.release()
        assert not _of(a2, "run.finished", run_id), "the run ended before the kill: nothing to close"
        assert await pending()

        n1.start()  # at once: before n2 notices n1 gone, n1 closes its run itself
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)

        async def written() -> bool:
            return not await pending()

        await until(written, 20, "the answer written by n1's start")
        resolved = _answers(a2, did)
        assert [(f["response"] == ANSWER, f["decided_by"]) for f in resolved] == [(True, "remote")], \
            [(f["response"][:20], f["decided_by"]) for f in resolved]  # fmt: skip
        assert len(_of(a2, "run.finished", run_id)) == 1
        await a1.close()
        a1 = pair.a1 = pheby_app(n1)  # closed with the pair
        await a1.connect()
        history = await a1.open(cid)
        assert history["clarifications"] == [] and history["run"] is None, history
