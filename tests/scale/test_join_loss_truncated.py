"""Seed 2003 end to end: a node started on a live bridge, its reads held from its very first one (it has
delivered nothing yet, as n1 still reading its join), while another node's run streams, Redis loses its
keys and the run's writer kept only its last entries. Before, the node's first entry after the loss was
delivered as if nothing came before: its phone's seqs went on over the run's deltas, never told. Now its
gaps are told from its join (bridge_core/scale/busjoin.py): the events gone are a hole of its life, the
phone is closed and its next hello is ``truncated``. Two in-process nodes, the spec-built phone over real
sockets (the steps of tests/scale/test_gone_truncated.py, with ``b`` started late)."""

from __future__ import annotations

import types

import pytest

from bridge_core.scale import catchup, redisbus
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.gates import Gate
from tests.scale.test_cluster import _nodes
from tests.scale.test_gone_truncated import _qr, _send
from tests.waiting import until


@pytest.mark.parametrize("keep", [None, 2], ids=["given-back", "gone"])
async def test_a_node_that_delivered_nothing_yet_gives_its_phone_the_run_or_says_it_gone(
        service_factory, engines, tmp_path, redis_server, monkeypatch, keep):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=("loomi",))
    other, phone = LoomiApp("Other phone"), LoomiApp("Pixel 9")
    try:
        await other.pair(await _qr(a))
        first = await _send(other, "before")
        await other.wait_for("run.completed", run_id=first)
        if keep:
            a.bridge.cluster.bus._written = catchup.Written(keep=keep)  # a keeps its last entries only
        gates, from_url = [], redisbus.aioredis.from_url

        def held(*args, **kw):  # b's bus client, its reads held from the first (before its reader runs)
            r = from_url(*args, **kw)
            gates.append(Gate(types.SimpleNamespace(_r=r)))
            gates[-1].close()
            return r

        monkeypatch.setattr(redisbus.aioredis, "from_url", held)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b", adapters=("loomi",))
        monkeypatch.undo()
        (gate,) = gates
        await until(lambda: gate.parked.is_set(), what="b's first read held")
        await phone.pair(await _qr(b))
        missed = await _send(other, "/bench 30 200")  # a run b does not read: it has delivered nothing
        await other.wait_for("run.completed", run_id=missed)
        redis_server.flush()  # Redis loses it
        gate.open.set()
        after = await _send(other, "after")  # numbered above the reservation: b finds the gap from its join
        if not keep:  # every delta of the run, refetched from a, in order, before what follows; nobody closed
            await phone.wait_for("run.completed", run_id=after)
            assert phone.run_text(missed) == other.run_text(missed) != "" and len(phone.completed(missed)) == 1
            assert b.bridge.cluster.bus.refetched > 0 and b.bridge.cluster.bus.gone == 0
            assert phone.close_code is None and phone.seqs() == sorted(set(phone.seqs()))
            return
        await until(lambda: b.bridge.cluster.bus.gone > 0, timeout=20, what="events gone found on b")
        await phone.until(lambda: phone.close_code is not None)  # closed by b before what follows
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok  # it missed the run: told, never silent
        await phone.wait_for("run.completed", run_id=after)
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
    finally:
        await close_all()
