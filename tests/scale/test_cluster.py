"""Nodes of one bridge in one process (tests/scale/test_nodes.py runs them as processes): the bus
wired into the core, over real Pheby sockets on a private PostgreSQL and Redis."""

from __future__ import annotations

from tests.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp
from tests.waiting import until


async def _nodes(service_factory, engines, tmp_path, *names, **kw):
    store, bus = engines
    out = []
    for name in names:
        out.append(await service_factory(adapters=("pheby",), store=store, bus=bus, node_id=name,
                                         data_dir=tmp_path / name, **kw))  # fmt: skip
    return out


async def _app(svc):
    app = PhebyApp(f"ws://127.0.0.1:{svc.ports['pheby']}/ws", PHEBY_SECRET)
    await app.connect()
    return app


async def test_a_run_on_one_node_is_seen_on_the_other_with_one_numbering(service_factory, engines, tmp_path):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b")
    assert a.bridge.cluster.node_id == "a" and b.bridge.cluster.node_id == "b"
    seen = {"a": [], "b": []}
    a.bridge.hub.subscribe(lambda n, e: seen["a"].append((n, e)))
    b.bridge.hub.subscribe(lambda n, e: seen["b"].append((n, e)))
    pa, pb = await _app(a), await _app(b)
    try:
        cid = await pa.create("Shared")
        await pb.wait_until(lambda: cid in b.bridge.conversations)
        await pb.open(cid)
        await pa.chat(cid, "hello nodes")
        done = lambda app: any(r == "assistant" and t == "Echo: hello nodes" for r, t in app.view(cid).transcript())  # noqa: E731
        await pa.wait_until(lambda: done(pa) and pa.view(cid).run is None)
        await pb.wait_until(lambda: done(pb) and pb.view(cid).run is None)
        assert pa.view(cid).transcript()[-1] == pb.view(cid).transcript()[-1]
        assert pa.violations == [] and pb.violations == []
        await until(lambda: len(seen["a"]) == len(seen["b"]) and seen["a"], what="both hubs")
        ns = [n for n, _ in seen["a"]]
        assert ns == [n for n, _ in seen["b"]] and ns == list(range(ns[0], ns[0] + len(ns)))
        from bridge_core.serialize import to_dict

        assert [to_dict(e) for _, e in seen["a"]] == [to_dict(e) for _, e in seen["b"]]
        # b knows the conversation and its transcript as a folded it, without writing it again
        assert [m.text for m in b.bridge.conversations[cid].messages] == [m.text for m in a.bridge.conversations[cid].messages]
    finally:
        await pa.close()
        await pb.close()
