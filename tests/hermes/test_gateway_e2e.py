"""The real Hermes agent (hermes-agent 0.19.0) hosting agent-bridge, driven through Pheby and Loomi.

One ``hermes gateway run`` for the module (fixture ``hermes_gateway``) with
the agent-bridge plugin and the Pheby and Loomi front ends, against the
scripted fake model. Every test uses its own conversation.
"""

from __future__ import annotations

import json
import os

import aiohttp
import re

import pytest

from bridge_core.kit.security import admin_headers

from tests.loomi.helpers import Client as LoomiClient
from tests.pheby.client import PhebyClient

from .gateway import PHEBY_SECRET

pytestmark = pytest.mark.hermes

T = 90.0  # generous: the first turn builds Hermes's agent


class _Svc:
    def __init__(self, ports):
        self.ports = ports


async def pheby(gw) -> PhebyClient:
    return await PhebyClient.connect(gw.ports["pheby"], secret=PHEBY_SECRET)


async def loomi_device(gw, name: str = "Pixel 9") -> tuple[LoomiClient, dict]:
    async with aiohttp.ClientSession() as http:
        # the gateway's bridge wrote its admin key into the data dir, as `agent-bridge serve` does
        async with http.post(f"http://127.0.0.1:{gw.ports['loomi']}/internal/pair/new", json={},
                             headers=admin_headers(gw.data)) as r:
            assert r.status == 200, await r.text()
            qr = (await r.json())["payload"]
    c = await LoomiClient.connect(_Svc(gw.ports))
    ok = await c.hello(token=qr["token"], device_info={"model": name, "os": "Android 16", "app_version": "1.0"})
    assert ok["type"] == "hello.ok", ok
    return c, ok["payload"]


async def send(client: PhebyClient, cid: str, text: str, rid: str = "s1") -> str:
    accepted = await client.request(
        {"type": "chat.send", "conversation_id": cid, "text": text, "request_id": rid}, "run.accepted", timeout=T
    )
    assert accepted["type"] == "run.accepted", accepted
    return accepted["run_id"]


async def test_streamed_reply(hermes_gateway):
    c = await pheby(hermes_gateway)
    try:
        cid = await c.create("stream")
        run_id = await send(c, cid, "hello hermes")
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        kinds = [f["type"] for f in frames]
        assert kinds[0] == "message.start" and kinds[-1] == "run.finished", kinds
        complete = next(f for f in frames if f["type"] == "message.complete")
        assert complete["text"] == "Hello from fake model! You said: hello hermes"
        assert complete["message_id"] == f"draft-{run_id}"
        deltas = [f["text"] for f in frames if f["type"] == "message.delta"]
        assert deltas, kinds
        assert all(complete["text"].startswith(d) for d in deltas)  # cumulative, no cursor
        assert frames[-1]["status"] == "completed"
        assert not [f for f in frames if f["type"] == "message.complete" and f.get("kind") == "notice"]
        hist = await c.request({"type": "conversation.open", "conversation_id": cid, "request_id": "o"},
                               "conversation.history", timeout=T)
        assert [(m["role"], m["text"]) for m in hist["messages"]][-2:] == [
            ("user", "hello hermes"), ("assistant", "Hello from fake model! You said: hello hermes")]
        assert hist["run"] is None
    finally:
        await c.close()


async def test_approval_answered_on_loomi_seen_on_pheby(hermes_gateway):
    gw = hermes_gateway
    victim = os.path.join(gw.root, "victim-once")
    os.makedirs(victim)
    c = await pheby(gw)
    phone, _ = await loomi_device(gw)
    try:
        cid = await c.create("approve")
        run_id = await send(c, cid, f"DANGER {victim}")
        request = await c.recv_type("approval.request", timeout=T)
        assert request["session_key"] == f"agent:main:pheby:dm:{cid}"
        assert request["run_id"] == run_id
        assert request["command"] == f"rm -rf {victim}"
        assert request["choices"] == ["once", "session", "always", "deny"]
        required = await phone.recv_type("approval.required", timeout=T)
        assert required["payload"]["approval_id"] == request["approval_id"]
        ack = await phone.request("approval.resolve", {"approval_id": request["approval_id"], "choice": "once",
                                                       "request_id": "p1"})
        assert ack["type"] == "ack", ack
        resolved = await c.recv_type("approval.resolved", timeout=T)
        assert resolved["approval_id"] == request["approval_id"] and resolved["choice"] == "once"
        assert resolved.get("surface") == "loomi"
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        tools = [f for f in c.frames if f["type"] == "tool.event" and f["tool_name"] == "terminal"]
        assert [t["status"] for t in tools] == ["running", "completed"]
        assert tools[0]["args_redacted"] == {"command": f"rm -rf {victim}"}
        assert tools[0]["tool_call_id"] == tools[1]["tool_call_id"]
        assert frames[-1]["status"] == "completed"
        assert not os.path.exists(victim)  # Hermes ran the approved command
        # Hermes's tool-progress chatter never reaches the chat
        assert not [f for f in c.frames if f["type"] == "message.complete" and f.get("kind") == "notice"]
        done = await phone.recv_type("run.completed", timeout=T)
        assert done["payload"]["status"] == "completed"
    finally:
        await c.close()
        await phone.close()


async def test_denied_approval(hermes_gateway):
    gw = hermes_gateway
    victim = os.path.join(gw.root, "victim-deny")
    os.makedirs(victim)
    c = await pheby(gw)
    try:
        cid = await c.create("deny")
        run_id = await send(c, cid, f"DANGER {victim}")
        request = await c.recv_type("approval.request", timeout=T)
        resolved = await c.request({"type": "approval.respond", "approval_id": request["approval_id"],
                                    "choice": "deny", "reason": "not today", "request_id": "d1"},
                                   "approval.resolved", timeout=T)
        assert resolved["choice"] == "deny" and resolved["accepted"] is True
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        assert frames[-1]["status"] == "completed"
        final = next(f for f in frames if f["type"] == "message.complete")
        assert "BLOCKED" in final["text"] or "denied" in final["text"].lower()
        assert os.path.isdir(victim)
        again = await c.request({"type": "approval.respond", "approval_id": request["approval_id"],
                                 "choice": "once", "request_id": "d2"}, "error", timeout=T)
        assert again["error"]["code"] in ("already_resolved", "approval_not_found")
    finally:
        await c.close()


async def test_clarification(hermes_gateway):
    c = await pheby(hermes_gateway)
    try:
        cid = await c.create("clarify")
        run_id = await send(c, cid, "CLARIFY where to deploy")
        req = await c.recv_type("clarify.request", timeout=T)
        assert req["question"] == "Deploy to staging or production?"
        assert req["choices"] == ["staging", "production"] and req["allow_free_text"] is True
        assert req["run_id"] == run_id and len(req["clarify_id"]) == 10
        resolved = await c.request({"type": "clarify.respond", "clarify_id": req["clarify_id"],
                                    "response": "production", "request_id": "q1"}, "clarify.resolved", timeout=T)
        assert resolved["accepted"] is True
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        final = next(f for f in frames if f["type"] == "message.complete")
        assert '"user_response": "production"' in final["text"]
        assert frames[-1]["status"] == "completed"
    finally:
        await c.close()


async def test_cancel_slow_run(hermes_gateway):
    c = await pheby(hermes_gateway)
    try:
        cid = await c.create("cancel")
        run_id = await send(c, cid, "SLOW story please")
        await c.recv_type("message.delta", timeout=T)
        await c.send({"type": "run.cancel", "conversation_id": cid, "run_id": run_id, "request_id": "x1"})
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        finished = frames[-1]
        assert finished["status"] == "cancelled" and finished.get("request_id") == "x1"
        assert [f["type"] for f in frames].count("run.finished") == 1
        # the same run cannot be cancelled twice
        err = await c.request({"type": "run.cancel", "conversation_id": cid, "run_id": run_id, "request_id": "x2"},
                              "error", timeout=T)
        assert err["error"]["code"] in ("not_found", "conversation_not_found")
        # the conversation stays usable
        run2 = await send(c, cid, "hello again", rid="s2")
        frames = await c.collect_until("run.finished", timeout=T, run_id=run2)
        assert frames[-1]["status"] == "completed"
        assert next(f for f in frames if f["type"] == "message.complete")["text"].endswith("hello again")
    finally:
        await c.close()


async def test_media_file_becomes_downloadable_attachment(hermes_gateway):
    gw = hermes_gateway
    path = os.path.join(gw.work, "e2e_report.pdf")
    payload = b"%PDF-1.4\n% agent-bridge e2e\n"
    with open(path, "wb") as f:
        f.write(payload)
    c = await pheby(gw)
    try:
        cid = await c.create("media")
        run_id = await send(c, cid, f"MEDIA {path}")
        added = await c.recv_type("attachment.added", timeout=T)
        att = added["attachment"]
        assert att["filename"] == "e2e_report.pdf" and att["mime_type"] == "application/pdf"
        assert att["kind"] == "document" and att["size"] == len(payload)
        assert att["message_id"] == f"draft-{run_id}"
        frames = await c.collect_until("run.finished", timeout=T, run_id=run_id)
        final = next(f for f in frames if f["type"] == "message.complete")
        assert final["text"] == "Here is your report."  # the MEDIA: line is not chat text
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{gw.ports['pheby']}{att['download_path']}"
            async with http.get(url, headers={"Authorization": f"Bearer {PHEBY_SECRET}"}) as r:
                assert r.status == 200
                assert await r.read() == payload
            async with http.get(url) as r:
                assert r.status in (401, 403, 404)
    finally:
        await c.close()


async def test_model_and_reasoning_changes(hermes_gateway):
    gw = hermes_gateway
    c = await pheby(gw)
    try:
        cid = await c.create("settings")
        cur = await c.request({"type": "models.current", "conversation_id": cid, "request_id": "m0"},
                              "model.current", timeout=T)
        assert (cur["model"], cur["provider"], cur["scope"]) == ("fake-model", "custom", "global")
        changed = await c.request({"type": "model.set", "model": "fake-model-2", "conversation_id": cid,
                                   "request_id": "m1"}, "model.changed", timeout=T)
        if changed.get("request_id") != "m1":  # the broadcast may come first
            changed = await c.recv_type("model.changed", timeout=T)
        assert (changed["model"], changed["scope"]) == ("fake-model-2", "conversation")
        cur = await c.request({"type": "models.current", "conversation_id": cid, "request_id": "m2"},
                              "model.current", timeout=T)
        assert (cur["model"], cur["scope"]) == ("fake-model-2", "conversation")
        listed = await c.request({"type": "models.list", "conversation_id": cid, "request_id": "m3"},
                                 "models.snapshot", timeout=T)
        assert listed["current_model"] == "fake-model-2"
        assert any(p["slug"] == "custom" for p in listed["providers"])

        r = await c.request({"type": "reasoning.set", "effort": "high", "conversation_id": cid,
                             "request_id": "r1"}, "reasoning.changed", timeout=T)
        assert r["effort"] == "high" and r["scope"] == "conversation"
        snap = await c.request({"type": "reasoning.current", "conversation_id": cid, "request_id": "r2"},
                               "reasoning.snapshot", timeout=T)
        assert (snap["effort"], snap["enabled"], snap["scope"]) == ("high", True, "conversation")
        bad = await c.request({"type": "reasoning.set", "effort": "turbo", "conversation_id": cid,
                               "request_id": "r3"}, "error", timeout=T)
        assert bad["error"]["code"] == "bad_request"

        # the next turn in that conversation runs on the new model
        before = len(gw.fake.requests)
        run_id = await send(c, cid, "which model")
        await c.collect_until("run.finished", timeout=T, run_id=run_id)
        models = {req.get("model") for req in gw.fake.requests[before:]}
        assert "fake-model-2" in models

        # global scope goes to Hermes's config.yaml
        g = await c.request({"type": "reasoning.set", "effort": "low", "request_id": "r4"},
                            "reasoning.changed", timeout=T)
        assert g["scope"] == "global"
        with open(gw.config_path) as f:
            assert re.search(r"^\s*reasoning_effort:\s*['\"]?low['\"]?\s*$", f.read(), re.M)
        other = await c.create("other")
        snap = await c.request({"type": "reasoning.current", "conversation_id": other, "request_id": "r5"},
                               "reasoning.snapshot", timeout=T)
        assert (snap["effort"], snap["scope"]) == ("low", "global")
    finally:
        await c.close()


async def test_hermes_loomi_pair_json_pairs_a_device(hermes_gateway):
    gw = hermes_gateway
    out = gw.hermes("loomi", "pair", "--json")
    assert out.returncode == 0, out.stderr + out.stdout
    lines = [ln for ln in out.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, out.stdout
    qr = json.loads(lines[0])
    assert set(qr) == {"v", "url", "token", "name", "fp"} and qr["v"] == 1
    assert qr["url"] == f"ws://127.0.0.1:{gw.ports['loomi']}/ws"
    phone = await LoomiClient.connect(_Svc(gw.ports))
    try:
        ok = await phone.hello(token=qr["token"], device_info={"model": "Pixel CLI", "os": "Android 16",
                                                               "app_version": "1.0"})
        assert ok["type"] == "hello.ok", ok
        device_id = ok["payload"]["device_id"]
        assert ok["payload"].get("credential")
    finally:
        await phone.close()
    listed = gw.hermes("loomi", "devices", "--json")
    assert listed.returncode == 0, listed.stderr
    assert device_id in {d["device_id"] for d in json.loads(listed.stdout)}
    log = gw.log()
    assert qr["token"] not in log and PHEBY_SECRET not in log  # tokens and secrets never logged
