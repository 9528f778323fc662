"""Conversations and model / reasoning / yolo settings over a real socket."""

from __future__ import annotations

import pytest

from tests.pheby.client import PhebyClient, strip_ts


@pytest.fixture
async def pheby(service_factory):
    return await service_factory(adapters=("pheby",))


async def test_conversation_lifecycle(pheby):
    a = await PhebyClient.connect(pheby.ports["pheby"])
    b = await PhebyClient.connect(pheby.ports["pheby"])
    await a.send({"type": "conversation.create", "name": "New chat", "request_id": "r2"})
    created = await a.recv()  # the reply first, then the broadcast it causes
    upd = await a.recv()
    cid = created["conversation_id"]
    assert len(cid) == 32 and int(cid, 16) >= 0
    assert created == {"type": "conversation.created", "conversation_id": cid, "name": "New chat", "request_id": "r2"}
    assert upd == {"type": "conversation.updated", "conversation_id": cid, "name": "New chat"}
    assert await b.recv() == upd

    snap = await a.request({"type": "conversation.list", "request_id": "r1"}, "conversation.snapshot")
    assert snap["request_id"] == "r1"
    assert snap["conversations"] == [
        {"conversation_id": cid, "name": "New chat", "session_id": None, "last_active": None, "source": "demo"}
    ]

    await a.send({"type": "conversation.rename", "conversation_id": cid, "name": "Renamed", "request_id": "r4"})
    got = [await a.recv(), await a.recv()]
    assert got == [
        {"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed", "request_id": "r4"},
        {"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed"},
    ]
    assert await b.recv() == {"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed"}

    await a.send({"type": "chat.send", "conversation_id": cid, "text": "hi"})
    await a.collect_until("run.finished")
    snap = await a.request({"type": "conversation.list"}, "conversation.snapshot")
    assert snap["conversations"][0]["last_active"].endswith("+00:00")

    hist = await a.request({"type": "conversation.open", "conversation_id": cid, "limit": 1}, "conversation.history")
    assert [m["text"] for m in hist["messages"]] == ["Echo: hi"]  # the most recent, oldest first

    await a.send({"type": "conversation.delete", "conversation_id": cid, "request_id": "r5"})
    assert await a.recv() == {"type": "conversation.deleted", "conversation_id": cid, "request_id": "r5"}
    assert await b.recv_type("conversation.deleted") == {"type": "conversation.deleted", "conversation_id": cid}
    for frame in (
        {"type": "conversation.open", "conversation_id": cid, "request_id": "x"},
        {"type": "conversation.rename", "conversation_id": cid, "name": "n", "request_id": "x"},
        {"type": "conversation.delete", "conversation_id": cid, "request_id": "x"},
        {"type": "chat.send", "conversation_id": cid, "text": "hi", "request_id": "x"},
        {"type": "run.cancel", "conversation_id": cid, "run_id": "r", "request_id": "x"},
    ):
        err = await a.request(frame, "error")
        assert strip_ts(err) == {
            "type": "error", "request_id": "x",
            "error": {"code": "conversation_not_found", "message": "Conversation not found"},
        }, frame
    await a.close()
    await b.close()


async def test_history_survives_restart_and_is_capped(service_factory, tmp_path):
    svc = await service_factory(adapters=("pheby",))
    c = await PhebyClient.connect(svc.ports["pheby"])
    cid = await c.create("Keep")
    for i in range(3):
        await c.send({"type": "chat.send", "conversation_id": cid, "text": f"m{i}"})
        await c.collect_until("run.finished")
    await c.close()
    await svc.stop()
    svc2 = await service_factory(adapters=("pheby",))
    c = await PhebyClient.connect(svc2.ports["pheby"])
    hist = await c.request({"type": "conversation.open", "conversation_id": cid, "limit": 100000}, "conversation.history")
    assert [m["text"] for m in hist["messages"]] == ["m0", "Echo: m0", "m1", "Echo: m1", "m2", "Echo: m2"]
    assert all(m["role"] in ("user", "assistant") for m in hist["messages"])
    snap = await c.request({"type": "conversation.list"}, "conversation.snapshot")
    assert snap["conversations"][0]["name"] == "Keep"
    # the 500-message cap
    conv = svc2.bridge.conversation(cid)
    from bridge_core.model import events as ev
    for i in range(600):
        conv.messages.append(ev.Message(message_id=f"x{i}", role="user", text=str(i), ts=None))
    hist = await c.request({"type": "conversation.open", "conversation_id": cid, "limit": 100000}, "conversation.history")
    assert len(hist["messages"]) == 500 and hist["messages"][-1]["text"] == "599"
    await c.close()


async def test_models(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    snap = await c.request({"type": "models.list", "conversation_id": cid, "request_id": "r10"}, "models.snapshot")
    assert strip_ts(snap) == {
        "type": "models.snapshot", "request_id": "r10",
        "providers": [{"slug": "demo", "name": "Demo", "is_current": True, "models": ["demo-small", "demo-large"], "total_models": 2}],
        "current_model": "demo-small", "current_provider": "demo", "scope": "global",
        "supported_reasoning_efforts": ["minimal", "low", "medium", "high", "xhigh", "max", "ultra"],
    }
    cur = await c.request({"type": "models.current", "conversation_id": cid, "request_id": "r11"}, "model.current")
    assert strip_ts(cur) == {"type": "model.current", "request_id": "r11", "model": "demo-small", "provider": "demo",
                             "scope": "global", "conversation_id": cid}
    await c.send({"type": "model.set", "model": "demo-large", "conversation_id": cid, "request_id": "r12"})
    got = [await c.recv(), await c.recv()]
    assert {"type": "model.changed", "model": "demo-large", "provider": "demo", "scope": "conversation",
            "conversation_id": cid, "request_id": "r12"} in got
    assert {"type": "model.changed", "model": "demo-large", "provider": "demo", "scope": "conversation",
            "conversation_id": cid} in got
    cur = await c.request({"type": "models.current", "conversation_id": cid}, "model.current")
    assert cur["model"] == "demo-large" and cur["scope"] == "conversation"
    glob = await c.request({"type": "models.current"}, "model.current")
    assert glob["model"] == "demo-small" and glob["scope"] == "global" and glob["conversation_id"] is None
    # runs report the conversation's model
    await c.send({"type": "model.set", "model": "demo-large", "request_id": "g"})
    await c.recv_type("model.changed")
    assert (await c.recv_type("model.changed"))["scope"] == "global"
    err = await c.request({"type": "model.set", "model": "gpt-9", "request_id": "bad"}, "error")
    assert err["error"]["code"] == "bad_request" and err["request_id"] == "bad"
    await c.close()


async def test_reasoning(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    snap = await c.request({"type": "reasoning.current", "conversation_id": cid, "request_id": "r13"}, "reasoning.snapshot")
    assert strip_ts(snap) == {
        "type": "reasoning.snapshot", "request_id": "r13", "effort": "medium", "enabled": True, "scope": "global",
        "conversation_id": cid,
        "supported_efforts": ["none", "minimal", "low", "medium", "high", "xhigh", "max", "ultra"],
    }
    await c.send({"type": "reasoning.set", "effort": "high", "conversation_id": cid, "request_id": "r14"})
    got = [await c.recv(), await c.recv()]
    assert {"type": "reasoning.changed", "effort": "high", "scope": "conversation", "conversation_id": cid, "request_id": "r14"} in got
    await c.send({"type": "reasoning.set", "effort": "none", "request_id": "n"})
    await c.recv_type("reasoning.changed")
    await c.recv_type("reasoning.changed")
    glob = await c.request({"type": "reasoning.current"}, "reasoning.snapshot")
    assert glob["effort"] == "none" and glob["enabled"] is False and glob["scope"] == "global"
    conv = await c.request({"type": "reasoning.current", "conversation_id": cid}, "reasoning.snapshot")
    assert conv["effort"] == "high" and conv["scope"] == "conversation"
    err = await c.request({"type": "reasoning.set", "effort": "extreme", "request_id": "e"}, "error")
    assert err["error"]["code"] == "bad_request"
    await c.close()


async def test_yolo(pheby):
    a = await PhebyClient.connect(pheby.ports["pheby"])
    b = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await a.create()
    snap = await a.request({"type": "yolo.current", "conversation_id": cid, "request_id": "y1"}, "yolo.snapshot")
    assert strip_ts(snap) == {"type": "yolo.snapshot", "request_id": "y1", "enabled": False, "scope": "global", "conversation_id": cid}
    await a.send({"type": "yolo.set", "enabled": True, "conversation_id": cid, "request_id": "y2"})
    got = [await a.recv(), await a.recv()]
    assert {"type": "yolo.changed", "enabled": True, "scope": "conversation", "conversation_id": cid, "request_id": "y2"} in got
    assert await b.recv_type("yolo.changed") == {"type": "yolo.changed", "enabled": True, "scope": "conversation", "conversation_id": cid}
    # with yolo on, /approve runs without asking
    await a.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls"})
    frames = await a.collect_until("run.finished")
    assert not [f for f in frames if f["type"] == "approval.request"]
    assert [f for f in frames if f["type"] == "message.complete"][0]["text"] == "Ran: ls"
    err = await a.request({"type": "yolo.set", "enabled": "yes", "request_id": "y3"}, "error")
    assert err["error"]["code"] == "bad_request"
    await a.close()
    await b.close()
