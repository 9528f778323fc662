"""Chat runs end to end on the demo agent: exact frames and order over a real socket."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import yarl

from tests.pheby.client import PhebyClient, strip_ts, types


@pytest.fixture
async def pheby(service_factory):
    return await service_factory(adapters=("pheby",))


async def test_echo_run_exact_frames(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "hello there", "request_id": "r6"})
    frames = await c.collect_until("run.finished")
    accepted = frames[0]
    run_id = accepted["run_id"]
    mid = f"draft-{run_id}"
    assert accepted == {"type": "run.accepted", "conversation_id": cid, "run_id": run_id, "request_id": "r6"}
    assert frames[1] == {"type": "message.start", "conversation_id": cid, "run_id": run_id, "message_id": mid}
    deltas = frames[2:-2]
    assert deltas and all(f["type"] == "message.delta" for f in deltas)
    # cumulative: each draft extends the previous one and the final text (drafts are paced, newest wins)
    texts = [f["text"] for f in deltas] + ["Echo: hello there"]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))
    assert texts[0].startswith("Echo:")  # the first draft goes out at once
    assert all(set(f) == {"type", "conversation_id", "message_id", "text", "ts"} for f in deltas)
    assert strip_ts(frames[-2]) == {
        "type": "message.complete", "conversation_id": cid, "message_id": mid, "text": "Echo: hello there",
    }
    assert frames[-1] == {"type": "run.finished", "conversation_id": cid, "run_id": run_id, "status": "completed"}
    await c.close()


async def test_two_clients_see_the_same_broadcasts(pheby):
    a = await PhebyClient.connect(pheby.ports["pheby"])
    b = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await a.create()
    upd = await b.recv_type("conversation.updated")
    assert upd == {"type": "conversation.updated", "conversation_id": cid, "name": "Test"}
    await a.send({"type": "chat.send", "conversation_id": cid, "text": "/tool search", "request_id": "x"})
    fa = await a.collect_until("run.finished")
    fb = await b.collect_until("run.finished")
    # same frames (b may see fewer coalesced drafts, never different ones)
    na = [f for f in fa if f["type"] != "message.delta"]
    nb = [f for f in fb if f["type"] != "message.delta"]
    assert na == nb
    assert types(na) == ["run.accepted", "message.start", "tool.event", "tool.event", "message.complete", "run.finished"]
    running, done = na[2], na[3]
    assert running["status"] == "running" and running["tool_name"] == "search"
    assert running["args_redacted"] == {"input": "demo"} and "duration_ms" not in running
    assert done["status"] == "completed" and done["tool_call_id"] == running["tool_call_id"]
    assert isinstance(done["duration_ms"], int) and "args_redacted" not in done
    await a.close()
    await b.close()


async def test_run_active_and_cancel_emits_exactly_one_cancelled(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/slow 30", "request_id": "s"})
    accepted = await c.recv_type("run.accepted")
    run_id = accepted["run_id"]
    await c.recv_type("message.delta")
    err = await c.request({"type": "chat.send", "conversation_id": cid, "text": "again", "request_id": "r2"}, "error")
    assert err["error"]["code"] == "run_active" and err["request_id"] == "r2"
    await c.send({"type": "run.cancel", "conversation_id": cid, "run_id": run_id, "request_id": "r7"})
    frames = await c.collect_until("run.finished")
    finished = frames[-1]
    assert finished == {"type": "run.finished", "conversation_id": cid, "run_id": run_id, "status": "cancelled", "request_id": "r7"}
    # a second cancel of the same run is not_found, and no second run.finished arrives
    err = await c.request({"type": "run.cancel", "conversation_id": cid, "run_id": run_id, "request_id": "r8"}, "error")
    assert err["error"]["code"] == "not_found" and err["request_id"] == "r8"
    pong = await c.request({"type": "ping"}, "pong")
    assert pong["type"] == "pong"
    assert [f for f in c.frames if f["type"] == "run.finished"] == [finished]
    # the conversation is usable again
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "after", "request_id": "r9"})
    frames = await c.collect_until("run.finished")
    assert frames[-1]["status"] == "completed"
    await c.close()


async def test_stale_cancel_is_not_found(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    err = await c.request({"type": "run.cancel", "conversation_id": cid, "run_id": "nope", "request_id": "r"}, "error")
    assert err["error"] == {"code": "not_found", "message": "Run not found"}
    await c.close()


async def test_failing_run(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/fail"})
    frames = await c.collect_until("run.finished")
    assert types(frames) == ["run.accepted", "message.start", "message.complete", "run.finished"]
    assert frames[2]["message_id"] == frames[1]["message_id"] and frames[2]["text"] == ""  # closed, empty
    assert frames[-1]["status"] == "failed" and frames[-1]["error"] == "demo failure"
    await c.close()


async def test_reconnect_mid_run_recovers_full_state(pheby):
    port = pheby.ports["pheby"]
    c = await PhebyClient.connect(port)
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "first"})
    await c.collect_until("run.finished")
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/slow 5"})
    run_id = (await c.recv_type("run.accepted"))["run_id"]
    for _ in range(3):
        await c.recv_type("message.delta")
    await c.close()  # the phone loses its connection mid-run

    d = await PhebyClient.connect(port)
    hist = await d.request({"type": "conversation.open", "conversation_id": cid, "request_id": "r3"}, "conversation.history")
    assert hist["request_id"] == "r3" and hist["conversation_id"] == cid
    assert [(m["role"], m["text"]) for m in hist["messages"]] == [("user", "first"), ("assistant", "Echo: first"), ("user", "/slow 5")]
    run = hist["run"]
    assert run["run_id"] == run_id and run["status"] == "running" and run["message_id"] == f"draft-{run_id}"
    assert run["text"].startswith("w1 w2 w3") and run["started_at"].endswith("+00:00")
    assert hist["approvals"] == [] and hist["clarifications"] == [] and hist["attachments"] == []
    # live events continue after the snapshot
    delta = await d.recv_type("message.delta")
    assert delta["message_id"] == f"draft-{run_id}" and delta["text"].startswith(run["text"])
    await d.send({"type": "run.cancel", "conversation_id": cid, "run_id": run_id})
    assert (await d.recv_type("run.finished"))["status"] == "cancelled"
    await d.close()


async def test_approval_once_and_deny(pheby):
    a = await PhebyClient.connect(pheby.ports["pheby"])
    b = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await a.create()
    await a.send({"type": "chat.send", "conversation_id": cid, "text": "/approve rm -rf /tmp/build"})
    req = await a.recv_type("approval.request")
    run_id = req["run_id"]
    assert strip_ts(req) == {
        "type": "approval.request", "approval_id": req["approval_id"],
        "session_key": f"agent:main:pheby:dm:{cid}", "conversation_id": cid, "run_id": run_id,
        "command": "rm -rf /tmp/build", "description": "Demo approval for a shell command",
        "choices": ["once", "session", "always", "deny"],
    }
    assert (await b.recv_type("approval.request"))["approval_id"] == req["approval_id"]
    # visible in the snapshot while pending
    hist = await b.request({"type": "conversation.open", "conversation_id": cid}, "conversation.history")
    assert [x["approval_id"] for x in hist["approvals"]] == [req["approval_id"]]
    await b.send({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "once", "request_id": "r8"})
    res_a = await a.recv_type("approval.resolved")
    res_b = await b.recv_type("approval.resolved")
    assert res_a == res_b
    assert strip_ts(res_a) == {
        "type": "approval.resolved", "approval_id": req["approval_id"], "choice": "once", "accepted": True,
        "request_id": "r8", "conversation_id": cid, "decided_by": "remote", "surface": "pheby",
    }
    frames = await a.collect_until("run.finished")
    assert [f["status"] for f in frames if f["type"] == "tool.event"] == ["running", "completed"]
    assert [f for f in frames if f["type"] == "message.complete"][0]["text"] == "Ran: rm -rf /tmp/build"
    # stale id now
    err = await a.request({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "deny", "request_id": "z"}, "error")
    assert err["error"]["code"] == "approval_not_found" and err["request_id"] == "z"
    err = await a.request({"type": "approval.respond", "approval_id": "unknown", "choice": "once"}, "error")
    assert err["error"]["code"] == "approval_not_found"

    await a.send({"type": "chat.send", "conversation_id": cid, "text": "/approve curl evil"})
    req = await a.recv_type("approval.request")
    await a.send({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "deny", "reason": "no", "request_id": "d"})
    res = await a.recv_type("approval.resolved")
    assert res["choice"] == "deny" and res["accepted"] is True and res["request_id"] == "d"
    frames = await a.collect_until("run.finished")
    assert not [f for f in frames if f["type"] == "tool.event"]
    assert [f for f in frames if f["type"] == "message.complete"][0]["text"] == "Denied: curl evil"
    assert frames[-1]["status"] == "completed"
    await a.close()
    await b.close()


async def test_bad_approval_choice(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls"})
    req = await c.recv_type("approval.request")
    err = await c.request({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "maybe"}, "error")
    assert err["error"]["code"] == "bad_request"
    await c.send({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "session"})
    assert (await c.recv_type("approval.resolved"))["choice"] == "session"
    await c.collect_until("run.finished")
    await c.close()


async def test_clarify(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/clarify Deploy now?"})
    req = await c.recv_type("clarify.request")
    assert strip_ts(req) == {
        "type": "clarify.request", "clarify_id": req["clarify_id"], "session_key": f"agent:main:pheby:dm:{cid}",
        "conversation_id": cid, "run_id": req["run_id"], "question": "Deploy now?", "choices": ["yes", "no"],
        "allow_free_text": True,
    }
    hist = await c.request({"type": "conversation.open", "conversation_id": cid}, "conversation.history")
    assert [x["clarify_id"] for x in hist["clarifications"]] == [req["clarify_id"]]
    await c.send({"type": "clarify.respond", "clarify_id": req["clarify_id"], "response": "only staging", "request_id": "r9"})
    res = await c.recv_type("clarify.resolved")
    assert res["clarify_id"] == req["clarify_id"] and res["accepted"] is True and res["request_id"] == "r9"
    frames = await c.collect_until("run.finished")
    assert [f for f in frames if f["type"] == "message.complete"][0]["text"] == 'You answered: "only staging"'
    err = await c.request({"type": "clarify.respond", "clarify_id": req["clarify_id"], "response": "x", "request_id": "q"}, "error")
    assert err["error"]["code"] == "clarify_not_found" and err["request_id"] == "q"
    await c.close()


async def test_notify_is_conversation_content_after_the_run(pheby):
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/notify build done"})
    frames = await c.collect_until("message.complete", text="build done")
    done = frames[-1]
    mid = done["message_id"]
    assert strip_ts(done) == {"type": "message.complete", "conversation_id": cid, "message_id": mid, "text": "build done"}
    assert frames[-2] == {"type": "message.start", "conversation_id": cid, "message_id": mid}
    assert types(frames[-3:-2]) == ["run.finished"]  # after the run that asked for it
    hist = await c.request({"type": "conversation.open", "conversation_id": cid}, "conversation.history")
    assert hist["messages"][-1]["text"] == "build done" and hist["messages"][-1]["message_id"] == mid
    await c.close()


async def test_attachments_download(pheby):
    port = pheby.ports["pheby"]
    c = await PhebyClient.connect(port)
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/attach"})
    accepted = await c.recv_type("run.accepted")
    added = await c.recv_type("attachment.added")
    att = added["attachment"]
    assert added["conversation_id"] == cid
    assert att["filename"] == "demo.txt" and att["mime_type"] == "text/plain" and att["size"] == 16
    assert att["kind"] == "document" and att["inline_image"] is False
    assert att["message_id"] == f"draft-{accepted['run_id']}"  # produced during the run
    assert att["download_path"] == f"/attachments/{att['attachment_id']}"
    assert len(att["attachment_id"]) == 32 and att["expires_at"] > att["created_at"]
    await c.collect_until("run.finished")

    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/image"})
    img = (await c.recv_type("attachment.added"))["attachment"]
    assert img["kind"] == "image" and img["inline_image"] is True and img["mime_type"] == "image/png"
    await c.collect_until("run.finished")

    base = f"http://127.0.0.1:{port}"
    secret = "test-pheby-secret-0123456789"
    async with aiohttp.ClientSession() as s:
        for headers in ({"Authorization": f"Bearer {secret}"}, {"Authorization": f"ApiKey {secret}"}, {"X-Pheby-Secret": secret}):
            async with s.get(base + att["download_path"], headers=headers) as r:
                assert r.status == 200 and await r.read() == b"demo attachment\n"
                assert r.headers["Content-Type"].startswith("text/plain")
        async with s.get(base + img["download_path"], headers={"X-Pheby-Secret": secret}) as r:
            body = await r.read()
            assert r.status == 200 and body.startswith(b"\x89PNG\r\n\x1a\n")
        async with s.get(base + att["download_path"]) as r:
            assert r.status == 401
        not_found = {"error": {"code": "not_found", "message": "Attachment unavailable"}}
        for bad in ("0" * 32, "ABC", "../../secrets/pheby_secret", "..%2f..%2fsecrets%2fpheby_secret",
                    "%2e%2e%2fbridge.db", att["attachment_id"].upper(), att["attachment_id"] + "/x"):
            url = yarl.URL(f"{base}/attachments/{bad}", encoded=True)
            async with s.get(url, headers={"X-Pheby-Secret": secret}) as r:
                assert r.status == 404, bad
                assert await r.json() == not_found
    # expired: past its expiry it is a 404 with the same body
    bridge = pheby.bridge
    await bridge.store.write(lambda conn: conn.execute("UPDATE attachments SET expires_at=1 WHERE id=?", (att["attachment_id"],)))
    async with aiohttp.ClientSession() as s:
        async with s.get(base + att["download_path"], headers={"X-Pheby-Secret": secret}) as r:
            assert r.status == 404 and await r.json() == {"error": {"code": "not_found", "message": "Attachment unavailable"}}
    hist = await c.request({"type": "conversation.open", "conversation_id": cid}, "conversation.history")
    assert {a["filename"] for a in hist["attachments"]} >= {"demo.png"}
    await c.close()


async def test_attachment_outside_run_has_null_message_id(pheby):
    bridge = pheby.bridge
    conv = bridge.create_conversation("x")
    att = await bridge.attachments.add_bytes(b"x", filename="x.txt", conversation_id=conv.conversation_id,
                                             message_id=bridge.active_draft_id(conv.conversation_id))
    assert att.message_id is None


async def test_attachment_cleanup_removes_expired(pheby):
    bridge = pheby.bridge
    conv = bridge.create_conversation("x")
    att = await bridge.attachments.add_bytes(b"x", filename="x.txt", conversation_id=conv.conversation_id, message_id=None)
    assert bridge.attachments.get(att.attachment_id) is not None
    removed = await bridge.attachments.cleanup(at=att.expires_at + 1)
    assert removed == 1 and bridge.attachments.get(att.attachment_id) is None


async def test_slow_client_does_not_slow_others(pheby):
    """A client that stops reading is cut off (1013 slow_consumer); the agent and a reading client finish."""
    port = pheby.ports["pheby"]
    fe = pheby.frontends["pheby"]
    fe.outbox_items = 64
    fast = await PhebyClient.connect(port)
    slow_session = aiohttp.ClientSession()
    slow = await slow_session.ws_connect(f"http://127.0.0.1:{port}/ws", max_msg_size=0)
    await slow.send_json({"type": "hello", "secret": "test-pheby-secret-0123456789", "protocol_version": 1})
    await slow.receive(timeout=2)
    cid = await fast.create()
    big = "x" * 60_000  # one word: a 60 kB draft and a 60 kB final message per run
    for i in range(200):
        await fast.send({"type": "chat.send", "conversation_id": cid, "text": big})
        frames = await fast.collect_until("run.finished")
        assert frames[-1]["status"] == "completed"
        if fe.stats["slow_disconnects"]:
            break
    assert fe.stats["slow_disconnects"] == 1
    assert len(fe.conns) == 1  # only the reading client is left
    # the slow client finds its socket closed with the slow-consumer reason once it reads again
    seen_close = None
    for _ in range(10_000):
        msg = await slow.receive(timeout=5)
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
            seen_close = msg
            break
    assert seen_close is not None and seen_close.data == 1013 and seen_close.extra == "slow_consumer"
    # and recovers through a snapshot on a new connection
    again = await PhebyClient.connect(port)
    hist = await again.request({"type": "conversation.open", "conversation_id": cid}, "conversation.history")
    assert hist["messages"][-1]["text"] == "Echo: " + big and hist["run"] is None
    await again.close()
    await fast.close()
    await slow.close()
    await slow_session.close()


async def test_drafts_are_paced_newest_wins(pheby):
    """Cumulative drafts go out at most once per draft interval: the first at once, then the newest text."""
    pheby.frontends["pheby"].draft_interval = 3600.0  # nothing after the first within this test
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/bench 5000"})
    frames = await c.collect_until("run.finished")
    drafts = [f for f in frames if f["type"] == "message.delta"]
    assert len(drafts) == 1  # rendered when sent: the newest text at that moment
    complete = [f for f in frames if f["type"] == "message.complete"][0]
    assert complete["text"] == "tok " * 5000 and complete["text"].startswith(drafts[0]["text"])
    await c.close()


async def test_a_due_draft_push_waits_for_the_wait_of_the_longer_draft_it_would_send(pheby):
    """An answer arriving fast: the push due for its second draft (8 characters) finds a far longer one, whose
    own wait outlasts the answer (pheby_adapter/pacing.py, ``recheck``): the client gets the first draft, then the
    final text, nothing in between. A wait of 40 ms per 64 characters makes that hold for any answer arriving
    faster than 1,600 characters a second; the push without the recheck sent the long draft 5 ms in."""
    pacer = pheby.frontends["pheby"].pacer
    pacer.full_chars = 64  # 8 characters: due after 5 ms; thousands: seconds
    pacer.max_interval = 3600.0
    c = await PhebyClient.connect(pheby.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/bench 20000"})
    frames = await c.collect_until("run.finished")
    run = [f for f in frames if f["type"] in ("message.delta", "message.complete")]
    assert [(f["type"], f["text"]) for f in run] == [("message.delta", "tok "), ("message.complete", "tok " * 20000)]
    await c.close()
