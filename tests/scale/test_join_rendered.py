"""A node's Loomi renders the events of its join: a phone whose hello reaches it gets a run nobody else rendered
yet (chaos seed 2104, ``event_missing``; issue 41; docs/scale-out.md "Joining").

What the history showed: Redis restarted, every node's delivery held on the gap, while n2 ran phone-1's
``/slow 1``: its 14 events the first entries of the new stream, rendered by nobody. n1, started 3 s later,
joined the stream with that run in its window: its bus held it, ``Cluster.joined`` folded it and fanned it
out to the hub during ``Bridge.start``, before any front end subscribed (``FrontEnd.start``, after the bridge
started). Its Loomi never saw those events: its position stayed the newest event any node stored, no higher
than phone-3's cursor from n3's rows, so phone-3's hello to n1 replayed nothing, was not ``truncated``, and its
live numbering began with the next event: the run never reached it.

Here: ``a`` numbers the phone and stops reading (held), ``c`` (Pheby only: no Loomi rows) runs a turn, then
``b`` starts with that turn in its join window, and the phone says hello to ``b``. Three in-process nodes on
the real store and Redis, the phone spec-built over real sockets (the steps of test_join_loss_truncated.py)."""

from __future__ import annotations

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.gates import held
from tests.scale.test_cluster import _app, _nodes
from tests.scale.test_gone_truncated import _qr, _send


async def test_a_phone_saying_hello_to_a_joining_node_gets_the_turn_of_its_join(service_factory, engines, tmp_path):
    (a,) = await _nodes(service_factory, engines, tmp_path, "a", adapters=("loomi",))
    (c,) = await _nodes(service_factory, engines, tmp_path, "c", adapters=("pheby",))
    phone = LoomiApp("Pixel 9")
    pheby = await _app(c)
    try:
        await phone.pair(await _qr(a))
        first = await _send(phone, "before")
        await phone.wait_for("run.completed", run_id=first)
        await held(a.bridge.cluster.bus, "a's reads held")  # a renders nothing more (behind, as n3 on its gap)
        cid = await pheby.create("Elsewhere")
        await pheby.chat(cid, "while a is behind")
        await pheby.wait_until(lambda: ("assistant", "Echo: while a is behind") in pheby.view(cid).transcript())
        (b,) = await _nodes(service_factory, engines, tmp_path, "b", adapters=("loomi",))  # the turn: its join's
        ok = await phone.connect(f"ws://127.0.0.1:{b.ports['loomi']}/ws")
        done = await phone.until(lambda: [f for f in phone.find("run.completed") if f["task_id"] == cid])
        assert ok["payload"]["truncated"] is False, ok  # served: b rendered it
        assert done[0]["payload"]["text"] == "Echo: while a is behind", done
        assert [f["payload"]["text"] for f in phone.find("session.message") if f["task_id"] == cid] == [
            "while a is behind"]
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
    finally:
        await pheby.close()
        await close_all()
