"""Decision tokens: one decision, one choice, once, until the decision resolves or expires."""

from __future__ import annotations

from tests.pheby.client import PhebyClient
from tests.push.conftest import WEBHOOK_SECRET, decide
from tests.waiting import until


async def _approval(pheby, cid, command):
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": f"/approve {command}"})
    return await pheby.recv_type("approval.request")


async def test_a_token_resolves_only_its_own_decision(push_bridge, rest_factory, webhook):
    svc = await push_bridge(grace_seconds=0, webhook_url=webhook.url, webhook_secret=WEBHOOK_SECRET)
    rest = rest_factory(svc)
    a, b = await rest.conversation("A"), await rest.conversation("B")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        ra = await _approval(pheby, a, "one")
        rb = await _approval(pheby, b, "two")
        pushed = await until(lambda: len(webhook.received) >= 2 and webhook.received, what="two approvals pushed")
        by_decision = {m["decision_id"]: m for m in pushed}
        token_a = by_decision[ra["approval_id"]]["actions"][0]["url"]
        assert await decide(token_a) == (200, {"ok": True})
        resolved = await pheby.recv_type("approval.resolved")
        assert resolved["approval_id"] == ra["approval_id"]
        history = await pheby.request({"type": "conversation.open", "conversation_id": b, "request_id": "h"},
                                      "conversation.history")
        assert [x["approval_id"] for x in history["approvals"]] == [rb["approval_id"]]  # B still waits
        assert (await decide(token_a))[0] == 410
        assert rb["approval_id"] in svc.bridge.decisions.approvals
    finally:
        await pheby.close()


async def test_a_token_after_its_decision_timed_out_is_refused(push_bridge, rest_factory, webhook):
    svc = await push_bridge(grace_seconds=0, webhook_url=webhook.url, webhook_secret=WEBHOOK_SECRET,
                            approval_timeout=1.0)
    rest = rest_factory(svc)
    cid = await rest.conversation("Slow human")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        request = await _approval(pheby, cid, "wait")
        msg = (await until(lambda: webhook.received, what="the approval pushed"))[0]
        resolved = await pheby.recv_type("approval.resolved", timeout=10)
        assert (resolved["approval_id"], resolved["decided_by"]) == (request["approval_id"], "timeout")
        frames_before = len(pheby.frames)
        for action in msg["actions"]:
            status, body = await decide(action["url"])
            assert status == 410 and body["code"] == "gone"
        await svc.bridge.store.aflush()
        assert svc.bridge.store.query("SELECT count(*) FROM push_tokens") == [(0,)]
        ping = await pheby.request({"type": "ping", "request_id": "x"}, "pong")
        assert ping["type"] == "pong"
        assert not [f for f in pheby.frames[frames_before:] if f["type"].startswith("approval")]
    finally:
        await pheby.close()


async def test_unknown_and_malformed_tokens_are_410(push_bridge, rest_factory):
    svc = await push_bridge()
    base = rest_factory(svc).base
    for token in ("x", "A" * 32, "-_-_", "t" * 500):
        status, body = await decide(f"{base}/api/push/decide/{token}")
        assert status == 410 and body["code"] == "gone"
    # the token is the only credential there: the bearer routes still want theirs
    status, _ = await decide(f"{base}/api/push/vapid")
    assert status in (401, 405)


async def test_a_token_is_found_in_the_store_by_a_node_that_did_not_issue_it(push_bridge, rest_factory, webhook):
    svc = await push_bridge(grace_seconds=0, webhook_url=webhook.url, webhook_secret=WEBHOOK_SECRET)
    rest = rest_factory(svc)
    cid = await rest.conversation("Shared store")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        request = await _approval(pheby, cid, "deploy")
        msg = (await until(lambda: webhook.received, what="the approval pushed"))[0]
        await svc.bridge.store.aflush()  # the store alone knows a token, whichever node issued it
        assert await decide(msg["actions"][0]["url"]) == (200, {"ok": True})
        resolved = await pheby.recv_type("approval.resolved")
        assert (resolved["approval_id"], resolved["surface"]) == (request["approval_id"], "push")
        await svc.bridge.store.aflush()
        assert svc.bridge.store.query("SELECT count(*) FROM push_tokens") == [(0,)]
        assert (await decide(msg["actions"][1]["url"]))[0] == 410
    finally:
        await pheby.close()
