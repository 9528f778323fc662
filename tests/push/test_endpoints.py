"""Who may be pushed (docs/security.md, "a hostile push endpoint"), over lvmh's REST route: a Web
Push endpoint is ``https://``; plain ``http://`` only with ``[push] allow_insecure_endpoints`` and
only to a loopback address, read as an address (``127.attacker.example`` is a name). A
subscription kept under the older rule is dropped at start; a loopback one, allowed, is pushed."""

from __future__ import annotations

import os
import sqlite3

from tests.push.conftest import Rest
from tests.waiting import until


async def _subscribe(rest: Rest, endpoint: str, keys: dict) -> tuple[int, dict]:
    return await rest.call("POST", "/api/push/subscriptions", {"endpoint": endpoint, "keys": keys})


async def test_plain_http_only_when_allowed_and_only_to_a_loopback_address(push_bridge, rest_factory, push_service,
                                                                            tmp_path):
    sub = push_service.subscribe("local")
    port = push_service.port
    named = f"http://127.attacker.example:{port}/push/local"  # a name that merely starts like a loopback address
    svc = await push_bridge(grace_seconds=0, allow_insecure_endpoints=False)
    rest = rest_factory(svc)
    for endpoint in (named, f"http://localhost:{port}/push/local", f"http://127.0.0.1:{port}/push/local"):
        status, body = await _subscribe(rest, endpoint, sub.keys)
        assert (status, body.get("code")) == (400, "bad_request"), (endpoint, status, body)
        assert "https://" in body["error"]
    status, body = await _subscribe(rest, "https://push.example.com/send/abc", sub.keys)  # https: any host
    assert status == 200, body
    assert await rest.call("DELETE", f"/api/push/subscriptions/{body['id']}") == (200, {"ok": True})  # never reached
    await svc.stop()

    # allowed (tests): the loopback address is taken and pushed; the name still is not
    svc = await push_bridge(grace_seconds=0, data_dir=tmp_path)  # allow_insecure_endpoints = true
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    status, body = await _subscribe(rest, named, sub.keys)
    assert (status, body.get("code")) == (400, "bad_request"), body
    status, body = await _subscribe(rest, sub.endpoint, sub.keys)  # http://127.0.0.1:<port>/push/local
    assert status == 200, body
    cid = await rest.conversation("Local")
    await rest.prompt(cid, "/notify hello")
    msg = (await until(lambda: push_service.messages("local"), what="the push to the loopback endpoint"))[0]
    assert (msg["kind"], msg["conversation_id"]) == ("notify", cid)
    await svc.stop()

    # a subscription an older version took by the host's text: dropped at start, never pushed
    with sqlite3.connect(os.path.join(svc.cfg.data_dir, "bridge.db")) as db:
        db.execute("INSERT INTO push_subscriptions(id, endpoint, p256dh, auth, owner, created_at) "
                   "VALUES('ps_old', ?, ?, ?, 'lvmh', 0)", (named, sub.keys["p256dh"], sub.keys["auth"]))  # fmt: skip
    db.close()
    svc = await push_bridge(grace_seconds=0, data_dir=tmp_path)
    assert "ps_old" not in svc.notifier.deliveries.subscriptions
    await svc.bridge.store.aflush()
    endpoints = {e for (e,) in svc.bridge.store.query("SELECT endpoint FROM push_subscriptions")}
    assert endpoints == {sub.endpoint}
