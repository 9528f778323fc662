"""Loomi §4/§5 requests from the app's side: every request with a request_id is answered, a repeated
request_id does nothing twice, approvals are first come first served, pending approvals never stay
pending when their run ends, and bad frames get an error without ending the session.
"""

from __future__ import annotations

import json

import aiohttp
import pytest

from .loomi_client import LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


SPEC_CHOICES = {"once", "session", "always", "deny"}
SPEC_DECIDED_BY = {"local", "remote", "timeout", "agent"}


def ws_url(server) -> str:
    return server.url("loomi", "/ws", scheme="ws")


async def paired(server, name: str = "Pixel 9") -> LoomiApp:
    app = LoomiApp(name)
    await app.pair(server.pair_payload())
    return app


async def still_serving(app: LoomiApp) -> None:
    n = len(app.pongs)
    await app.send("ping")
    await app.until(lambda: len(app.pongs) > n)
    assert app.connected


async def test_every_request_with_a_request_id_is_answered(server):
    app = await paired(server)
    # session.send without task_id: a new task; with it: the same task
    ack = await app.request("session.send", {"text": "hi"})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True
    task_id, run_id = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", run_id=run_id)
    again = await app.request("session.send", {"text": "again", "task_id": task_id})
    assert again["payload"]["result"]["task_id"] == task_id
    await app.wait_for("run.completed", run_id=again["payload"]["result"]["run_id"])

    listed = await app.request("task.list", {"limit": 10}, answer="task.list.result")
    assert listed["type"] == "task.list.result"
    tasks = listed["payload"]["tasks"]
    assert [t["task_id"] for t in tasks] == [task_id]
    assert {"task_id", "title", "status", "created_at", "updated_at", "preview", "source"} <= set(tasks[0])
    assert tasks[0]["status"] == "idle" and isinstance(tasks[0]["updated_at"], float)
    idle = await app.request("task.list", {"status_filter": "running"}, answer="task.list.result")
    assert idle["payload"]["tasks"] == []

    slow = await app.request("session.send", {"text": "/slow 5", "task_id": task_id})
    slow_run = slow["payload"]["result"]["run_id"]
    await app.wait_for("run.started", run_id=slow_run)
    paused = await app.request("run.pause", {"run_id": slow_run})
    assert paused["type"] == "ack" and paused["payload"]["ok"] is True
    assert (await app.wait_for("run.completed", run_id=slow_run))["payload"]["status"] == "cancelled"
    resumed = await app.request("run.resume", {"run_id": slow_run})  # "continue" in the same task
    assert resumed["type"] == "ack" and resumed["payload"]["result"]["task_id"] == task_id
    new_run = resumed["payload"]["result"]["run_id"]
    assert new_run != slow_run
    await app.wait_for("run.completed", run_id=new_run)

    slow = await app.request("session.send", {"text": "/slow 5", "task_id": task_id})
    slow_run = slow["payload"]["result"]["run_id"]
    await app.wait_for("run.started", run_id=slow_run)
    cancelled = await app.request("run.cancel", {"run_id": slow_run})
    assert cancelled["type"] == "ack" and cancelled["payload"]["ok"] is True
    assert (await app.wait_for("run.completed", run_id=slow_run))["payload"]["status"] == "cancelled"

    # requests that cannot be done: an error with the request_id, the socket stays
    for type_, payload in [("run.cancel", {"run_id": "run_nope"}),
                           ("approval.resolve", {"approval_id": "nope", "choice": "once"}),
                           ("session.send", {"text": "x", "task_id": "task_nope"}),
                           ("session.send", {})]:
        err = await app.request(type_, payload)
        assert err["type"] == "error", err
        p = err["payload"]
        assert p["fatal"] is False and isinstance(p["code"], str) and p["code"] and p["message"]
    await still_serving(app)
    await app.disconnect()


async def test_a_repeated_request_id_returns_the_same_ack_and_does_nothing_twice(server):
    app = await paired(server)
    first = await app.request("session.send", {"text": "only once", "request_id": "send-1"})
    run_id = first["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", run_id=run_id)
    second = await app.request("session.send", {"text": "only once", "request_id": "send-1"})
    assert second["type"] == "ack" and second["payload"] == first["payload"]
    # one run, one user message: nothing ran again
    await still_serving(app)
    assert len(app.find("run.started")) == 1 and len(app.find("run.completed")) == 1
    listed = await app.request("task.list", {}, answer="task.list.result")
    assert len(listed["payload"]["tasks"]) == 1
    await app.disconnect()


async def test_the_last_256_request_ids_are_kept(server_factory):
    # 257 requests as fast as acks come back would outrun the spec's rate limit (100/s, bursts of 200)
    # and get rate_limited: this test is about the request-id cache, so the server allows more
    server = server_factory(config="[loomi]\nrate = 10000\nburst = 10000\n")
    app = await paired(server)
    acks = [await app.request("session.send", {"text": f"m{i}", "request_id": f"keep-{i}"}) for i in range(256)]
    assert all(a["type"] == "ack" for a in acks)
    first = acks[0]
    again = await app.request("session.send", {"text": "m0", "request_id": "keep-0"})
    assert again["payload"] == first["payload"]
    await app.until(lambda: len(app.find("run.completed")) == 256, timeout=60)
    assert len(app.find("run.started")) == 256  # the repeat started nothing
    await app.disconnect()


async def test_approvals_first_come_first_served_and_idempotent(server):
    a = await paired(server, "Phone A")
    b = await paired(server, "Phone B")
    ack = await a.request("session.send", {"text": "/approve make deploy"})
    run_id = ack["payload"]["result"]["run_id"]
    req_a = await a.wait_for("approval.required", run_id=run_id)
    req_b = await b.wait_for("approval.required", run_id=run_id)
    approval_id = req_a["payload"]["approval_id"]
    assert req_b["payload"]["approval_id"] == approval_id
    assert {c["choice"] for c in req_a["payload"]["choices"]} <= SPEC_CHOICES
    assert [n["type"] for n in a.notified] == ["approval.required"]

    first = await b.request("approval.resolve", {"approval_id": approval_id, "choice": "once",
                                                 "request_id": "approve-1"})
    assert first["type"] == "ack"
    repeat = await b.request("approval.resolve", {"approval_id": approval_id, "choice": "once",
                                                  "request_id": "approve-1"})
    assert repeat["type"] == "ack" and repeat["payload"] == first["payload"]
    late = await a.request("approval.resolve", {"approval_id": approval_id, "choice": "deny"})
    assert late["type"] == "error" and late["payload"]["code"] == "already_resolved"
    resolved = await a.wait_for("approval.resolved", approval_id=approval_id)
    assert resolved["payload"]["choice"] == "once"
    done = await a.wait_for("run.completed", run_id=run_id)
    assert done["payload"]["text"] == a.run_text(run_id) == "Ran: make deploy"
    tools = [f["type"] for f in a.events if f["type"].startswith("run.tool_") and f["payload"]["run_id"] == run_id]
    assert tools == ["run.tool_started", "run.tool_finished"]  # it ran once
    for app in (a, b):
        assert len(app.find("approval.resolved", approval_id=approval_id)) == 1
        await app.disconnect()


async def _ended_with_a_pending_approval(app: LoomiApp, end) -> None:
    ack = await app.request("session.send", {"text": "/approve rm -rf build"})
    run_id = ack["payload"]["result"]["run_id"]
    req = await app.wait_for("approval.required", run_id=run_id)
    approval_id = req["payload"]["approval_id"]
    await end(run_id)
    done = await app.wait_for("run.completed", run_id=run_id)
    assert done["payload"]["status"] in ("cancelled", "failed", "completed")
    # the pending approval is resolved, with a choice from the spec's set, exactly once
    resolved = await app.wait_for("approval.resolved", timeout=5, approval_id=approval_id)
    assert resolved["payload"]["choice"] in SPEC_CHOICES and resolved["payload"]["choice"] == "deny"
    late = await app.request("approval.resolve", {"approval_id": approval_id, "choice": "once"})
    assert late["type"] == "error" and late["payload"]["code"] == "already_resolved"
    assert not app.find("run.tool_started", run_id=run_id)  # never ran
    tasks = await app.request("task.list", {}, answer="task.list.result")
    assert all(t["status"] == "idle" for t in tasks["payload"]["tasks"])  # nothing left waiting
    await still_serving(app)
    assert len(app.find("approval.resolved", approval_id=approval_id)) == 1


async def test_cancel_with_a_pending_approval_resolves_it(server):
    app = await paired(server)

    async def cancel(run_id):
        ack = await app.request("run.cancel", {"run_id": run_id})
        assert ack["type"] == "ack"

    await _ended_with_a_pending_approval(app, cancel)
    await app.disconnect()


async def test_pause_with_a_pending_approval_resolves_it(server):
    app = await paired(server)

    async def pause(run_id):
        ack = await app.request("run.pause", {"run_id": run_id})
        assert ack["type"] == "ack"

    await _ended_with_a_pending_approval(app, pause)
    await app.disconnect()


async def test_an_approval_that_times_out_resolves_with_a_spec_choice(server_factory):
    server = server_factory(config="[demo]\napproval_timeout = 0.5\n")
    app = await paired(server)

    async def wait(run_id):
        return None

    await _ended_with_a_pending_approval(app, wait)
    resolved = app.find("approval.resolved")[0]
    assert resolved["payload"]["decided_by"] in SPEC_DECIDED_BY
    await app.disconnect()


async def test_malformed_frames_get_an_error_and_the_socket_keeps_serving(server):
    app = await paired(server)
    bad = [
        "{not json",
        "[1, 2, 3]",
        json.dumps({"v": 1, "payload": {}}),  # no type
        json.dumps({"v": 1, "type": "session.send", "payload": [1]}),
        json.dumps({"v": 1, "type": "session.send", "payload": {"text": 5, "request_id": "typed"}}),
        json.dumps({"v": 1, "type": "run.cancel", "payload": {"request_id": "no-run-id"}}),
        json.dumps({"v": 1, "type": "no.such.type", "payload": {"request_id": "unknown"}}),
        json.dumps({"v": 1, "type": "hello", "payload": {"token": "again"}}),
    ]
    for data in bad:
        n = len(app.find("error"))
        await app.send_raw(data)
        err = (await app.until(lambda: app.find("error")[n:]))[0]
        assert err["payload"]["fatal"] is False and err["payload"]["code"] and err["payload"]["message"], data
    rids = {e["payload"].get("request_id") for e in app.find("error")}
    assert {"typed", "no-run-id", "unknown"} <= rids  # an error answers its request by request_id
    await app.ws.send_bytes(b"\x00\x01")  # binary frames are reserved
    await app.until(lambda: len(app.find("error")) == len(bad) + 1)
    # unknown fields are ignored (§6): the request works
    ack = await app.request("session.send", {"text": "extra fields", "future_field": {"x": 1}})
    assert ack["type"] == "ack"
    await still_serving(app)
    await app.disconnect()


@pytest.mark.parametrize("size", [2 * 1024 * 1024 + 1, 6 * 1024 * 1024])
async def test_an_oversized_frame_gets_too_large_before_the_close(server, size):
    app = await paired(server)
    n = len(app.find("error"))
    padding = "a" * size
    try:
        await app.send_raw(json.dumps({"v": 1, "type": "ping", "payload": {"pad": padding}}))
    except (ConnectionError, OSError):
        pass  # the server may close before the whole frame is written
    await app.until(lambda: app.close_code is not None)
    errors = app.find("error")[n:]
    assert [e["payload"]["code"] for e in errors] == ["too_large"] and errors[0]["payload"]["fatal"] is True
    # 1009; a client still writing a much larger frame may see the reset (1006) of a socket that closed
    # with its frame unread, but always after the error
    assert app.close_code == 1009 or (size > 4 * 1024 * 1024 and app.close_code == 1006)
    # the device reconnects and goes on
    await app.connect(ws_url(server))
    await still_serving(app)
    await app.disconnect()


async def test_the_first_frame_must_be_hello(server):
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(ws_url(server)) as ws:
            await ws.send_str(json.dumps({"v": 1, "type": "ping", "payload": {}}))
            msg = await ws.receive(timeout=10)
            frame = json.loads(msg.data)
            assert frame["type"] == "error" and frame["payload"]["fatal"] is True
            closing = await ws.receive(timeout=10)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)


async def test_health(server):
    async with aiohttp.ClientSession() as http:
        async with http.get(server.url("loomi", "/health")) as r:
            assert r.status == 200 and await r.json() == {"ok": True, "v": 1}
