"""ntfy and the signed webhook end to end, against loopback receivers."""

from __future__ import annotations

import pytest

from bridge_core.kit.config import parse_push
from bridge_core.model.errors import ConfigError
from tests.pheby.client import PhebyClient
from tests.push.conftest import WEBHOOK_SECRET, decide
from tests.push.receivers import parse_actions
from tests.waiting import until


async def test_ntfy_gets_the_title_and_the_conversation_name_and_actions_that_work(push_bridge, rest_factory, ntfy):
    svc = await push_bridge(grace_seconds=0, ntfy_url=ntfy.url, ntfy_token="tk_ntfy_0123456789")
    rest = rest_factory(svc)
    cid = await rest.conversation("Server room")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve reboot --now"})
        request = await pheby.recv_type("approval.request")
        got = await until(lambda: ntfy.received, what="an ntfy publish")
        pub = got[0]
        h = pub["headers"]
        assert pub["topic"] == "agent"
        assert h["Title"] == "Approval needed"
        assert h["Click"] == f"{rest.base}/#/s/{cid}"
        assert h["Authorization"] == "Bearer tk_ntfy_0123456789"
        assert pub["body"] == "Server room"  # not the command: the ntfy server reads what it relays
        assert "reboot" not in str(h)
        once, deny = parse_actions(h["Actions"])
        assert (once["type"], once["label"], once["method"]) == ("http", "Approve once", "POST")
        assert deny["label"] == "Deny"
        assert await decide(deny["url"]) == (200, {"ok": True})
        resolved = await pheby.recv_type("approval.resolved")
        assert (resolved["approval_id"], resolved["choice"], resolved["surface"]) == (request["approval_id"], "deny", "push")
        assert (await decide(once["url"]))[0] == 410
    finally:
        await pheby.close()


async def test_ntfy_full_text_sends_the_body(push_bridge, rest_factory, ntfy):
    svc = await push_bridge(grace_seconds=0, ntfy_url=ntfy.url, ntfy_full_text=True)
    rest = rest_factory(svc)
    cid = await rest.conversation("Lab")
    await rest.prompt(cid, "/clarify Which branch?")
    pub = (await until(lambda: ntfy.received, what="an ntfy publish"))[0]
    assert pub["headers"]["Title"] == "The agent asks"
    assert pub["body"] == "Lab: Which branch?"
    assert "Authorization" not in pub["headers"] and "Actions" not in pub["headers"]  # a question has no actions


async def test_webhook_is_signed_and_a_decision_answered_elsewhere_is_withdrawn(push_bridge, rest_factory, webhook):
    svc = await push_bridge(grace_seconds=0, webhook_url=webhook.url, webhook_secret=WEBHOOK_SECRET)
    rest = rest_factory(svc)
    cid = await rest.conversation("Home")
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    try:
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve open garage"})
        request = await pheby.recv_type("approval.request")
        first = (await until(lambda: webhook.received, what="the webhook's approval"))[0]
        assert (first["kind"], first["decision_id"]) == ("approval", request["approval_id"])
        assert first["body"] == "Home: open garage"
        assert [a["action"] for a in first["actions"]] == ["once", "deny"]
        # answered on Pheby: the pushed decision is withdrawn, and its tokens are void
        await pheby.send({"type": "approval.respond", "approval_id": request["approval_id"], "choice": "deny"})
        await pheby.recv_type("approval.resolved")
        withdraw = (await until(lambda: webhook.received[1:], what="the withdraw"))[0]
        assert (withdraw["kind"], withdraw["decision_id"]) == ("withdraw", request["approval_id"])
        assert withdraw["conversation_id"] == cid
        assert (await decide(first["actions"][0]["url"]))[0] == 410
        assert webhook.refused == [] and len(webhook.received) == 2  # one push per decision, one withdraw
    finally:
        await pheby.close()


def test_push_config_is_checked():
    with pytest.raises(ConfigError, match="webhook_secret"):
        parse_push({"webhook_url": "https://hooks.example.com/x", "webhook_secret": "short"})
    with pytest.raises(ConfigError, match="push.grace_seconds"):
        parse_push({"grace_seconds": "soon"})
    with pytest.raises(ConfigError, match="unknown key push.nope"):
        parse_push({"nope": 1})
    assert parse_push({"grace_seconds": 2}).grace_seconds == 2.0
