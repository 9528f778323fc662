"""Loomi §1-§4 and §6 frame by frame: the envelope, every server event's payload, pairing and the
handshake's refusals, as an app sees them over a real socket.
"""

from __future__ import annotations

import base64
import json

import aiohttp
import pytest

from .loomi_client import HelloRefused, LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


# §4, server -> client: the payload fields the spec lists for each type
PAYLOADS = {
    "hello.ok": {"device_id", "server_name", "server_version", "protocol_version", "server_time", "truncated",
                 "home_channel"},
    "error": {"code", "message", "fatal"},
    "run.started": {"run_id", "task_id", "session_id", "surface", "model", "provider", "started_at", "title"},
    "run.delta": {"run_id", "text", "kind", "iteration"},
    "run.interim": {"run_id", "text", "already_streamed"},
    "run.tool_started": {"run_id", "iteration", "tool", "preview", "index", "call_id"},
    "run.tool_finished": {"run_id", "iteration", "tool", "ok", "index", "call_id", "duration"},
    "run.completed": {"run_id", "status", "text", "error", "finished"},
    "run.failed": {"run_id", "error", "status"},
    "approval.required": {"approval_id", "run_id", "task_id", "command", "description", "choices", "smart_denied",
                          "session_key_ref", "deadline_ts"},
    "approval.resolved": {"approval_id", "choice", "decided_by"},
    "notification": {"category", "title", "text", "source", "requires_attention"},
    "task.list.result": {"tasks"},
    "pong": set(),
    "ping": set(),
}


def ws_url(server) -> str:
    return server.url("loomi", "/ws", scheme="ws")


async def paired(server, name: str = "Pixel 9") -> LoomiApp:
    app = LoomiApp(name)
    await app.pair(server.pair_payload())
    return app


def check_envelope(f: dict) -> None:
    """§2: every frame has the envelope; timestamps are float epoch seconds (§1)."""
    assert f["v"] == 1
    assert isinstance(f["seq"], int) and f["event_id"] == f"e_{f['seq']}"
    assert isinstance(f["ts"], float) and isinstance(f["type"], str) and isinstance(f["payload"], dict)
    assert "task_id" in f and "run_id" in f
    assert f["task_id"] is None or isinstance(f["task_id"], str)
    assert f["run_id"] is None or isinstance(f["run_id"], str)
    if f["type"] in PAYLOADS:
        assert PAYLOADS[f["type"]] <= set(f["payload"]), (f["type"], f["payload"])


async def test_every_frame_has_the_envelope_and_every_event_its_payload(server):
    app = await paired(server)
    check_envelope(app.hellos[-1])
    ack = await app.request("session.send", {"text": "/tool grep"})
    task_id, run_id = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
    done = await app.wait_for("run.completed", run_id=run_id)
    assert done["payload"]["status"] == "completed" and done["payload"]["finished"] is True
    started = app.find("run.started", run_id=run_id)[0]
    assert started["task_id"] == started["payload"]["task_id"] == task_id and started["run_id"] == run_id
    assert isinstance(started["payload"]["started_at"], float)
    # §4: tool start and finish pair by index, and by call_id first
    st, fin = app.find("run.tool_started", run_id=run_id)[0], app.find("run.tool_finished", run_id=run_id)[0]
    assert (st["payload"]["call_id"], st["payload"]["index"]) == (fin["payload"]["call_id"], fin["payload"]["index"])
    assert fin["payload"]["ok"] is True and st["payload"]["tool"] == fin["payload"]["tool"] == "grep"
    assert all(d["payload"]["kind"] in ("text", "reasoning") for d in app.find("run.delta", run_id=run_id))

    ack = await app.request("session.send", {"text": "/fail", "task_id": task_id})
    failed_run = ack["payload"]["result"]["run_id"]
    failed = await app.wait_for("run.failed", run_id=failed_run)
    completed = app.find("run.completed", run_id=failed_run)[0]
    assert completed["payload"]["status"] == "failed" and completed["payload"]["error"]
    assert failed["payload"]["status"] == "failed" and failed["payload"]["error"] == completed["payload"]["error"]
    assert app.events.index(completed) < app.events.index(failed)

    ack = await app.request("session.send", {"text": "/approve ls", "task_id": task_id})
    approve_run = ack["payload"]["result"]["run_id"]
    req = await app.wait_for("approval.required", run_id=approve_run)
    assert isinstance(req["payload"]["deadline_ts"], float)
    assert all({"label", "choice", "style"} <= set(c) for c in req["payload"]["choices"])
    await app.request("approval.resolve", {"approval_id": req["payload"]["approval_id"], "choice": "deny"})
    resolved = await app.wait_for("approval.resolved", approval_id=req["payload"]["approval_id"])
    assert resolved["payload"]["choice"] == "deny" and resolved["payload"]["decided_by"] in (
        "local", "remote", "timeout", "agent")
    await app.wait_for("run.completed", run_id=approve_run)

    await app.request("session.send", {"text": "/notify nightly report ready", "task_id": task_id})
    note = await app.wait_for("notification", text="nightly report ready")
    assert note["payload"]["category"] in ("result", "diagnostic") and note["run_id"] is None
    assert isinstance(note["payload"]["requires_attention"], bool)

    listed = await app.request("task.list", {}, answer="task.list.result")
    await app.send("ping")
    await app.until(lambda: app.pongs)
    for f in app.events + app.pongs + [listed]:
        check_envelope(f)
    assert app.dropped == []


async def test_pairing_token_is_single_use_and_the_credential_is_32_bytes(server):
    qr = server.pair_payload()
    assert set(qr) == {"v", "url", "token", "name", "fp"} and qr["v"] == 1 and qr["url"].endswith("/ws")
    assert qr["url"].startswith("ws://127.0.0.1:")  # the default bind is loopback
    first = LoomiApp("First phone")
    await first.pair(server.pair_payload())
    # the source must be a new device: a pairing hello that also names a device is refused
    posing = LoomiApp("Posing")
    posing.url = qr["url"]
    with pytest.raises(HelloRefused):
        await posing.open_with({"protocol_version": 1, "token": qr["token"], "device_id": first.device_id,
                            "credential": first.credential})
    app = LoomiApp()
    ok = await app.pair(qr)  # the refused hello did not use the token up
    credential = ok["payload"]["credential"]
    assert len(base64.urlsafe_b64decode(credential + "=" * (-len(credential) % 4))) == 32
    thief = LoomiApp("Second scan")
    with pytest.raises(HelloRefused) as refused:
        await thief.pair(qr)
    assert refused.value.frame["payload"]["code"] == "unauthorized" and refused.value.frame["payload"]["fatal"]
    # the device logs in again with device_id + credential, and gets no new credential
    again = await app.connect()
    assert again["payload"]["device_id"] == app.device_id and "credential" not in again["payload"]


async def test_hello_refusals_are_fatal_errors_then_a_close(server):
    app = await paired(server)
    wrong = LoomiApp()
    wrong.url, wrong.device_id, wrong.credential = ws_url(server), app.device_id, "x" * 43
    with pytest.raises(HelloRefused) as refused:
        await wrong.connect()
    assert refused.value.frame["payload"]["code"] == "unauthorized" and refused.value.code is not None
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(ws_url(server)) as ws:
            await ws.send_str(json.dumps({"v": 1, "type": "hello", "payload": {
                "protocol_version": 2, "device_id": app.device_id, "credential": app.credential}}))
            frame = json.loads((await ws.receive(timeout=10)).data)
            assert frame["type"] == "error" and frame["payload"]["fatal"] is True
            assert frame["payload"]["code"] == "version_mismatch"
            assert (await ws.receive(timeout=10)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_an_unauthenticated_socket_is_closed(server_factory):
    server = server_factory(config="[loomi]\nhello_timeout = 0.3\n")  # the spec's bound is 10 s
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(ws_url(server)) as ws:
            frame = json.loads((await ws.receive(timeout=10)).data)
            assert frame["type"] == "error" and frame["payload"]["fatal"] is True
            assert (await ws.receive(timeout=10)).type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
