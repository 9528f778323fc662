"""The push extension frames on Pheby and Loomi, over real sockets, and that an app that
never sends them sees nothing new."""

from __future__ import annotations

import aiohttp

from tests.loomi.helpers import admin, base, pair
from tests.pheby.client import PhebyClient
from tests.waiting import until


async def test_pheby_push_register_and_unregister(push_bridge, push_service):
    svc = await push_bridge()
    sub = push_service.subscribe("pheby-phone")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        reply = await pheby.request({"type": "push.register", "endpoint": sub.endpoint, "keys": sub.keys,
                                     "request_id": "p1"}, "push.registered")
        sid = reply["subscription_id"]
        assert reply == {"type": "push.registered", "subscription_id": sid, "request_id": "p1"}
        assert svc.notifier.deliveries.subscriptions[sid].owner == "pheby"
        reply = await pheby.request({"type": "push.unregister", "subscription_id": sid, "request_id": "p2"},
                                    "push.unregistered")
        assert reply == {"type": "push.unregistered", "subscription_id": sid, "request_id": "p2"}
        assert svc.notifier.deliveries.subscriptions == {}
        # bad input: the spec's error codes, and the socket goes on
        err = await pheby.request({"type": "push.unregister", "subscription_id": sid, "request_id": "p3"},
                                  "push.unregistered")
        assert (err["type"], err["error"]["code"], err["request_id"]) == ("error", "not_found", "p3")
        err = await pheby.request({"type": "push.register", "endpoint": sub.endpoint, "keys": {"p256dh": "x"},
                                   "request_id": "p4"}, "push.registered")
        assert (err["type"], err["error"]["code"]) == ("error", "bad_request")
        err = await pheby.request({"type": "push.register", "endpoint": "ftp://x", "keys": sub.keys,
                                   "request_id": "p5"}, "push.registered")
        assert err["error"]["code"] == "bad_request" and "https://" in err["error"]["message"]
        assert (await pheby.request({"type": "ping", "request_id": "p6"}, "pong"))["type"] == "pong"
    finally:
        await pheby.close()


async def test_loomi_push_register_and_unregister(push_bridge, push_service):
    svc = await push_bridge()
    sub = push_service.subscribe("loomi-phone")
    loomi, _ = await pair(svc)
    try:
        ack = await loomi.request("push.register", {"endpoint": sub.endpoint, "keys": sub.keys, "request_id": "u1"})
        sid = ack["payload"]["result"]["subscription_id"]
        assert ack["payload"] == {"request_id": "u1", "ok": True, "result": {"subscription_id": sid}}
        assert svc.notifier.deliveries.subscriptions[sid].owner.startswith("loomi:")
        ack = await loomi.request("push.unregister", {"subscription_id": sid, "request_id": "u2"})
        assert ack["payload"]["ok"] is True
        err = await loomi.request("push.register", {"endpoint": sub.endpoint, "keys": {"auth": "x"},
                                                    "request_id": "u3"}, answer="error")
        assert (err["payload"]["code"], err["payload"]["fatal"]) == ("bad_request", False)
        err = await loomi.request("push.unregister", {"subscription_id": sid, "request_id": "u4"}, answer="error")
        assert err["payload"]["code"] == "not_found"
        tasks = await loomi.request("task.list", {"request_id": "u5"}, answer="task.list.result")
        assert tasks["payload"]["tasks"] == []
    finally:
        await loomi.close()


async def test_a_subscription_made_on_loomi_gets_pushes(push_bridge, rest_factory, push_service):
    svc = await push_bridge(grace_seconds=0)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    sub = push_service.subscribe("distributor")
    loomi, _ = await pair(svc)
    try:
        await loomi.request("push.register", {"endpoint": sub.endpoint, "keys": sub.keys, "request_id": "u1"})
        ack = await loomi.request("session.send", {"text": "/clarify Ship it?", "request_id": "u2"})
        task = ack["payload"]["result"]["task_id"]
        msgs = await until(lambda: push_service.messages("distributor"), what="the clarify push")
        assert (msgs[0]["kind"], msgs[0]["conversation_id"]) == ("clarify", task)
        assert msgs[0]["body"].endswith(": Ship it?") and "actions" not in msgs[0]
    finally:
        await loomi.close()


async def test_a_revoked_device_takes_its_push_subscriptions_with_it(push_bridge, push_service):
    svc = await push_bridge()
    loomi, hello = await pair(svc)
    try:
        sub = push_service.subscribe("revoked-phone")
        ack = await loomi.request("push.register", {"endpoint": sub.endpoint, "keys": sub.keys, "request_id": "u1"})
        sid = ack["payload"]["result"]["subscription_id"]
        async with aiohttp.ClientSession() as http:
            async with http.post(base(svc) + "/internal/devices/revoke", json={"device_id": hello["device_id"]},
                                 headers=admin(svc)) as r:
                assert r.status == 200
        assert sid not in svc.notifier.deliveries.subscriptions
        await until(lambda: svc.bridge.store.query("SELECT count(*) FROM push_subscriptions") == [(0,)],
                    what="the subscription deleted")
    finally:
        await loomi.close()
