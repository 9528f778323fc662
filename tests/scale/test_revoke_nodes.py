"""A revoke on one node reaches every node (docs/security.md, "a revoked phone"): two nodes of one
bridge (in one process, on a private PostgreSQL and Redis), a phone connected to node b revoked
through node a's loopback endpoint. Its socket on b closes at once (with b's heartbeat an hour
away: the relay did it), the decision URLs b sent it answer 410 on either node and change nothing,
and b pushes it nothing more; the phone beside it keeps its socket, its pushes and its URLs."""

from __future__ import annotations

import aiohttp
import pytest

from bridge_core.bridge.demo import DemoAgent
from cli.serve import Service
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.conftest import make_config
from tests.loomi.helpers import admin, base, new_token
from tests.push.conftest import decide, write_push_config
from tests.push.receivers import PushService
from tests.waiting import until


def _ws(svc) -> str:
    return f"ws://127.0.0.1:{svc.ports['loomi']}/ws"


@pytest.fixture
async def two_nodes(engines, tmp_path):
    store, bus = engines
    config = write_push_config(str(tmp_path / "push.toml"), {"grace_seconds": 0, "allow_insecure_endpoints": True})
    started = []
    for name in ("a", "b"):
        cfg = make_config(tmp_path / name, ("loomi", "lvmh"), store=store, bus=bus, node_id=name, config=config)
        svc = Service(cfg, DemoAgent())
        await svc.start()
        started.append(svc)
    service = await PushService().start()
    yield started, service
    await close_all()
    await service.stop()
    for svc in reversed(started):
        await svc.stop()


async def _register(app: LoomiApp, sub) -> None:
    ack = await app.request("push.register", {"endpoint": sub.endpoint, "keys": sub.keys})
    assert ack["payload"]["ok"] is True, ack


def _approval_to(service: PushService, name: str, decision_id: str):
    def found():
        got = [m for m in service.messages(name) if m["kind"] == "approval" and m["decision_id"] == decision_id]
        return got[0] if got else None

    return found


async def test_a_revoke_on_one_node_closes_the_device_and_voids_its_urls_on_every_node(two_nodes):
    (a, b), service = two_nodes
    b.frontends["loomi"].ping_interval = 3600.0  # no heartbeat will notice: only the revoke's relay can
    phone, kept = LoomiApp("Lost phone"), LoomiApp("Kept phone")
    await phone.pair(dict(await new_token(a), url=_ws(b)))
    await kept.pair(dict(await new_token(a), url=_ws(b)))
    service.vapid_key = b.notifier.public_key
    await _register(phone, service.subscribe("lost"))
    await _register(kept, service.subscribe("kept"))

    ack = await kept.request("session.send", {"text": "/approve make deploy"})  # a run on node b
    task, run = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
    request = await kept.wait_for("approval.required", task_id=task)
    decision = request["payload"]["approval_id"]
    lost_msg = await until(_approval_to(service, "lost", decision), what="the approval pushed to the lost phone")
    kept_msg = await until(_approval_to(service, "kept", decision), what="the approval pushed to the kept phone")

    async with aiohttp.ClientSession() as http:  # on node a, where the phone is not connected
        async with http.post(base(a) + "/internal/devices/revoke", json={"device_id": phone.device_id},
                             headers=admin(a)) as r:  # fmt: skip
            assert r.status == 200, await r.text()
    await phone.until(lambda: phone.close_code is not None)
    assert phone.close_code == 4004 and phone.find("error", code="revoked")

    # the URLs node b sent the lost phone: 410 on b (which issued them) and on a, and nothing changes
    for sent in (x["url"] for x in lost_msg["actions"]):
        for node in (b, a):
            lvmh = f"http://127.0.0.1:{node.ports['lvmh']}"
            url = lvmh + sent[sent.index("/api/push/decide/"):]
            status, body = await decide(url)
            assert (status, body.get("code")) == (410, "gone"), (node.cfg.node_id, status, body)
    assert not kept.find("approval.resolved", approval_id=decision)
    assert kept.connected

    # the kept phone's URL resolves it, on node a
    once = next(x["url"] for x in kept_msg["actions"] if x["action"] == "once")
    url = f"http://127.0.0.1:{a.ports['lvmh']}" + once[once.index("/api/push/decide/"):]
    assert await decide(url) == (200, {"ok": True})
    resolved = await kept.wait_for("approval.resolved", approval_id=decision)
    assert resolved["payload"]["surface"] == "push"
    await kept.wait_for("run.completed", run_id=run)

    # node b pushes the next approval to the kept phone only
    tried = len(service.attempts)
    await kept.request("session.send", {"text": "/approve make release", "task_id": task})
    second = (await kept.until(lambda: [f for f in kept.find("approval.required", task_id=task)
                                        if f["payload"]["approval_id"] != decision]))[0]  # fmt: skip
    await until(_approval_to(service, "kept", second["payload"]["approval_id"]), what="the next approval")
    await until(lambda: b.notifier.deliveries.queued() == 0, what="every push out")
    assert {name for name, _ in service.attempts[tried:]} == {"kept"}
    assert [s.owner for s in b.notifier.deliveries.subscriptions.values()] == [f"loomi:{kept.device_id}"]
