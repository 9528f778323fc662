"""A revoked phone gets nothing and answers nothing (docs/security.md, "a revoked phone"), over real
sockets: revoked live, its open socket closes, the decision URLs it was sent answer 410 and change
nothing, and it is pushed nothing more; revoked while the bridge was down (the real CLI), or by a
version that left its subscriptions behind, it is pushed nothing after the restart. Beside it, a
phone that was not revoked gets every push and its URLs work."""

from __future__ import annotations

import os
import sqlite3

import aiohttp

from tests.loomi.helpers import admin, base, pair, resume
from tests.loomi.test_cli import cli
from tests.pheby.client import PhebyClient
from tests.push.conftest import decide
from tests.waiting import until


async def _register(phone, sub) -> str:
    ack = await phone.request("push.register", {"endpoint": sub.endpoint, "keys": sub.keys, "request_id": "push"})
    assert ack["payload"]["ok"] is True, ack
    return ack["payload"]["result"]["subscription_id"]


async def _pushed(push_service, name: str, decision_id: str) -> dict:
    def found():
        return [m for m in push_service.messages(name)
                if m.get("decision_id") == decision_id and m["kind"] == "approval"]

    return (await until(found, what=f"the approval pushed to {name}"))[0]


async def test_a_revoked_phone_is_pushed_nothing_and_its_decision_urls_change_nothing(push_bridge, rest_factory,
                                                                                     push_service):
    svc = await push_bridge(grace_seconds=0)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    revoked, hello = await pair(svc, "Lost phone")
    kept, _ = await pair(svc, "Kept phone")
    await _register(revoked, push_service.subscribe("revoked"))
    await _register(kept, push_service.subscribe("kept"))
    cid = await rest.conversation("Deploy box")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve make deploy"})
        request = await pheby.recv_type("approval.request")
        sent = {name: await _pushed(push_service, name, request["approval_id"]) for name in ("revoked", "kept")}
        urls = {name: {a["action"]: a["url"] for a in m["actions"]} for name, m in sent.items()}

        async with aiohttp.ClientSession() as http:
            async with http.post(base(svc) + "/internal/devices/revoke", json={"device_id": hello["device_id"]},
                                 headers=admin(svc)) as r:  # fmt: skip
                assert r.status == 200
        frames, code = await revoked.closed()
        assert code == 4004 and [f["payload"]["code"] for f in frames if f["type"] == "error"] == ["revoked"]

        # what the revoked phone was sent before the revoke answers 410 and changes nothing
        for url in urls["revoked"].values():
            status, body = await decide(url)
            assert (status, body.get("code")) == (410, "gone"), (status, body)
        assert request["approval_id"] in svc.bridge.decisions.approvals  # still waiting
        assert urls["revoked"]["once"] != urls["kept"]["once"]  # each endpoint was sent its own
        # the kept phone's URL resolves it, from a notification
        assert await decide(urls["kept"]["once"]) == (200, {"ok": True})
        resolved = await pheby.recv_type("approval.resolved")
        assert (resolved["approval_id"], resolved["choice"], resolved["surface"]) == (request["approval_id"], "once",
                                                                                      "push")
        await pheby.recv_type("run.finished")

        # the next approval reaches the kept phone, and nothing reaches the revoked one
        tried = len(push_service.attempts)
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve make release"})
        second = await pheby.recv_type("approval.request")
        again = await _pushed(push_service, "kept", second["approval_id"])
        await until(lambda: svc.notifier.deliveries.queued() == 0, what="every push out")
        assert [name for name, _ in push_service.attempts[tried:]] == ["kept"] * (len(push_service.attempts) - tried)
        assert await decide(next(a["url"] for a in again["actions"] if a["action"] == "deny")) == (200, {"ok": True})
        await svc.bridge.store.aflush()
        assert svc.bridge.store.query("SELECT count(*) FROM push_tokens WHERE owner=?",
                                      (f"loomi:{hello['device_id']}",)) == [(0,)]  # fmt: skip
    finally:
        await pheby.close()
        await kept.close()
        await revoked.close()


async def test_a_phone_revoked_while_the_bridge_was_down_is_pushed_nothing_after_the_restart(push_bridge, rest_factory,
                                                                                            push_service, tmp_path):
    svc = await push_bridge(grace_seconds=0)
    push_service.vapid_key = await rest_factory(svc).vapid()
    phones = {}
    for name in ("revoked-offline", "revoked-by-an-older-version", "kept"):
        phone, hello = await pair(svc, name)
        await _register(phone, push_service.subscribe(name))
        phones[name] = (phone, hello)
    await svc.stop()
    for phone, _ in phones.values():
        await phone.close()
    data_dir = svc.cfg.data_dir
    # no server running: the CLI revokes in the database
    rc, out, err = await cli("loomi", "revoke", phones["revoked-offline"][1]["device_id"], "--data-dir", data_dir)
    assert rc == 0, err
    # a revoke from a version that left the device's subscriptions behind: only its row went
    with sqlite3.connect(os.path.join(data_dir, "bridge.db")) as db:
        older = phones["revoked-by-an-older-version"][1]["device_id"]
        db.execute("DELETE FROM loomi_devices WHERE device_id=?", (older,))
    db.close()

    svc = await push_bridge(grace_seconds=0, data_dir=tmp_path)
    kept = phones["kept"][1]
    phone, ok = await resume(svc, kept)
    try:
        assert ok["type"] == "hello.ok", ok
        ack = await phone.request("session.send", {"text": "/approve ship it", "request_id": "s1"})
        task = ack["payload"]["result"]["task_id"]
        msg = (await until(lambda: push_service.messages("kept"), what="the approval pushed to the kept phone"))[0]
        assert (msg["kind"], msg["conversation_id"]) == ("approval", task)
        await until(lambda: svc.notifier.deliveries.queued() == 0, what="every push out")
        assert {name for name, _ in push_service.attempts} == {"kept"}
        await svc.bridge.store.aflush()
        owners = svc.bridge.store.query("SELECT owner FROM push_subscriptions")
        assert owners == [(f"loomi:{kept['device_id']}",)]
    finally:
        await phone.close()
