"""Pheby handshake, auth, lockout and heartbeat over a real socket."""

from __future__ import annotations

import aiohttp
import pytest

from tests.pheby.client import PhebyClient, strip_ts


@pytest.fixture
async def pheby(service_factory):
    svc = await service_factory(adapters=("pheby",))
    return svc


async def test_hello_ready(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"], hello=False)
    await c.send({"type": "hello", "secret": "test-pheby-secret-0123456789", "protocol_version": 1, "request_id": "h1"})
    ready = await c.recv()
    assert strip_ts(ready) == {"type": "ready", "protocol_version": 1, "server": "pheby", "request_id": "h1"}
    assert ready["ts"].endswith("+00:00")
    pong = await c.request({"type": "ping"})
    assert strip_ts(pong) == {"type": "pong"}
    await c.close()


async def test_wrong_secret_unauthorized_and_closed(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"], hello=False)
    await c.send({"type": "hello", "secret": "nope", "protocol_version": 1, "request_id": "h"})
    err = await c.recv()
    assert strip_ts(err) == {"type": "error", "request_id": "h", "error": {"code": "unauthorized", "message": "Invalid secret"}}
    msg = await c.ws.receive(timeout=2)
    assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1008
    await c.close()


async def test_first_frame_must_be_hello(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"], hello=False)
    await c.send({"type": "conversation.list"})
    err = await c.recv()
    assert err["type"] == "error" and err["error"]["code"] == "unauthorized"
    msg = await c.ws.receive(timeout=2)
    assert msg.type == aiohttp.WSMsgType.CLOSE
    await c.close()


async def test_version_mismatch(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"], hello=False)
    await c.send({"type": "hello", "secret": "test-pheby-secret-0123456789", "protocol_version": 2})
    err = await c.recv()
    assert err["type"] == "error" and err["error"]["code"] == "version_mismatch"
    msg = await c.ws.receive(timeout=2)
    assert msg.type == aiohttp.WSMsgType.CLOSE
    await c.close()


async def test_auth_timeout(pheby):
    pheby.frontends["pheby"].hello_timeout = 0.3  # the spec's 10 s, shortened for the test
    c = await PhebyClient.connect(pheby.ports["pheby"], hello=False)
    err = await c.recv(timeout=3)
    assert strip_ts(err) == {"type": "error", "error": {"code": "auth_timeout", "message": "No hello within 10 seconds"}}
    msg = await c.ws.receive(timeout=2)
    assert msg.type == aiohttp.WSMsgType.CLOSE and msg.extra == "auth_timeout"
    await c.close()


async def test_lockout_after_five_failed_hellos(pheby):
    port = pheby.ports["pheby"]
    for _ in range(5):
        c = await PhebyClient.connect(port, hello=False)
        await c.send({"type": "hello", "secret": "guess", "protocol_version": 1})
        assert (await c.recv())["error"]["code"] == "unauthorized"
        await c.close()
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await s.ws_connect(f"http://127.0.0.1:{port}/ws")
        assert exc.value.status == 429
        # the lockout counts and refuses hellos only: a download with the right secret still works
        async with s.get(f"http://127.0.0.1:{port}/attachments/{'0' * 32}",
                         headers={"Authorization": "Bearer test-pheby-secret-0123456789"}) as r:
            assert r.status == 404


async def test_second_hello_is_bad_request(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    err = await c.request({"type": "hello", "secret": "x", "protocol_version": 1, "request_id": "again"})
    assert err["error"]["code"] == "bad_request" and err["request_id"] == "again"
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    await c.close()


async def test_ws_protocol_pings_answered(pheby):
    """aiohttp heartbeat: the server answers WebSocket protocol pings."""
    c = await PhebyClient.connect(pheby.ports["pheby"])
    await c.ws.ping(b"x")
    pong = await c.request({"type": "ping"})
    assert pong["type"] == "pong"
    await c.close()

