"""A node joining while its fold of what the stream held cannot read the store (``Unavailable``: PostgreSQL
restarting) still starts: the deliveries held while it joined go through the same hold as any later one
(bridge_core/scale/foldwait.py, ``Cluster.joined``), folded once the store answers. In-process nodes on a private
PostgreSQL and Redis, a spec-built Pheby client over a real socket."""

from __future__ import annotations

from bridge_core.scale.pgstore import PostgresStore as Store
from bridge_core.model.errors import Unavailable
from tests.scale.test_cluster import _app, _nodes
from tests.waiting import until


async def test_a_join_whose_fold_cannot_read_the_store_still_starts_and_folds_later(
        service_factory, engines, tmp_path, monkeypatch):  # fmt: skip
    (a,) = await _nodes(service_factory, engines, tmp_path, "a")
    pa, pb = await _app(a), None
    try:
        cid = await pa.create("made before b joined")
        first = (await pa.chat(cid, "first"))["run_id"]
        await pa.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == first)
        read, calls = Store.transcript, []

        def transcript(self, conversation_id, *args, **kw):
            if conversation_id == cid:
                calls.append(conversation_id)
                raise Unavailable("cannot reach the store: FATAL: the database system is shutting down")
            return read(self, conversation_id, *args, **kw)

        monkeypatch.setattr(Store, "transcript", transcript)
        (b,) = await _nodes(service_factory, engines, tmp_path, "b")  # joins: the stream's last seconds folded
        assert calls, "b's join never read the transcript"
        assert b.bridge.started
        monkeypatch.setattr(Store, "transcript", read)  # PostgreSQL is back
        await until(lambda: not b.bridge.cluster.waits.held, 20, "b's held deliveries folded")
        pb = await _app(b)
        second = (await pa.chat(cid, "second"))["run_id"]
        await pb.wait_frame(lambda f: f["type"] == "run.finished" and f.get("run_id") == second, 20)
        texts = [m.text for m in b.bridge.conversations[cid].messages]
        assert texts.count("first") == 1 and texts.count("second") == 1, texts
    finally:
        await pa.close()
        if pb is not None:
            await pb.close()
