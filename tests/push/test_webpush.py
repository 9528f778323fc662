"""Web Push end to end: VAPID-signed, RFC 8291-encrypted messages to a loopback push service;
an approval answered from the notification resolves the run on every front end."""

from __future__ import annotations

import os
import stat

from lvmh_adapter.web import CSP
from tests.lvmh.helpers import Browser
from tests.loomi.helpers import pair
from tests.pheby.client import PhebyClient
from tests.push.conftest import decide
from tests.waiting import until


# the server -> client types of the Pheby spec's constants, and the bridge's documented extras
PHEBY_SERVER_TYPES = {
    "ready", "pong", "error", "conversation.snapshot", "conversation.created", "conversation.renamed",
    "conversation.updated", "conversation.deleted", "conversation.history", "run.accepted", "run.finished",
    "message.start", "message.delta", "message.complete", "tool.event", "approval.request", "approval.resolved",
    "clarify.request", "clarify.resolved", "attachment.added", "models.snapshot", "model.current", "model.changed",
    "reasoning.snapshot", "reasoning.changed", "yolo.snapshot", "yolo.changed",
}  # fmt: skip


async def _push(service, name, kind, after=0):
    def found():
        msgs = [m for m in service.messages(name)[after:] if m["kind"] == kind]
        return msgs[0] if msgs else None

    return await until(found, what=f"a {kind} push to {name}")


async def test_vapid_key_made_on_first_start_owner_only_and_kept(push_bridge, rest_factory, tmp_path):
    svc = await push_bridge()
    path = os.path.join(svc.cfg.data_dir, "secrets", "vapid_private.pem")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    key = await rest_factory(svc).vapid()
    assert len(key) == 87 and key.startswith("B")  # base64url of a 65-byte uncompressed P-256 point
    await svc.stop()
    again = await push_bridge(data_dir=tmp_path)
    assert await rest_factory(again).vapid() == key


async def test_an_approval_answered_from_the_notification_resolves_everywhere(push_bridge, rest_factory,
                                                                              push_service):
    svc = await push_bridge(grace_seconds=0.2)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    sub = push_service.subscribe("phone")
    await rest.subscribe(sub)
    cid = await rest.conversation("Deploy box")

    pheby = await PhebyClient.connect(svc.ports["pheby"])
    loomi, _ = await pair(svc)
    browser = await Browser(svc.ports["lvmh"]).open()
    try:
        await browser.subscribe(cid)
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve rm -rf build", "request_id": "r1"})
        request = await pheby.recv_type("approval.request")

        msg = await _push(push_service, "phone", "approval")
        assert not push_service.errors
        once, deny = msg["actions"]
        assert msg == {
            "v": 1, "kind": "approval", "conversation_id": cid, "title": "Approval needed",
            "body": "Deploy box: rm -rf build", "url": f"{rest.base}/#/s/{cid}",
            "decision_id": request["approval_id"], "actions": [once, deny],
        }  # fmt: skip
        assert (once["action"], once["title"], deny["action"], deny["title"]) == ("once", "Approve once", "deny", "Deny")
        assert once["url"].startswith(f"{rest.base}/api/push/decide/") and once["url"] != deny["url"]
        headers = push_service.received[0]["headers"]
        assert headers["Urgency"] == "high" and 0 < len(headers["Topic"]) <= 32

        assert await decide(once["url"]) == (200, {"ok": True})

        resolved = await pheby.recv_type("approval.resolved")
        assert (resolved["approval_id"], resolved["choice"], resolved["surface"]) == (request["approval_id"], "once", "push")
        finished = await pheby.recv_type("run.finished")
        assert finished["status"] == "completed"

        lr = await loomi.recv_type("approval.resolved")
        assert (lr["payload"]["choice"], lr["payload"]["surface"]) == ("once", "push")
        assert (await loomi.recv_type("run.completed"))["task_id"] == cid

        got = await browser.events_until(cid, lambda e: e["type"] == "approval_resolved")
        assert (got[-1]["choice"], got[-1]["surface"]) == ("once", "push")

        # the same token again, or the other choice's, changes nothing
        assert (await decide(once["url"]))[0] == 410
        assert (await decide(deny["url"]))[0] == 410

        withdraw = await _push(push_service, "phone", "withdraw")
        assert (withdraw["decision_id"], withdraw["conversation_id"]) == (request["approval_id"], cid)
        assert "actions" not in withdraw
        # a client that never registers sees only the spec's frames, push or not
        assert {f["type"] for f in pheby.frames} <= PHEBY_SERVER_TYPES
    finally:
        await pheby.close()
        await loomi.close()
        await browser.close()


async def test_no_push_for_a_decision_answered_within_the_grace_period(push_bridge, rest_factory, push_service):
    svc = await push_bridge(grace_seconds=60)
    rest = rest_factory(svc)
    await rest.subscribe(push_service.subscribe("phone"))
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        cid = await pheby.create("Quick")
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls"})
        request = await pheby.recv_type("approval.request")
        assert request["approval_id"] in svc.notifier.timers  # the grace timer is armed
        await pheby.send({"type": "approval.respond", "approval_id": request["approval_id"], "choice": "once"})
        await pheby.recv_type("approval.resolved")
        assert svc.notifier.timers == {} and svc.notifier.state.waiting == {}  # disarmed: it never fires
        assert svc.notifier.deliveries.queued() == 0 and push_service.attempts == []
    finally:
        await pheby.close()


async def test_a_finished_run_is_pushed_only_when_no_client_watched_it(push_bridge, rest_factory, push_service):
    svc = await push_bridge(run_seconds=0)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    await rest.subscribe(push_service.subscribe("phone"))
    watched = await rest.conversation("Watched")
    unwatched = await rest.conversation("Unwatched")

    pheby = await PhebyClient.connect(svc.ports["pheby"])  # a Pheby client sees every conversation
    await pheby.send({"type": "chat.send", "conversation_id": watched, "text": "seen"})
    await pheby.recv_type("run.finished")
    await pheby.close()
    await until(lambda: not svc.frontends["pheby"].conns, what="the Pheby client gone")

    await rest.prompt(unwatched, "/fail")
    first = await _push(push_service, "phone", "run_finished")
    # the queue is in order: had the watched run been pushed, it would have come first
    assert push_service.messages("phone") == [first]
    assert (first["conversation_id"], first["title"], first["body"]) == (unwatched, "Run failed", "Unwatched: demo failure")


async def test_a_notify_is_pushed_and_the_same_conversation_replaces_by_topic(push_bridge, rest_factory,
                                                                               push_service):
    svc = await push_bridge(run_seconds=3600)
    rest = rest_factory(svc)
    push_service.vapid_key = await rest.vapid()
    await rest.subscribe(push_service.subscribe("phone"))
    cid = await rest.conversation("Cron")
    await rest.prompt(cid, "/notify backup done")
    msg = await _push(push_service, "phone", "notify")
    assert (msg["conversation_id"], msg["body"]) == (cid, "Cron: backup done")
    other = await rest.conversation("Other")
    await rest.prompt(other, "/notify x")
    await _push(push_service, "phone", "notify", after=1)
    topics = [r["headers"]["Topic"] for r in push_service.received]
    assert topics[0] != topics[1]  # one Topic per conversation


async def test_a_subscription_answering_410_or_404_is_dropped(push_bridge, rest_factory, push_service):
    svc = await push_bridge(run_seconds=0)
    rest = rest_factory(svc)
    gone = await rest.subscribe(push_service.subscribe("gone"))
    missing = await rest.subscribe(push_service.subscribe("missing"))
    alive = await rest.subscribe(push_service.subscribe("alive"))
    push_service.status.update(gone=410, missing=404)
    cid = await rest.conversation("C")
    await rest.prompt(cid, "hello")
    await until(lambda: push_service.messages("alive"), what="the live subscription's push")
    await until(lambda: set(svc.notifier.deliveries.subscriptions) == {alive}, what="the dead subscriptions dropped")
    await until(lambda: svc.bridge.store.query("SELECT id FROM push_subscriptions") == [(alive,)],
                what="the dead subscriptions deleted from the store")
    for sid in (gone, missing):
        assert (await rest.call("DELETE", f"/api/push/subscriptions/{sid}"))[0] == 404
    assert await rest.call("DELETE", f"/api/push/subscriptions/{alive}") == (200, {"ok": True})


async def test_bad_subscriptions_are_refused_and_the_server_keeps_serving(push_bridge, rest_factory, push_service):
    svc = await push_bridge()
    rest = rest_factory(svc)
    sub = push_service.subscribe("phone")
    for body in (
        {"endpoint": "ftp://example.com/x", "keys": sub.keys},
        {"endpoint": "http://example.com/x", "keys": sub.keys},  # plain http only to loopback
        {"endpoint": sub.endpoint, "keys": {"p256dh": "AAAA", "auth": sub.keys["auth"]}},
        {"endpoint": sub.endpoint, "keys": {"p256dh": sub.keys["p256dh"], "auth": "AAAA"}},
        {"endpoint": sub.endpoint},
        [1, 2],
    ):
        status, answer = await rest.call("POST", "/api/push/subscriptions", body)
        assert status == 400 and answer["error"], (body, answer)
    first = await rest.subscribe(sub)
    assert await rest.subscribe(sub) == first  # the same endpoint again is the same subscription
    status, _ = await rest.call("GET", "/api/push/vapid")
    assert status == 200


async def test_the_service_worker_is_served_for_the_whole_page_with_its_csp(push_bridge, rest_factory):
    svc = await push_bridge(adapters=("lvmh",))
    rest = rest_factory(svc)
    async with rest.http.get(rest.base + "/sw.js", headers={"Authorization": ""}) as r:
        assert r.status == 200
        assert r.headers["Service-Worker-Allowed"] == "/"
        assert r.headers["Content-Security-Policy"] == CSP
        assert r.headers["Content-Type"].startswith("text/javascript")
        assert "notificationclick" in await r.text()
