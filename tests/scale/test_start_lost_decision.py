"""An approval a run asked for, its run's start and its pending row lost with its node (kill -9 before the store had
them), is resolved once on every front end when the node comes back (issue 41, chaos seed 2304; docs/performance.md
"Chaos").

What the history showed: run 7e2cbdba (``/approve ...``) started on n2 and asked approval 649671555dae; n2 was killed
-9 before its store had the run's start or the decision's pending row (both written lazily). Its restart read the
start back from the stream (bridge_core/scale/started.py) but not the run's decisions, and closed the run as
interrupted with nothing pending: no ``ApprovalResolved`` was published, and every Pheby and Loomi client kept the
approval shown pending for good. Now the restart reads the run's decision requests back in the same pass as its
start, minus those resolved on the bus, and writes their pending rows with it: the load puts them back into the run
and its close resolves them (denied, ``decided_by`` restart) through the one path.

Over real sockets to `agent-bridge serve` processes on a private PostgreSQL and Redis; the test's own transaction
locks the ``runs`` table (the batch with the run's row and the pending row waits) while the node is killed."""

from __future__ import annotations

from bridge_core.bridge.decisions import PENDING_KEY
from tests.conformance.loomi_client import LoomiApp
from tests.scale.killed import pheby_pair
from tests.scale.phones import loomi_ws, pair_qr

ANSWER = " ".join(["w"] * 31_000)  # streamed back a word a delta: the run goes on long after the answer


def _of(frames: list, kind: str, **fields) -> list:
    return [f for f in frames if f["type"] == kind and all(f.get(k) == v for k, v in fields.items())]


async def test_an_approval_lost_with_its_runs_start_is_resolved_once_on_every_front_end(serve_nodes, engines):
    def both(*names, adapters):  # the pair's nodes serve a Loomi phone too
        return serve_nodes(*names, adapters=adapters + ",loomi")

    async with pheby_pair(both, engines, "asked, lost") as pair:
        n1, n2, a1, a2, reads, cid = pair.n1, pair.n2, pair.a1, pair.a2, pair.reads, pair.cid
        phone = LoomiApp("Phone")
        try:
            await phone.pair(dict(await pair_qr(n2), url=loomi_ws(n2)))  # on the node that stays up
            await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")  # reads go on, n1's rows of the run wait
            await a1.send({"type": "chat.send", "request_id": "asked", "conversation_id": cid,
                           "text": "/approve rm -rf build"})  # fmt: skip
            asked = await a2.wait_frame(lambda f: f["type"] == "approval.request" and f.get("conversation_id") == cid,
                                        15)  # fmt: skip
            run_id, aid = asked["run_id"], asked["approval_id"]
            await phone.wait_for("approval.required", approval_id=aid)
            n1.kill9()
            await pair.release()
            cur = await reads.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,))
            assert await cur.fetchone() is None  # the store never had the run
            cur = await reads.execute("SELECT 1 FROM settings WHERE key=%s", (PENDING_KEY + aid,))
            assert await cur.fetchone() is None  # nor the approval's pending row

            n1.start()  # (or n2 takes n1's claim over first, a loaded machine: its own ledger resolves it)
            await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)
            await a2.wait_until(lambda: _of(a2.conn_frames, "approval.resolved", approval_id=aid), 15)
            await phone.wait_for("run.completed", run_id=run_id, timeout=30)
            await phone.wait_for("approval.resolved", approval_id=aid, timeout=15)

            after = (await a2.chat(cid, "after the restart"))["run_id"]  # what came late has come by its end
            await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
            await phone.wait_for("run.completed", run_id=after, timeout=15)
            resolved = _of(a2.conn_frames, "approval.resolved", approval_id=aid)
            assert [(f["choice"], f["accepted"], f["decided_by"]) for f in resolved] == [("deny", False, "restart")], \
                resolved  # fmt: skip
            assert len(_of(a2.conn_frames, "run.finished", run_id=run_id)) == 1
            on_phone = [f["payload"] for f in phone.find("approval.resolved", approval_id=aid)]
            assert [(p["choice"], p["decided_by"]) for p in on_phone] == [("deny", "agent")], on_phone
            assert len(phone.find("run.completed", run_id=run_id)) == 1
            assert (await a2.open(cid))["approvals"] == []  # nothing left pending on n2
        finally:
            await phone.disconnect()


async def test_a_clarification_answered_before_the_kill_is_not_answered_again_by_the_restart(serve_nodes, engines):
    """The run's decision answered on the bus before the kill (every phone had the answer), the run still streaming
    it back: read back with the start, it is not written pending, so the close answers it no second time."""
    async with pheby_pair(serve_nodes, engines, "answered, lost") as pair:
        n1, a1, a2, reads, cid = pair.n1, pair.a1, pair.a2, pair.reads, pair.cid
        await pair.hold("LOCK TABLE runs IN EXCLUSIVE MODE")  # n1's rows of the run (and all after) wait
        await a1.send({"type": "chat.send", "request_id": "asked", "conversation_id": cid, "text": "/clarify go on?"})
        asked = await a2.wait_frame(lambda f: f["type"] == "clarify.request" and f.get("conversation_id") == cid, 15)
        run_id, did = asked["run_id"], asked["clarify_id"]
        await a1.send({"type": "clarify.respond", "request_id": "r1", "clarify_id": did, "response": ANSWER})
        await a2.wait_until(lambda: _of(a2.conn_frames, "clarify.resolved", clarify_id=did), 15)
        n1.kill9()  # the answer in the stream, the run streaming it back, neither the run nor the answer stored
        await pair.release()
        assert not _of(a2.conn_frames, "run.finished", run_id=run_id), "the run ended before the kill"
        cur = await reads.execute("SELECT 1 FROM runs WHERE run_id=%s", (run_id,))
        assert await cur.fetchone() is None

        n1.start()
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == run_id, 30)
        after = (await a2.chat(cid, "after the restart"))["run_id"]
        await a2.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == after, 15)
        resolved = _of(a2.conn_frames, "clarify.resolved", clarify_id=did)
        assert [f["decided_by"] for f in resolved] == ["remote"], \
            [(f["decided_by"], f["response"][:9]) for f in resolved]  # fmt: skip
        assert len(_of(a2.conn_frames, "run.finished", run_id=run_id)) == 1
