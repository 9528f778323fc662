"""Bad input gets the spec's error code with a clear message; the server keeps serving."""

from __future__ import annotations

import json

import aiohttp
import pytest

from tests.pheby.client import PhebyClient, strip_ts


@pytest.fixture
async def pheby(service_factory):
    return await service_factory(adapters=("pheby",))


@pytest.mark.parametrize(
    "raw, code",
    [
        ("not json", "invalid_json"),
        ("[1, 2]", "invalid_json"),
        ('"just a string"', "invalid_json"),
        ("{}", "invalid_json"),
        ('{"type": 5}', "invalid_json"),
        ('{"type": ""}', "invalid_json"),
        ('{"type": "teleport"}', "unknown_type"),
        ('{"type": "chat.send", "conversation_id": 5, "text": "x"}', "bad_request"),
        ('{"type": "chat.send", "text": "x"}', "bad_request"),
        ('{"type": "chat.send", "conversation_id": "c", "text": ["x"]}', "bad_request"),
        ('{"type": "conversation.open", "conversation_id": "c", "limit": "10"}', "bad_request"),
        ('{"type": "conversation.open", "conversation_id": "c", "limit": true}', "bad_request"),
        ('{"type": "conversation.open", "conversation_id": "c", "limit": -1}', "bad_request"),
        ('{"type": "approval.respond", "approval_id": "a"}', "bad_request"),
        ('{"type": "yolo.set", "enabled": 1}', "bad_request"),
        ('{"type": "conversation.create", "name": 7}', "bad_request"),
    ],
)
async def test_garbage_gets_error_and_server_keeps_serving(pheby, raw, code):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    await c.ws.send_str(raw)
    err = await c.recv()
    assert err["type"] == "error" and err["error"]["code"] == code, err
    assert 0 < len(err["error"]["message"]) <= 500
    assert "Traceback" not in err["error"]["message"]
    assert (await c.request({"type": "ping"}))["type"] == "pong"
    await c.close()


async def test_request_id_echoed_on_errors(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    err = await c.request({"type": "teleport", "request_id": "r1"})
    assert strip_ts(err) == {"type": "error", "request_id": "r1",
                             "error": {"code": "unknown_type", "message": "Unknown message type 'teleport'"}}
    err = await c.request({"type": "chat.send", "conversation_id": 5, "text": "x", "request_id": "r2"})
    assert strip_ts(err) == {"type": "error", "request_id": "r2",
                             "error": {"code": "bad_request", "message": "bad request: conversation_id: expected a string, got a number"}}
    # JSON's own names, never Python's: null is "null", not "NoneType"
    err = await c.request({"type": "conversation.open", "conversation_id": None, "request_id": "r3"})
    assert strip_ts(err) == {"type": "error", "request_id": "r3",
                             "error": {"code": "bad_request", "message": "bad request: conversation_id: expected a string, got null"}}
    await c.close()


async def test_text_over_limit_is_too_large(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    err = await c.request({"type": "chat.send", "conversation_id": cid, "text": "x" * 64_001, "request_id": "big"}, "error")
    assert err["error"]["code"] == "too_large" and err["request_id"] == "big"
    ok = await c.request({"type": "chat.send", "conversation_id": cid, "text": "y" * 64_000}, "run.accepted")
    assert ok["type"] == "run.accepted"
    await c.collect_until("run.finished")
    await c.close()


async def test_frame_over_2_mib_is_too_large_then_1009(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    await c.ws.send_str(json.dumps({"type": "ping", "pad": "x" * (2 * 1024 * 1024)}))
    err = await c.recv()
    assert err["type"] == "error" and err["error"]["code"] == "too_large"
    msg = await c.ws.receive(timeout=2)
    assert msg.type == aiohttp.WSMsgType.CLOSE and msg.data == 1009
    await c.close()
    # the server still serves new connections
    d = await PhebyClient.connect(pheby.ports["pheby"])
    assert (await d.request({"type": "ping"}))["type"] == "pong"
    await d.close()


async def test_binary_frame_is_invalid_json(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    await c.ws.send_bytes(b"\x00\x01")
    err = await c.recv()
    assert err["error"]["code"] == "invalid_json"
    assert (await c.request({"type": "ping"}))["type"] == "pong"
    await c.close()


async def test_rate_limited_burst_does_not_starve_others(pheby):
    fe = pheby.frontends["pheby"]
    noisy = await PhebyClient.connect(pheby.ports["pheby"])
    calm = await PhebyClient.connect(pheby.ports["pheby"])
    for i in range(1000):
        await noisy.ws.send_str('{"type":"conversation.list"}')
    codes = []
    for _ in range(1000):
        f = await noisy.recv()
        codes.append(f.get("error", {}).get("code") if f["type"] == "error" else f["type"])
    assert codes.count("rate_limited") > 0
    assert codes.count("conversation.snapshot") >= 200  # the burst allowance was served
    assert (await calm.request({"type": "ping"}))["type"] == "pong"
    assert fe.stats["rate_limited"] > 0
    await noisy.close()
    await calm.close()
