"""After a kill -9 on several nodes, the interrupted message is completed with the text the other nodes
delivered (issue 41 item 2; docs/scale-out.md "Joining", docs/architecture.md "After a crash"): the
stream's last delta of the run (``Cluster.read_texts``, ``RedisBus.newest``), read back by the node that
closes the run, here with no Loomi device to keep frames. The nemesis suite's seed 4103 is the same with
every front end (tests/nemesis/test_nemesis.py)."""

from __future__ import annotations

from bridge_core.scale.busauth import derive_key
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import PHEBY_SECRET
from tests.waiting import until

KEY = derive_key("test-pheby-secret-0123456789", "test-lvmh-token-0123456789")


def _bus(url: str, node: str, key: bytes = KEY):
    from bridge_core.scale.redisbus import RedisBus

    return RedisBus(url, node, key=key)


def _delta(run_id: str, text: str) -> dict:
    return {"event": "TextDelta", "conversation_id": "c1", "run_id": run_id, "message_id": f"draft-{run_id}",
            "delta": text[-3:], "draft": text, "kind": "text", "iteration": 0, "ts": 1.0}


def _of(run_id: str):
    return lambda d: d.get("event") == "TextDelta" and d.get("run_id") == run_id


async def test_the_newest_genuine_event_of_a_run_read_back_from_any_epoch(redis_url):
    """A node's events under its previous epoch count (what the others delivered then); a forged entry
    (another key) does not; nothing is applied or noted by the reading."""
    first, forger, reader = _bus(redis_url, "a"), _bus(redis_url, "a", derive_key("x" * 28, "y" * 28)), None
    got: list = []
    await first.start(lambda n, node, data: got.append(data))
    await forger.start(lambda n, node, data: None)
    try:
        for k in range(1, 6):
            first.publish(_delta("r1", " ".join(["tok"] * k)))
            first.publish(_delta("r2", "other run"))
        await until(lambda: len(got) == 10, what="the events back")
        forger.publish(_delta("r1", "forged, longer " * 9))
        await forger.flush()
        await first.kill()  # no goodbye: the node "dies"
        reader = _bus(redis_url, "a")  # restarted under its own name: a new epoch
        await reader.start(lambda n, node, data: None)
        newest = await reader.newest(b"r1", _of("r1"), 10.0)
        assert newest is not None and newest["draft"] == "tok tok tok tok tok"
        assert await reader.newest(b"r3", _of("r3"), 10.0) is None
        assert reader.delivered == 0  # read, applied nowhere
    finally:
        for bus in (forger, reader):
            if bus is not None:
                await bus.stop()


async def test_a_node_restarted_under_its_own_name_closes_its_run_with_what_the_others_delivered(serve_nodes):
    n1, n2 = serve_nodes("n1", "n2", adapters="pheby")
    a1, a2 = [PhebyApp(f"ws://127.0.0.1:{p.ports['pheby']}/ws", PHEBY_SECRET) for p in (n1, n2)]
    await a1.connect()
    await a2.connect()
    try:
        cid = await a1.create("Fast")
        await a2.wait_frame(lambda f: f.get("conversation_id") == cid)
        assert (await a2.open(cid))["type"] == "conversation.history"
        await a1.chat(cid, "/bench 6000 2000")

        def said() -> str:  # the newest draft n2 delivered (cumulative)
            texts = [f["text"] for f in a2.conn_frames if f["type"] == "message.delta" and f.get("conversation_id") == cid]
            return texts[-1] if texts else ""

        await a2.wait_until(lambda: len(said()) >= 400, timeout=15)  # well past the draft saved at the first words
        n1.kill9()
        n1.start()  # under its own name, at once: it closes its run as interrupted
        done = await a2.wait_frame(lambda f: f["type"] == "message.complete" and f.get("conversation_id") == cid
                                   and f.get("kind") != "notice", timeout=30)  # fmt: skip
        assert done["text"].startswith(said()) and len(done["text"]) >= len(said()) >= 400, (len(done["text"]), len(said()))
        assert a2.violations == []
    finally:
        for app in (a1, a2):
            await app.close()
