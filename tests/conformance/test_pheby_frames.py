"""Pheby: limits and malformed frames get the spec's error codes; the server keeps serving.

"Limits: chat text ≤ 64,000 chars; inbound WS frame ≤ 2 MiB (violations get
``too_large``)". Every error has one shape: ``{type: "error", request_id?,
error: {code, message}, ts}``.
"""

from __future__ import annotations

import json

from tests.conformance.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp

MIB = 1024 * 1024
CODES = {
    "unauthorized", "auth_timeout", "version_mismatch", "bad_request", "invalid_json", "unknown_type", "not_found",
    "conversation_not_found", "approval_not_found", "clarify_not_found", "too_large", "rate_limited", "run_active",
    "internal_error", "not_implemented",
}  # fmt: skip


async def connected(server) -> PhebyApp:
    app = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    await app.connect()
    return app


def assert_error(frame: dict, code: str, request_id=None) -> None:
    assert frame["type"] == "error", frame
    assert set(frame) <= {"type", "request_id", "error", "ts"} and "ts" in frame, frame
    assert frame["error"]["code"] == code and frame["error"]["code"] in CODES, frame
    assert isinstance(frame["error"]["message"], str) and 0 < len(frame["error"]["message"]) <= 500
    assert frame.get("request_id") == request_id, frame


def ping_of_size(size: int) -> str:
    """A valid ping frame of exactly ``size`` bytes."""
    head = '{"type": "ping", "pad": "'
    return head + "x" * (size - len(head) - 2) + '"}'


async def test_oversized_frames_get_too_large_then_1009(server):
    for size in (2 * MIB + 1, 4 * MIB + 1, 5 * MIB, 64 * MIB):
        await oversized(server, size)


async def oversized(server, size: int) -> None:
    app = await connected(server)
    try:
        since = len(app.conn_frames)
        try:
            await app.send_raw(ping_of_size(size))
        except ConnectionError:
            pass  # the server refuses it from its header and closes while the rest is still being sent
        err = await app.wait_frame(lambda f: f["type"] == "error", since=since)
        assert_error(err, "too_large")
        assert await app.wait_closed() == 1009
        # the server keeps serving
        again = await connected(server)
        assert (await again.request("ping"))["type"] == "pong"
        await again.close()
    finally:
        await app.close()


async def test_frame_of_exactly_2_mib_is_accepted(server):
    app = await connected(server)
    try:
        since = len(app.conn_frames)
        await app.send_raw(ping_of_size(2 * MIB))
        assert (await app.wait_frame(lambda f: True, since=since))["type"] == "pong"
    finally:
        await app.close()


async def test_oversized_first_frame_before_hello_gets_too_large(server):
    import aiohttp

    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.url("pheby", "/ws", "ws")) as ws:
            await ws.send_str(ping_of_size(3 * MIB))
            msg = await ws.receive(timeout=10)
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            assert_error(json.loads(msg.data), "too_large")
            msg = await ws.receive(timeout=10)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED) and ws.close_code == 1009


MALFORMED = [
    ("not json at all", "invalid_json"),
    ("[1, 2, 3]", "invalid_json"),
    ('"a string"', "invalid_json"),
    ('{"no_type": true}', "invalid_json"),
    ('{"type": 7}', "invalid_json"),
    ('{"type": ""}', "invalid_json"),
    ('{"type": "teleport"}', "unknown_type"),
    ('{"type": "message.edit", "message_id": "m1", "text": "x"}', "unknown_type"),  # not supported by design
    ('{"type": "message.delete", "message_id": "m1"}', "unknown_type"),
    ('{"type": "conversation.open"}', "bad_request"),
    ('{"type": "conversation.open", "conversation_id": 12}', "bad_request"),
    ('{"type": "chat.send", "conversation_id": "x", "text": ["hi"]}', "bad_request"),
    ('{"type": "reasoning.set", "effort": "galaxy-brain"}', "bad_request"),
    ('{"type": "approval.respond", "approval_id": "nope", "choice": "once"}', "approval_not_found"),
    ('{"type": "clarify.respond", "clarify_id": "nope", "response": "x"}', "clarify_not_found"),
    ('{"type": "conversation.open", "conversation_id": "0123456789abcdef0123456789abcdef"}', "conversation_not_found"),
    ('{"type": "run.cancel", "conversation_id": "0123456789abcdef0123456789abcdef", "run_id": "r"}',
     "conversation_not_found"),
]


async def test_malformed_frames_get_the_spec_error_and_the_socket_stays(server):
    app = await connected(server)
    try:
        for raw, code in MALFORMED:
            since = len(app.conn_frames)
            await app.send_raw(raw)
            err = await app.wait_frame(lambda f: True, since=since)
            assert err["type"] == "error" and err["error"]["code"] == code, (raw, err)
            assert_error(err, code)
            assert (await app.request("ping"))["type"] == "pong"  # still serving this socket
        since = len(app.conn_frames)
        await app.send_raw(b"\x00\x01binary")  # the protocol is JSON text frames
        assert_error(await app.wait_frame(lambda f: True, since=since), "invalid_json")
        assert (await app.request("ping"))["type"] == "pong"
    finally:
        await app.close()


async def test_errors_echo_the_request_id(server):
    app = await connected(server)
    try:
        err = await app.request("conversation.rename", conversation_id="0" * 32, name="x")
        assert_error(err, "conversation_not_found", err["request_id"])
        err = await app.request("warp.drive")
        assert_error(err, "unknown_type", err["request_id"])
        pong = await app.request("ping")
        assert pong["type"] == "pong" and pong["ts"].endswith("+00:00")
    finally:
        await app.close()


async def test_chat_text_limit(server):
    app = await connected(server)
    try:
        cid = await app.create("Long")
        err = await app.chat(cid, "x" * 64_001)
        assert_error(err, "too_large", err["request_id"])
        ok = await app.chat(cid, "y" * 64_000)
        assert ok["type"] == "run.accepted", ok
        await app.wait_until(lambda: ok["run_id"] in app.view(cid).finished)
        assert app.view(cid).transcript()[-1] == ("assistant", "Echo: " + "y" * 64_000)
    finally:
        await app.close()


async def test_stale_run_cancel_is_not_found(server):
    app = await connected(server)
    try:
        cid = await app.create("Idle")
        err = await app.request("run.cancel", conversation_id=cid, run_id="no-such-run")
        assert_error(err, "not_found", err["request_id"])
        done = await app.chat(cid, "hi")
        await app.wait_until(lambda: done["run_id"] in app.view(cid).finished)
        err = await app.request("run.cancel", conversation_id=cid, run_id=done["run_id"])
        assert_error(err, "not_found", err["request_id"])  # a finished run: stale
    finally:
        await app.close()


async def test_handshake_errors(server):
    import aiohttp

    async with aiohttp.ClientSession() as http:
        for hello, code in (
            ({"type": "hello", "secret": "wrong-secret-000000", "protocol_version": 1}, "unauthorized"),
            ({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 2}, "version_mismatch"),
            ({"type": "ping"}, "unauthorized"),
        ):
            async with http.ws_connect(server.url("pheby", "/ws", "ws")) as ws:
                await ws.send_str(json.dumps({**hello, "request_id": "h1"}))
                msg = await ws.receive(timeout=10)
                assert_error(json.loads(msg.data), code, "h1")
                msg = await ws.receive(timeout=10)
                assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
    app = await connected(server)  # a right hello still works (2 failures are under the lockout)
    ready = app.conn_frames[0]
    assert ready["type"] == "ready" and ready["protocol_version"] == 1 and ready["server"] == "pheby"
    assert ready["ts"].endswith("+00:00")
    await app.close()


async def test_hello_deadline(server_factory):
    import aiohttp

    server = server_factory(config="[pheby]\nhello_timeout = 0.5\n")  # the spec's 10 s, shortened
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(server.url("pheby", "/ws", "ws")) as ws:
            msg = await ws.receive(timeout=10)
            assert_error(json.loads(msg.data), "auth_timeout")
            msg = await ws.receive(timeout=10)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), msg
