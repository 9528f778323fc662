"""Loomi and lvmh on each store engine, over real sockets with the spec-model apps: a phone paired
with one node's token on the next node's store, its seqs strictly increasing across nodes with
``last_seq`` replay; lvmh events served the same by the next node."""

from __future__ import annotations

from tests.conftest import LVMH_TOKEN
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.conformance.lvmh_client import Rest
from tests.loomi.helpers import new_token


def _data(tmp_path, engine, name):
    return tmp_path / ("node" if engine == "sqlite" else name)


def _ws(svc) -> str:
    return f"ws://127.0.0.1:{svc.ports['loomi']}/ws"


async def _run(app: LoomiApp, text: str) -> str:
    ack = await app.request("session.send", {"text": text})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    run_id = ack["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", run_id=run_id)
    return run_id


async def test_a_phone_keeps_its_seqs_and_its_replay_from_node_to_node(service_factory, store_url, engine, tmp_path):
    a = await service_factory(adapters=("loomi",), store=store_url, data_dir=_data(tmp_path, engine, "a"))
    qr_for_later = await new_token(a)  # made on node a, redeemed on node b
    qr = await new_token(a)
    qr["url"] = _ws(a)
    phone = LoomiApp("Pixel 9")
    try:
        await phone.pair(qr)
        await _run(phone, "on node a")
        await phone.disconnect()
        processed = phone.processed
        await a.stop()

        b = await service_factory(adapters=("loomi",), store=store_url, data_dir=_data(tmp_path, engine, "b"))
        other = LoomiApp("Other phone")
        await other.pair(dict(qr_for_later, url=_ws(b)))
        away = await _run(other, "while the first phone was away")

        ok = await phone.connect(_ws(b))
        assert ok["seq"] == processed and ok["payload"]["truncated"] is False
        done = await phone.wait_for("run.completed", run_id=away)
        assert phone.run_text(away) == done["payload"]["text"] == "Echo: while the first phone was away"
        await _run(phone, "on node b")
        seqs = phone.seqs()
        assert phone.dropped == [] and seqs == sorted(set(seqs)), seqs  # strictly increasing, none twice
    finally:
        await close_all()


async def test_lvmh_events_are_served_the_same_by_the_next_node(service_factory, store_url, engine, tmp_path):
    a = await service_factory(adapters=("lvmh",), store=store_url, data_dir=_data(tmp_path, engine, "a"))
    rest = Rest(f"http://127.0.0.1:{a.ports['lvmh']}", LVMH_TOKEN)
    try:
        status, created = await rest.call("POST", "/api/conversations", {"name": "Shared"})
        assert status in (200, 201), (status, created)
        sid = created["id"]
        status, _ = await rest.prompt(sid, "hello lvmh")
        assert status in (200, 202), status
        before = await rest.settled(sid)
    finally:
        await rest.close()
    await a.stop()

    b = await service_factory(adapters=("lvmh",), store=store_url, data_dir=_data(tmp_path, engine, "b"))
    rest = Rest(f"http://127.0.0.1:{b.ports['lvmh']}", LVMH_TOKEN)
    try:
        assert (await rest.session(sid)) is not None
        after = await rest.events(sid)
        assert [(e["seq"], e["type"]) for e in after] == [(e["seq"], e["type"]) for e in before]
        status, _ = await rest.prompt(sid, "and on node b")
        assert status in (200, 202), status
        more = await rest.settled(sid, runs=2)
        assert [e["seq"] for e in more] == sorted({e["seq"] for e in more})
        assert more[-1]["seq"] > before[-1]["seq"]
    finally:
        await rest.close()
