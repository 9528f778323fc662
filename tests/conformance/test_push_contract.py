"""The contract's "Push" section from a client author's side: the extension frames on Pheby and
Loomi, lvmh's push routes, the signed webhook and an approval answered through an action's URL.
Against ``agent-bridge serve`` as a subprocess; imports nothing of the project.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import os
import time

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from .conftest import LVMH_TOKEN, PHEBY_SECRET
from .loomi_client import LoomiApp, close_all

HOOK_SECRET = "conformance-webhook-secret-0123456789"


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


async def until(cond, timeout: float = 15.0):
    """Poll ``cond`` until it is truthy (a deadline, never a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not (value := cond()):
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        await asyncio.sleep(0.02)
    return value


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def subscription(endpoint: str) -> dict:
    key = ec.generate_private_key(ec.SECP256R1()).public_key()
    raw = key.public_bytes(serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint)
    return {"endpoint": endpoint, "keys": {"p256dh": b64(raw), "auth": b64(os.urandom(16))}}


async def pheby_request(ws, frame: dict) -> dict:
    await ws.send_str(json.dumps(frame))
    while True:
        got = json.loads((await ws.receive(timeout=10)).data)
        if got.get("request_id") == frame.get("request_id"):
            return got


async def test_the_extension_frames_and_lvmh_routes(server):
    sub = subscription("https://push.example.com/send/abc")
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(server.url("pheby", "/ws", scheme="ws"))
        await ws.send_str(json.dumps({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 1}))
        assert json.loads((await ws.receive(timeout=10)).data)["type"] == "ready"
        reg = await pheby_request(ws, {"type": "push.register", "request_id": "r1", **sub})
        assert reg["type"] == "push.registered" and reg["subscription_id"], reg
        unreg = await pheby_request(ws, {"type": "push.unregister", "request_id": "r2",
                                         "subscription_id": reg["subscription_id"]})
        assert (unreg["type"], unreg["subscription_id"]) == ("push.unregistered", reg["subscription_id"])
        await ws.close()

        bearer = {"Authorization": f"Bearer {LVMH_TOKEN}"}
        async with http.get(server.url("lvmh", "/api/push/vapid"), headers=bearer) as r:
            key = (await r.json())["publicKey"]
            assert r.status == 200 and len(base64.urlsafe_b64decode(key + "=")) == 65
        async with http.post(server.url("lvmh", "/api/push/subscriptions"), json=sub, headers=bearer) as r:
            assert r.status == 200
            sid = (await r.json())["id"]
        async with http.delete(server.url("lvmh", f"/api/push/subscriptions/{sid}"), headers=bearer) as r:
            assert r.status == 200
        async with http.get(server.url("lvmh", "/api/push/vapid")) as r:
            assert r.status == 401  # the bearer routes want the token
        async with http.post(server.url("lvmh", "/api/push/decide/" + "x" * 43)) as r:
            assert r.status == 410  # an unknown token: gone, nothing changes

    app = LoomiApp()
    await app.pair(server.pair_payload())
    ack = await app.request("push.register", sub)
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True
    sid = ack["payload"]["result"]["subscription_id"]
    ack = await app.request("push.unregister", {"subscription_id": sid})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True


async def test_a_signed_webhook_carries_actions_that_answer_the_approval(server_factory):
    received: list[dict] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        ts = request.headers["X-Agent-Bridge-Timestamp"]
        want = "sha256=" + hmac.new(HOOK_SECRET.encode(), f"{ts}.".encode() + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(request.headers["X-Agent-Bridge-Signature"], want)
        assert abs(time.time() - int(ts)) < 300
        received.append(json.loads(body))
        return web.Response(status=204)

    app_ = web.Application()
    app_.router.add_post("/hook", hook)
    runner = web.AppRunner(app_)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    try:
        server = server_factory(config=f'[push]\ngrace_seconds = 0\nwebhook_url = "http://127.0.0.1:{port}/hook"\n'
                                       f'webhook_secret = "{HOOK_SECRET}"\n')
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(server.url("pheby", "/ws", scheme="ws"))
            await ws.send_str(json.dumps({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 1}))
            await ws.receive(timeout=10)
            created = await pheby_request(ws, {"type": "conversation.create", "name": "Ops", "request_id": "c"})
            cid = created["conversation_id"]
            frames: list[dict] = []

            async def read() -> None:
                async for msg in ws:
                    frames.append(json.loads(msg.data))

            reader = asyncio.ensure_future(read())
            await ws.send_str(json.dumps({"type": "chat.send", "conversation_id": cid, "text": "/approve deploy"}))
            approval = await until(lambda: next((f for f in frames if f["type"] == "approval.request"), None))
            pushed = (await until(lambda: received))[0]
            assert (pushed["v"], pushed["kind"], pushed["conversation_id"]) == (1, "approval", cid)
            assert pushed["decision_id"] == approval["approval_id"] and pushed["url"]
            once = next(a for a in pushed["actions"] if a["action"] == "once")
            async with http.post(once["url"]) as r:
                assert (r.status, await r.json()) == (200, {"ok": True})
            f = await until(lambda: next((f for f in frames if f["type"] == "approval.resolved"), None))
            assert (f["approval_id"], f["choice"], f["surface"]) == (approval["approval_id"], "once", "push")
            async with http.post(once["url"]) as r:
                assert r.status == 410  # once
            await ws.close()
            await reader
    finally:
        await runner.cleanup()
