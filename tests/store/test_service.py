"""The whole service on each store engine, over real sockets: what a node wrote, a restart (or
another node on the same PostgreSQL) knows; a run a crash cut short closes as after a restart.
And `serve`'s refusals: --bus without a shared --store, an unreachable engine (one line, non-zero).
"""

from __future__ import annotations

import pytest

from tests.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import BridgeProcess


def _data(tmp_path, engine, name):
    # SQLite lives in the data dir, so a restart reuses it; on PostgreSQL a second node has its own
    return tmp_path / ("node" if engine == "sqlite" else name)


async def test_what_one_node_wrote_the_next_one_serves(service_factory, store_url, engine, tmp_path):
    svc = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "a"))
    app = PhebyApp(f"ws://127.0.0.1:{svc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    cid = await app.create("Shared")
    await app.chat(cid, "hello store")
    await app.wait_until(lambda: any(r == "assistant" and "hello store" in t and not app.view(cid).open_bubbles()
                                     for r, t in app.view(cid).transcript()))
    await app.close()
    await svc.stop()

    svc2 = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "b"))
    app2 = PhebyApp(f"ws://127.0.0.1:{svc2.ports['pheby']}/ws", PHEBY_SECRET)
    await app2.connect()
    try:
        await app2.open(cid)
        transcript = app2.view(cid).transcript()
        assert transcript[0] == ("user", "hello store")
        assert len(transcript) == 2 and transcript[1][0] == "assistant" and "hello store" in transcript[1][1]
    finally:
        await app2.close()


async def test_a_run_cut_short_closes_as_after_a_restart(service_factory, store_url, engine, tmp_path):
    from bridge_core.bridge.demo import DemoAgent

    svc = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "a"),
                                source=DemoAgent(approval_timeout=None), node_id="n1")  # fmt: skip
    app = PhebyApp(f"ws://127.0.0.1:{svc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    cid = await app.create("Cut")
    await app.chat(cid, "/approve reboot")
    await app.wait_until(lambda: app.view(cid).approvals)
    await app.close()
    svc.bridge.store.flush()
    svc.bridge.store.close()  # a crash: nothing more is written, the run never finishes
    for t in list(svc.bridge.tasks._tasks):
        t.cancel()

    # the node restarting under its own name (its heartbeat row is its own to take over)
    svc2 = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "b"),
                                 source=DemoAgent(approval_timeout=None), node_id="n1")  # fmt: skip
    app2 = PhebyApp(f"ws://127.0.0.1:{svc2.ports['pheby']}/ws", PHEBY_SECRET)
    await app2.connect()
    try:
        await app2.open(cid)
        view = app2.view(cid)
        assert view.approvals == {} and view.run is None
        assert view.open_bubbles() == []
    finally:
        await app2.close()


def _serve_exit(tmp_path, *args):
    proc = BridgeProcess(str(tmp_path / "p"), adapters="pheby", extra_args=list(args))
    rc = proc.run_to_exit(timeout=60)
    return rc, proc.stderr().strip().splitlines()


def test_bus_without_a_shared_store_is_refused(tmp_path):
    rc, lines = _serve_exit(tmp_path, "--bus", "redis://127.0.0.1:9/0")
    assert rc != 0
    assert lines == ["agent-bridge: --bus needs a shared --store (postgresql://...): nodes on a bus share one store"]


def test_an_unreachable_bus_is_refused_in_one_line(postgres, tmp_path):
    from tests.engines import free_port

    url = postgres.new_database()
    rc, lines = _serve_exit(tmp_path, "--store", url, "--bus", f"redis://:hunter2-secret@127.0.0.1:{free_port()}/0")
    assert rc != 0
    assert len(lines) == 1 and lines[0].startswith("agent-bridge: cannot reach the bus redis://:***@127.0.0.1:"), lines
    assert "hunter2" not in "\n".join(lines)


async def test_a_second_live_node_on_one_store_is_refused_until_the_first_stops(service_factory, postgres, tmp_path):
    """Without the bus a second live node would miss the first one's events: refused, in one line."""
    from bridge_core.model.errors import ConfigError

    url = postgres.new_database()
    first = await service_factory(adapters=("pheby",), store=url, data_dir=tmp_path / "a", node_id="alpha")
    with pytest.raises(ConfigError) as refused:
        await service_factory(adapters=("pheby",), store=url, data_dir=tmp_path / "b", node_id="beta")
    assert refused.value.message.startswith("node alpha is live on the store postgresql://postgres@127.0.0.1:")
    assert first.bridge.store.query("SELECT node_id FROM bridge_nodes") == [("alpha",)]
    await first.stop()  # a clean stop gives the store up
    second = await service_factory(adapters=("pheby",), store=url, data_dir=tmp_path / "b", node_id="beta")
    assert second.bridge.store.query("SELECT node_id FROM bridge_nodes") == [("beta",)]


def test_a_node_is_live_while_its_heartbeat_is_younger_than_the_ttl():
    from bridge_core.scale.nodes import NODE_TTL, live_nodes

    assert NODE_TTL <= 15.0
    rows = [("a", 100.0), ("b", 100.0 - NODE_TTL), ("c", 99.0)]
    assert live_nodes(rows, now=100.0) == ["a", "c"]
    assert live_nodes(rows, now=100.0 + NODE_TTL) == []


def test_an_unreachable_store_is_refused_in_one_line(tmp_path):
    from tests.engines import free_port, pg_missing

    if pg_missing():
        pytest.skip(pg_missing())
    url = f"postgresql://bridge:hunter2-secret@127.0.0.1:{free_port()}/bridge"
    rc, lines = _serve_exit(tmp_path, "--store", url)
    assert rc != 0
    assert len(lines) == 1 and lines[0].startswith("agent-bridge: cannot reach the store postgresql://bridge:***@127.0.0.1:")
    assert "hunter2" not in "\n".join(lines)


async def test_the_store_comes_back_after_postgresql_restarts(service_factory, postgres, tmp_path):
    """The database restarts under a running node: writes that failed are reported, then the
    node reconnects (reads and the writer) and serves on, without a restart of its own."""
    from tests.waiting import until

    url = postgres.new_database()
    svc = await service_factory(adapters=("pheby",), store=url, data_dir=tmp_path / "a", node_id="a")
    app = PhebyApp(f"ws://127.0.0.1:{svc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    try:
        cid = await app.create("Before")
        postgres.restart()
        store = svc.bridge.store

        async def usable():
            try:
                await store.probe()
                return store.query("SELECT name FROM conversations WHERE id=?", (cid,)) == [("Before",)]
            except Exception:  # noqa: BLE001 - still reconnecting
                return False

        await until(usable, timeout=30, what="the store to reconnect after the database restarted")
        await app.chat(cid, "after the restart")
        await app.wait_until(lambda: any(r == "assistant" and "after the restart" in t
                                         for r, t in app.view(cid).transcript()) and not app.view(cid).open_bubbles())
        await store.aflush()
        assert store.query("SELECT role FROM messages WHERE conversation_id=? ORDER BY rowid", (cid,)) == [
            ("user",), ("assistant",)]  # fmt: skip
    finally:
        await app.close()


async def test_an_attachment_made_on_one_node_downloads_from_the_next(service_factory, store_url, engine, tmp_path):
    """SQLite keeps the bytes in the data dir (as always); PostgreSQL keeps them in the store, in
    chunks, so a node with another data dir serves them byte for byte (docs/scale-out.md)."""
    import os

    import aiohttp

    from bridge_core.bridge.attachments import CHUNK

    svc = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "a"))
    bridge = svc.bridge
    cid = bridge.create_conversation("Files").conversation_id
    big = os.urandom(2 * CHUNK + 1234)  # three chunks
    source = tmp_path / "report.bin"
    source.write_bytes(big[:CHUNK])  # exactly one
    made = [
        (await bridge.attachments.add_bytes(big, filename="big.bin", conversation_id=cid, message_id=None), big),
        (await bridge.attachments.add_bytes(b"", filename="empty.txt", conversation_id=cid, message_id=None), b""),
        (await bridge.attachments.add_file(str(source), conversation_id=cid, message_id=None), big[:CHUNK]),
    ]
    on_disk = sorted(os.listdir(bridge.attachments.directory))
    assert on_disk == ([] if engine == "postgresql" else sorted(a.attachment_id for a, _ in made))
    await svc.stop()

    svc2 = await service_factory(adapters=("pheby",), store=store_url, data_dir=_data(tmp_path, engine, "b"))
    base = f"http://127.0.0.1:{svc2.ports['pheby']}/attachments/"
    async with aiohttp.ClientSession() as http:
        for att, data in made:
            async with http.get(base + att.attachment_id, headers={"X-Pheby-Secret": PHEBY_SECRET}) as r:
                assert r.status == 200 and await r.read() == data, att.filename
                assert r.headers["Content-Length"] == str(len(data))
                assert r.headers["Cache-Control"] == "private, no-store"
            async with http.head(base + att.attachment_id, headers={"X-Pheby-Secret": PHEBY_SECRET}) as r:
                assert r.status == 200 and r.headers["Content-Length"] == str(len(data))
        async with http.get(base + "0" * 32, headers={"X-Pheby-Secret": PHEBY_SECRET}) as r:
            assert r.status == 404
    # expired: the records and their bytes go
    assert await svc2.bridge.attachments.cleanup(at=made[0][0].expires_at + 1) == 3
    assert svc2.bridge.attachments.get(made[0][0].attachment_id) is None
    if engine == "postgresql":
        assert svc2.bridge.store.query("SELECT COUNT(*) FROM attachment_bytes") == [(0,)]
