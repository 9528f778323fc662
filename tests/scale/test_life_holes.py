"""A hole is recorded against the life of a node that passed over it, not its name (issue 41, chaos seed 2003
``truncated_under_window``; docs/scale-out.md "Catching up"; bridge_core/scale/gone.py).

A node killed (-9) and restarted under its own name joins the stream 5 s back and drops its previous life's
entries; between the other nodes' entries their numbers are a gap nobody gives back, recorded as a hole. Right
for the new life's rows, which lack those events; but the previous life rendered them, and a phone it numbered
across them got them. Before, the hole was the node's: that phone's next hello was answered ``truncated``
though it got every event. Now it is the new life's: the phone is judged by the rows that numbered it, and a
phone numbered by a life across that life's hole (or a hole recorded before lives were) is still told."""

from __future__ import annotations

import pytest

from bridge_core.bridge.sqlite import Store
from bridge_core.scale import cluster as scale_cluster, gone
from bridge_core.scale.engines import open_store
from loomi_adapter.cluster import ClusterRegistry
from loomi_adapter.devices import MIGRATIONS as LOOMI
from bridge_core.scale import catchup
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.nodes import Nodes
from tests.scale.gates import held
from tests.scale.test_gone_truncated import _qr, _send
from tests.scale.phones import loomi_ws, pair_qr
from tests.waiting import until


@pytest.fixture
def nodes(serve_nodes):
    return lambda *names: serve_nodes(*names, adapters="loomi")


def _deltas(app: LoomiApp, run_id: str) -> int:
    return len(app.find("run.delta", run_id=run_id))


async def test_a_phone_numbered_by_a_nodes_previous_life_is_not_told_truncated(nodes, engines, tmp_path):
    """Whatever the load (issue 41: it flaked beside two CPU spinners). n2's run has 400 deltas, so what the
    phone misses while n1 is down stays inside its window (512 seqs): with 4,000 at 200/s, a restart slower than
    2.6 s made it miss more, and its hello was answered ``truncated``, rightly, by its window, not by a hole. The
    holes it is judged by are waited for in the store, the new life's (not a log line, written before them); and
    n2's entries end within the 5 s the new life joins back from the stream's end, so it finds them, however
    late it restarts (a restart 5 s after n1's entries, n2 streaming on, joined past them: no hole at all)."""
    n1, n2 = nodes("n1", "n2")
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    store = open_store(engines[0], str(tmp_path)).open()
    try:
        await phone.pair(dict(await pair_qr(n1), url=loomi_ws(n1)))
        await other.pair(dict(await pair_qr(n2), url=loomi_ws(n2)))
        streaming = await _send(other, "/bench 400 100")  # n2 streams (4 s) ...
        await phone.until(lambda: _deltas(phone, streaming) >= 1, timeout=30)  # (n2's entries before n1's)
        mine = await _send(phone, "/bench 300 300")  # ... and so does n1 (1 s): their entries interleave
        await phone.until(lambda: phone.completed(mine) and _deltas(phone, streaming) >= 100, timeout=30)
        then = await _send(other, "then")  # n2's entries after n1's, however late n1's run was: the gaps
        old = {src for (src,) in store.query("SELECT source FROM loomi_sources WHERE node='n1'")}
        # killed while n2 streams, its own run's entries all delivered by it (the phone got the run's end from
        # it): whatever n1 published, its rows hold, so the phone's next hello misses nothing it was not given
        n1.kill9()
        await phone.until(lambda: phone.close_code is not None or not phone.connected, timeout=30)
        n1.start()  # under its own name: it passes over its previous life's entries while joining 5 s back
        await until(lambda: any(w.startswith("n1:") and w not in old for w, _, _ in gone.holes(store, -1)),
                    timeout=60, what="the holes of n1's new life in the store")  # fmt: skip
        ok = await phone.connect(loomi_ws(n2))
        assert ok["payload"]["truncated"] is False, ok  # before: True, by n1's new life's holes
        await phone.until(lambda: phone.completed(streaming) and phone.completed(then), timeout=60)  # as ever
        await other.wait_for("run.completed", timeout=60, run_id=streaming)
        assert phone.run_text(streaming) == other.run_text(streaming) == "tok " * 400  # it got every event
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, [f["type"] for f in phone.dropped]
    finally:
        await close_all()
        store.close()


async def test_a_phone_the_restarted_life_numbers_across_its_own_hole_is_told(engines, tmp_path, redis_server):
    """Never silence across a restart: the phone its previous life numbered says hello to the new life (not
    told: it got everything), then the new life passes over events gone for good (test_gone_truncated.py's
    loss: ``a`` behind, ``b`` keeping its last 2 entries, Redis losing them): the phone is told."""
    nodes = Nodes(engines, tmp_path, ("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        a, b = await nodes.start("a"), await nodes.start("b")
        before = a.bridge.cluster.gaps.life
        await phone.pair(await _qr(a))
        await other.pair(await _qr(b))
        first = await _send(phone, "before")
        await phone.wait_for("run.completed", run_id=first)
        await phone.disconnect()
        await nodes.stop(a)
        a = await nodes.start("a")  # the same name, another life
        life = a.bridge.cluster.gaps.life
        assert life != before and a.frontends["loomi"].registry.source == life
        ok = await phone.connect(f"ws://127.0.0.1:{a.ports['loomi']}/ws")
        assert ok["payload"]["truncated"] is False, ok
        again = await _send(phone, "again")  # numbered by the new life (which delivers from here)
        await phone.wait_for("run.completed", run_id=again)
        cid = next(c for c, conv in a.bridge.conversations.items() if conv.run is None and conv.messages)
        b.bridge.cluster.bus._written = catchup.Written(keep=2)
        gate = await held(a.bridge.cluster.bus, "a's reads held")
        missed = await _send(other, "/bench 60 200", cid)
        await other.wait_for("run.completed", run_id=missed)
        redis_server.flush()
        gate.open.set()
        after = await _send(other, "after")
        await until(lambda: a.bridge.cluster.bus.gone > 0, timeout=20, what="events gone found on a")
        await phone.until(lambda: phone.close_code is not None)
        a.bridge.store.flush()
        assert {w for w, _, _ in gone.holes(a.bridge.store, -1)} == {life}  # the new life's, no other
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok
        await phone.wait_for("run.completed", run_id=after)
    finally:
        await close_all()
        await nodes.close()


def _store(tmp_path, name: str = "core.db") -> Store:
    store = Store(str(tmp_path / name)).open()
    store.migrate("loomi", LOOMI)
    store.migrate("cluster", scale_cluster.MIGRATIONS)
    return store


def _epoch(store, device: str, source: str, start_n: int) -> None:
    """``device`` numbered by ``source``'s rows from event ``start_n`` (epoch 1), claimed again since (epoch 2)."""
    def write(c) -> None:
        c.execute("INSERT INTO loomi_epochs(device_id, epoch, start_n, base_seq, last_seq) VALUES(?,1,?,0,50)",
                  (device, start_n))  # fmt: skip
        c.execute("INSERT INTO loomi_spans(device_id, epoch, source, from_m, to_m, seq_offset) VALUES(?,1,?,1,50,0)",
                  (device, source))  # fmt: skip

    store.write_later(write)
    store.flush()


class _Bridge:
    def __init__(self, store) -> None:
        self.store = store


def test_a_phone_a_life_numbered_across_its_own_hole_is_still_told(tmp_path):
    """Never silence: the hole of the life that numbered the phone, or one recorded before lives were."""
    store = _store(tmp_path)
    try:
        old, new = gone.Gone(_Bridge(store), "n1", None), gone.Gone(_Bridge(store), "n1", None)
        assert old.life != new.life and old.life.startswith("n1:")
        new._said([(6, 8), (10, 10)])  # the new life passed over 6-8 and 10
        store.flush()
        _epoch(store, "by-old", old.life, 5)
        _epoch(store, "by-new", new.life, 5)
        reg = ClusterRegistry(store, "n1", new.life)
        assert reg.source == new.life
        assert reg._crossed("by-new", 40, 2) is True  # its rows lack 6-8: it missed them, told
        assert reg._crossed("by-old", 40, 2) is False  # the previous life rendered them: it got them
        assert reg._holes([(old.life, 1, 40), (new.life, 1, 40)], 0) == {new.life: [(6, 8), (10, 10)]}
        # a hole recorded before lives were (no life): every life of the node's, as before
        store.write_later(lambda c: c.execute("INSERT INTO cluster_holes(node_id, n_from, n_to, at) "
                                              "VALUES('n1', 20, 22, 1.0e12)"))  # fmt: skip
        store.flush()
        assert reg._crossed("by-old", 40, 2) is True
        assert ("n1", 20, 22) in gone.holes(store, 0)
    finally:
        store.close()


def _upgrade(store) -> None:
    before = scale_cluster.MIGRATIONS[:scale_cluster.MIGRATIONS.index(gone.LIFE_MIGRATION)]
    store.migrate("cluster", before)  # a store as the code before lives left it, with a hole in it
    store.write_later(lambda c: c.execute("INSERT INTO cluster_holes(node_id, n_from, n_to, at) "
                                          "VALUES('n1', 6, 8, 1.0e12)"))  # fmt: skip
    store.flush()
    store.migrate("cluster", scale_cluster.MIGRATIONS)  # the upgrade, at the next start
    ours = gone.Gone(_Bridge(store), "n2", None)
    ours._said([(9, 9)])
    store.flush()
    assert sorted(gone.holes(store, 0)) == sorted([("n1", 6, 8), (ours.life, 9, 9)])


def test_an_existing_sqlite_store_upgrades(tmp_path):
    store = Store(str(tmp_path / "old.db")).open()
    try:
        _upgrade(store)
    finally:
        store.close()
    again = Store(str(tmp_path / "old.db")).open()  # reopened: nothing left to apply, the holes kept
    try:
        again.migrate("cluster", scale_cluster.MIGRATIONS)
        assert ("n1", 6, 8) in gone.holes(again, 0)
    finally:
        again.close()


def test_an_existing_postgresql_store_upgrades(engines, tmp_path):
    store = open_store(engines[0], str(tmp_path)).open()
    try:
        _upgrade(store)
    finally:
        store.close()
