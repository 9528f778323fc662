"""Events the stream lost and no node gave back reach a Loomi phone as ``truncated`` (issue 41; docs/scale-out.md
"Catching up"; bridge_core/scale/gone.py).

Node ``b`` is behind in the stream (its reads held) while node ``a`` runs a run and Redis loses its keys; ``a``
keeps only its last few entries (``Written`` is bounded: a long run's deltas outgrow it), so ``b`` gets some of
what it missed back and the rest is gone for good (``Gap.lost``). Before, ``b`` logged and counted them, and the
phone on ``b`` went on with contiguous seqs over the hole: never told. Now ``b`` closes the phones it numbers
(``unavailable``) before what follows, and their next hello, whose numbering crossed the hole, is answered
``truncated`` (the spec's word for events gone: the app fetches ``task.list`` again). A loss that loses nothing
(everything comes back) truncates nobody (tests/scale/test_lost_redis.py). Two in-process nodes on a private
PostgreSQL and Redis, the spec-built phone over real sockets."""

from __future__ import annotations

from bridge_core.scale import catchup
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.test_bus_catchup import Gate
from tests.scale.test_cluster import _nodes
from tests.waiting import until


async def _qr(svc) -> dict:
    fe = svc.frontends["loomi"]
    token, _ = await fe.registry.create_token(60.0)
    return {"v": 1, "url": f"ws://127.0.0.1:{svc.ports['loomi']}/ws", "token": token, "name": fe.server_name,
            "fp": fe.fp}


async def _send(phone: LoomiApp, text: str, task_id: str = "") -> str:
    ack = await phone.request("session.send", {"text": text, **({"task_id": task_id} if task_id else {})})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    return ack["payload"]["result"]["run_id"]


async def hole_on_b(a, b, phone: LoomiApp, other: LoomiApp, redis_server, bench: str,
                    away: bool = False) -> tuple[str, str]:
    """The setting of the events-gone tests: ``phone`` paired on ``b``, ``other`` on ``a``, a run both saw
    (``phone`` then disconnected if ``away``); ``a`` keeps its last 2 entries, ``b``'s reads are held while
    ``other``'s ``bench`` run streams into that conversation, Redis loses those entries, ``b`` reads again and
    ``other`` sends once more (numbered above: ``b`` finds the gap). Returns the conversation and that last
    run, once ``b`` has said events gone."""
    await phone.pair(await _qr(b))
    await other.pair(await _qr(a))
    first = await _send(phone, "before")
    await phone.wait_for("run.completed", run_id=first)
    if away:
        await phone.disconnect()  # away: b's rows go on numbering it
    cid = next(c for c, conv in b.bridge.conversations.items() if conv.run is None and conv.messages)
    a.bridge.cluster.bus._written = catchup.Written(keep=2)  # a keeps its last 2 entries only
    gate = Gate(b.bridge.cluster.bus)
    gate.close()  # b stops reading (a stopped or behind node)
    await until(lambda: gate.parked.is_set(), what="b's reads held")
    missed = await _send(other, bench, cid)  # a run b does not read: entries of its own on a
    await other.wait_for("run.completed", run_id=missed)
    redis_server.flush()  # Redis loses them
    gate.open.set()
    after = await _send(other, "after")  # numbered above the reservation: b finds the gap
    await until(lambda: b.bridge.cluster.bus.gone > 0, timeout=20, what="events gone found on b")
    return cid, after


async def test_events_gone_for_good_reach_the_phone_as_truncated(service_factory, engines, tmp_path, redis_server):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        cid, after = await hole_on_b(a, b, phone, other, redis_server, "/bench 60 200")
        await phone.until(lambda: phone.close_code is not None)  # closed by b before what follows
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok
        await phone.wait_for("run.completed", run_id=after)  # and what follows, as ever
        # each seq once: the error that closed it took its seq before b stopped numbering it (server.py
        # ``_apply``), not one b's stored rows had given meanwhile (a replay of two frames under one seq)
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
        # b's state, which lacked the run the stream lost, is read again from the store: as a's
        await until(lambda: b.bridge.cluster.gaps.refreshes > 0, what="b's state read again")
        await until(lambda: len(b.bridge.conversations[cid].messages) == len(a.bridge.conversations[cid].messages),
                    what="the conversation on b as on a")  # fmt: skip
        assert [(m.message_id, m.text) for m in b.bridge.conversations[cid].messages] == \
            [(m.message_id, m.text) for m in a.bridge.conversations[cid].messages]  # fmt: skip
        # the phone on a, numbered by a node that read everything, is told nothing
        await other.disconnect()
        ok = await other.connect()
        assert ok["payload"]["truncated"] is False, ok
    finally:
        await close_all()


def test_a_catch_up_over_a_hole_nobody_else_covers_is_a_gap():
    from loomi_adapter.history import Range, crossed, plan_catchup

    others = [("b:1", 0, 100), ("c:1", 50, 100)]
    # b passed over 20..29 (gone); c keeps nothing that old: the device that missed them is told
    assert plan_catchup(10, 101, others, {"b:1": [(20, 29)]}) == ([Range("b:1", 11, 19), Range("b:1", 30, 100)], True)
    # c has them (it was not behind): served from c, nothing gone
    assert plan_catchup(60, 101, others, {"b:1": [(70, 79)]}) == ([Range("c:1", 61, 100)], False)
    assert plan_catchup(10, 101, others) == ([Range("b:1", 11, 100)], False)  # no hole: as before
    assert crossed(5, 40, {"b"}, [("b", 20, 29)]) and not crossed(5, 40, {"c"}, [("b", 20, 29)])
    assert not crossed(30, 40, {"b"}, [("b", 20, 29)])  # told at the hello that began at 30


def test_what_a_node_answering_a_refetch_knows_given():
    from bridge_core.scale.catchup import seen_below

    assert seen_below(5001, 1, 6, []) == 6  # not past the gap's end: what it delivered
    assert seen_below(5001, 1, 5003, [(6, 5001)]) == 6  # it passed the same jump: the last before it
    assert seen_below(5001, 1, 5003, []) == 5000  # it delivered through there: all given
    assert seen_below(5001, 5001, 5003, []) == 0  # started since: knows nothing below (no false gone)
    assert seen_below(5001, 0, 0, []) == 0


async def test_a_run_nobody_read_before_redis_lost_it_reaches_the_phone_as_truncated(
        service_factory, engines, tmp_path, redis_server):  # fmt: skip
    """Item 2 of the chaos findings: every node that would render a run was behind when Redis lost its keys,
    and its writer is gone: nobody knows its numbers were given (no ``Gap.lost``), yet the store has what it
    did. The node past the gap reads its transcripts back from the store, and its phone is told
    ``truncated``: the numbers nobody knows of hold something the store records (``gone.happened``)."""
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        await phone.pair(await _qr(b))
        await other.pair(await _qr(a))
        first = await _send(phone, "before")
        await phone.wait_for("run.completed", run_id=first)
        cid = next(c for c, conv in b.bridge.conversations.items() if conv.run is None and conv.messages)
        gate = Gate(b.bridge.cluster.bus)
        gate.close()
        await until(lambda: gate.parked.is_set(), what="b's reads held")
        missed = await _send(other, "/bench 30 200", cid)
        await other.wait_for("run.completed", run_id=missed)
        await other.disconnect()
        await a.stop()  # its writer gone (what it wrote with it)
        redis_server.flush()
        gate.open.set()
        after = await _send(phone, "after")  # numbered above the reservation: b finds the gap, nobody to ask
        await phone.until(lambda: phone.close_code is not None)
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok
        await phone.wait_for("run.completed", run_id=after)
        texts = [m.text for m in b.bridge.conversations[cid].messages]
        assert "/bench 30 200" in texts, texts  # b's state has the run back from the store
    finally:
        await close_all()
