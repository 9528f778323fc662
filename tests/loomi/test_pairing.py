"""Pairing, device identity and the handshake, over real sockets."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import time

import aiohttp
import pytest

from tests.forged import forged
from tests.waiting import until

from .helpers import Client, admin, base, new_token, pair, resume


async def test_health_is_exact(loomi):
    async with aiohttp.ClientSession() as http:
        async with http.get(base(loomi) + "/health") as r:
            assert r.status == 200
            assert await r.read() == b'{"ok":true,"v":1}'
            assert r.content_type == "application/json"


async def test_pair_payload_and_hello_ok(loomi):
    qr = await new_token(loomi)
    assert list(qr) == ["v", "url", "token", "name", "fp"]
    assert qr["v"] == 1 and qr["fp"] == "" and qr["url"] == f"ws://127.0.0.1:{loomi.ports['loomi']}/ws"
    c = await Client.connect(loomi)
    ok = await c.hello(token=qr["token"])
    assert ok["type"] == "hello.ok"
    assert ok["v"] == 1 and ok["seq"] == 0 and ok["event_id"] == "e_0"  # a new device has seen nothing
    assert ok["task_id"] is None and ok["run_id"] is None and isinstance(ok["ts"], float)
    p = ok["payload"]
    assert set(p) == {"device_id", "credential", "server_name", "server_version", "protocol_version",
                      "server_time", "truncated", "home_channel"}
    assert p["protocol_version"] == 1 and p["truncated"] is False
    assert abs(p["server_time"] - time.time()) < 60
    assert len(base64.urlsafe_b64decode(p["credential"] + "=")) == 32
    # the store keeps hashes only
    rows = loomi.bridge.store.query("SELECT device_id, credential_hash FROM loomi_devices")
    assert rows == [(p["device_id"], hashlib.sha256(p["credential"].encode()).hexdigest())]
    await c.close()
    # later hellos carry device_id + credential, and no new credential comes back
    c2, ok2 = await resume(loomi, p, last_seq=0)
    assert ok2["type"] == "hello.ok" and ok2["payload"]["device_id"] == p["device_id"]
    assert "credential" not in ok2["payload"] and ok2["seq"] == 0
    await c2.close()


async def test_token_is_single_use(loomi):
    qr = await new_token(loomi)
    c1 = await Client.connect(loomi)
    assert (await c1.hello(token=qr["token"]))["type"] == "hello.ok"
    c2 = await Client.connect(loomi)
    err = await c2.hello(token=qr["token"])
    assert err["type"] == "error" and err["seq"] == 0
    assert err["payload"] == {"code": "unauthorized", "message": "Invalid or expired pairing token", "fatal": True}
    _, close = await c2.closed()
    assert close == 4001
    assert len(loomi.frontends["loomi"].registry.devices) == 1
    await c1.close()
    await c2.close()


async def test_fifty_concurrent_hellos_with_one_token_make_one_device(loomi):
    qr = await new_token(loomi)
    clients = await asyncio.gather(*(Client.connect(loomi) for _ in range(50)))
    answers = await asyncio.gather(*(c.hello(token=qr["token"]) for c in clients))
    oks = [a for a in answers if a["type"] == "hello.ok"]
    assert len(oks) == 1
    assert all(a["type"] == "error" and a["payload"]["fatal"] for a in answers if a["type"] != "hello.ok")
    assert len(loomi.frontends["loomi"].registry.devices) == 1
    assert loomi.bridge.store.query("SELECT count(*) FROM loomi_devices") == [(1,)]
    await asyncio.gather(*(c.close() for c in clients))


async def test_token_expires(loomi):
    async with aiohttp.ClientSession() as http:
        async with http.post(base(loomi) + "/internal/pair/new", json={"ttl": 0.2}, headers=admin(loomi)) as r:
            assert r.status == 200, await r.text()
            issued = await r.json()
    qr = issued["payload"]
    # the condition the registry checks (expires_at is on its clock), not a guessed margin
    await until(lambda: time.time() > issued["expires_at"], what="the pairing token's expiry")
    c = await Client.connect(loomi)
    err = await c.hello(token=qr["token"])
    assert err["type"] == "error" and err["payload"]["code"] == "unauthorized"
    _, close = await c.closed()
    assert close == 4001
    await c.close()


async def test_tokens_are_stored_hashed(loomi):
    qr = await new_token(loomi)
    rows = loomi.bridge.store.query("SELECT token_hash FROM loomi_pair_tokens")
    assert rows == [(hashlib.sha256(qr["token"].encode()).hexdigest(),)]


@pytest.mark.parametrize(
    "hello",
    [
        {"token": "not-a-token"},
        {"device_id": "0" * 32, "credential": "x" * 43},
        {},
        {"token": "", "device_id": "abc"},
    ],
)
async def test_bad_hellos_are_refused_and_closed(loomi, hello):
    c = await Client.connect(loomi)
    err = await c.hello(**hello)
    assert err["type"] == "error" and err["payload"]["code"] == "unauthorized" and err["payload"]["fatal"] is True
    _, close = await c.closed()
    assert close == 4001
    await c.close()


async def test_wrong_credential_for_a_real_device(loomi):
    c, creds = await pair(loomi)
    await c.close()
    c2, err = await resume(loomi, {"device_id": creds["device_id"], "credential": forged(creds["credential"])})
    assert err["type"] == "error" and err["payload"]["code"] == "unauthorized"
    await c2.close()


async def test_version_mismatch(loomi):
    qr = await new_token(loomi)
    c = await Client.connect(loomi)
    err = await c.hello(token=qr["token"], protocol_version=2)
    assert err["payload"]["code"] == "version_mismatch" and err["payload"]["fatal"] is True
    _, close = await c.closed()
    assert close == 4003
    await c.close()


async def test_first_frame_must_be_hello(loomi):
    c = await Client.connect(loomi)
    await c.send("ping")
    err = await c.recv()
    assert err["type"] == "error" and err["payload"]["code"] == "unauthorized" and err["payload"]["fatal"]
    _, close = await c.closed()
    assert close == 4001
    await c.close()


async def test_unauthenticated_socket_is_closed_by_its_deadline(loomi):
    assert loomi.frontends["loomi"].hello_timeout == 9.0  # + at most 0.3 s flush and 0.5 s close: gone by 10 s
    loomi.frontends["loomi"].hello_timeout = 0.2
    c = await Client.connect(loomi)
    frames, close = await c.closed()
    assert [f["payload"]["code"] for f in frames] == ["auth_timeout"]
    assert close == 4002
    await c.close()


async def test_failed_hellos_never_lock_out_a_valid_token_or_credential(loomi):
    """Wrong hellos are slowed per address, never a lockout: the right token and credential still pass."""
    c, creds = await pair(loomi)
    await c.close()
    for _ in range(8):
        c = await Client.connect(loomi)
        assert (await c.hello(token="wrong"))["payload"]["code"] == "unauthorized"
        _, close = await c.closed()
        assert close == 4001
        await c.close()
    for _ in range(3):
        c = await Client.connect(loomi)
        assert (await c.hello(device_id=creds["device_id"], credential="wrong-" * 8))["payload"]["code"] == "unauthorized"
        await c.close()
    fe = loomi.frontends["loomi"]
    assert fe.limiter.wrong_total == 11  # each one waited for its address's slot
    c2, ok = await resume(loomi, creds)  # the valid credential: served at once
    assert ok["type"] == "hello.ok"
    await c2.close()
    c3, _ = await pair(loomi)  # a valid pairing token too
    await c3.close()


def test_internal_endpoints_judge_the_socket_peer_never_a_header():
    from bridge_core.kit.security import loopback_refusal

    key = "k" * 43
    ok = {"Host": "127.0.0.1:8621", "Authorization": f"Bearer {key}"}
    for peer in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"):
        assert loopback_refusal(peer, ok, key) is None
    for host in ("localhost", "LOCALHOST:1", "[::1]:8621", "127.0.0.1"):
        assert loopback_refusal("127.0.0.1", dict(ok, Host=host), key) is None
    assert loopback_refusal("10.0.0.5", ok, key)
    assert loopback_refusal("192.168.1.20", dict(ok, **{"X-Forwarded-For": "127.0.0.1"}), key)
    assert loopback_refusal("::ffff:10.0.0.5", dict(ok, **{"X-Real-IP": "127.0.0.1"}), key)
    assert loopback_refusal("unknown", ok, key)
    # a reverse proxy on this host makes every peer loopback: forwarded requests are refused
    for h in ("X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "X-Real-IP", "Forwarded", "Via"):
        refused = loopback_refusal("127.0.0.1", dict(ok, **{h: "203.0.113.9"}), key)
        assert refused is not None and refused[1] is False
    # DNS rebinding: a foreign Host, any Origin (null included)
    for host in ("rebind.evil.example:8621", "127.0.0.2", "0.0.0.0:8621", "localhost.evil.example", "", "::1"):
        assert loopback_refusal("127.0.0.1", dict(ok, Host=host), key)
    for origin in ("http://rebind.evil.example:8621", "null", "", "http://127.0.0.1:8621"):
        assert loopback_refusal("127.0.0.1", dict(ok, Origin=origin), key)
    # the admin key: missing or wrong (only a wrong key counts as a guess)
    assert loopback_refusal("127.0.0.1", {"Host": "127.0.0.1"}, key)[1] is False
    assert loopback_refusal("127.0.0.1", dict(ok, Authorization="Basic " + key), key)[1] is False
    assert loopback_refusal("127.0.0.1", dict(ok, Authorization="Bearer " + key[:-1]), key) == ("wrong admin key", True)
    assert loopback_refusal("127.0.0.1", ok, "") is not None  # no key configured: nothing passes


async def test_internal_endpoints_over_loopback(loomi):
    key = admin(loomi)
    async with aiohttp.ClientSession() as http:
        async with http.post(base(loomi) + "/internal/pair/new", json={"ttl": 60}, headers=key) as r:
            assert r.status == 200
            body = await r.json()
            assert abs(body["expires_at"] - (time.time() + 60)) < 30
        async with http.post(base(loomi) + "/internal/pair/new", headers={"X-Forwarded-For": "127.0.0.1", **key}) as r:
            assert r.status == 403
        async with http.get(base(loomi) + "/internal/devices", headers={"X-Forwarded-For": "10.1.1.1", **key}) as r:
            assert r.status == 403
        async with http.get(base(loomi) + "/internal/devices") as r:  # no admin key
            assert r.status == 403 and (await r.json())["error"]["code"] == "forbidden"
        async with http.post(base(loomi) + "/internal/pair/new", json={"ttl": -1}, headers=key) as r:
            assert r.status == 400
        async with http.get(base(loomi) + "/internal/devices", headers=key) as r:
            assert r.status == 200 and (await r.json()) == {"devices": []}

