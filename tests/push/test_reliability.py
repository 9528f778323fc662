"""Delivery: retries with backoff, a bounded queue for a dead endpoint, nothing queued lost
across a restart (a real ``agent-bridge serve`` process, killed with SIGKILL)."""

from __future__ import annotations

import socket

import aiohttp

from tests.hardening.proc import LVMH_TOKEN, BridgeProcess, count_rows
from tests.pheby.client import PhebyClient
from tests.waiting import until


def _dead_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_a_503_is_retried_with_backoff_until_it_goes_through(push_bridge, rest_factory, push_service):
    svc = await push_bridge(run_seconds=0, retry_seconds=1)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    await rest.subscribe(push_service.subscribe("flaky"))
    push_service.status["flaky"] = 503
    cid = await rest.conversation("Flaky")
    await rest.prompt(cid, "hello")
    await until(lambda: len(push_service.attempts) >= 2, what="two refused attempts")
    push_service.status["flaky"] = 201
    msgs = await until(lambda: push_service.messages("flaky"), what="the retried push")
    assert (msgs[0]["conversation_id"], msgs[0]["title"], msgs[0]["body"]) == (cid, "Run finished", "Flaky: Echo: hello")
    assert svc.notifier.deliveries.stats["retries"] >= 2
    await until(lambda: svc.bridge.store.query("SELECT count(*) FROM push_queue") == [(0,)], what="the queue emptied")


async def test_a_dead_push_service_never_grows_the_queue(push_bridge, rest_factory, push_service):
    svc = await push_bridge(run_seconds=3600, queue_size=3)
    rest = rest_factory(svc)
    sub = push_service.subscribe("dead")
    sub.endpoint = f"http://127.0.0.1:{_dead_port()}/push/dead"
    await rest.subscribe(sub)
    for i in range(10):
        cid = await rest.conversation(f"C{i}")
        await rest.prompt(cid, f"/notify n{i}")
    d = svc.notifier.deliveries
    await until(lambda: d.stats["overflow"] >= 7, what="the oldest dropped")
    assert d.queued() == 3
    await svc.bridge.store.aflush()
    assert svc.bridge.store.query("SELECT count(*) FROM push_queue") == [(3,)]
    kept = [t for t in d.targets.values() if t.kind == "webpush"][0].queue.values()
    assert sorted(i.msg["body"] for i in kept) == ["C7: n7", "C8: n8", "C9: n9"]  # the newest kept


async def test_nothing_queued_is_lost_across_a_restart(tmp_path, push_service):
    proc = BridgeProcess(str(tmp_path / "bridge"), config={"push": {"run_seconds": 0, "retry_seconds": 1,
                                                                    "retry_max_seconds": 1,
                                                                    "allow_insecure_endpoints": True}})
    proc.start()
    try:
        base = f"http://127.0.0.1:{proc.ports['lvmh']}"
        sub = push_service.subscribe("later")
        push_service.status["later"] = 503  # down for now
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as http:
            async with http.get(base + "/api/push/vapid") as r:
                push_service.vapid_key = (await r.json())["publicKey"]
            async with http.post(base + "/api/push/subscriptions", json={"endpoint": sub.endpoint, "keys": sub.keys}) as r:
                assert r.status == 200
            async with http.post(base + "/api/conversations", json={"name": "Overnight"}) as r:
                cid = (await r.json())["id"]
            async with http.post(base + f"/api/sessions/{cid}/prompt", json={"message": "long job"}) as r:
                assert r.status == 200
        await until(lambda: push_service.attempts, what="a first (refused) attempt")
        assert count_rows(proc.db_path(), "SELECT count(*) FROM push_queue") == 1  # on disk before it was sent
        proc.kill9()
        push_service.status["later"] = 201  # back up while the bridge is down
        proc.start()
        msgs = await until(lambda: push_service.messages("later"), timeout=20, what="the queued push after the restart")
        assert [(m["kind"], m["conversation_id"]) for m in msgs] == [("run_finished", cid)]
        assert push_service.errors == []
        await until(lambda: count_rows(proc.db_path(), "SELECT count(*) FROM push_queue") == 0, what="the queue emptied")
    finally:
        proc.stop()


async def test_a_decision_answered_before_its_push_left_is_neither_pushed_nor_withdrawn(push_bridge, rest_factory,
                                                                                        push_service):
    svc = await push_bridge(grace_seconds=0, retry_seconds=60)
    rest = rest_factory(svc)
    await rest.subscribe(push_service.subscribe("busy"))
    push_service.status["busy"] = 503  # the push service is busy: the approval waits in the queue
    cid = await rest.conversation("Busy")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls"})
        request = await pheby.recv_type("approval.request")
        await until(lambda: svc.notifier.deliveries.stats["retries"], what="the first attempt refused, a retry waiting")
        assert svc.notifier.deliveries.queued() == 1
        await pheby.send({"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once"})
        await pheby.recv_type("approval.resolved")
        assert svc.notifier.deliveries.queued() == 0  # the undelivered approval went, and no withdraw took its place
        await svc.bridge.store.aflush()
        assert svc.bridge.store.query("SELECT count(*) FROM push_queue") == [(0,)]
    finally:
        await pheby.close()
