"""Client requests and the events they cause, exact frames over real sockets."""

from __future__ import annotations

import asyncio

import aiohttp

from .helpers import Client, base, pair, wait_for


def ack(rid, result):
    return {"request_id": rid, "ok": True, "result": result}


async def test_session_send_streams_a_run(loomi):
    c, creds = await pair(loomi)
    await c.send("session.send", {"text": "hi there", "request_id": "r1"})
    frames = await c.recv_until(lambda f: f["type"] == "run.completed")
    by_type = {}
    for f in frames:
        by_type.setdefault(f["type"], []).append(f)
    a = by_type["ack"][0]
    task_id, run_id = a["payload"]["result"]["task_id"], a["payload"]["result"]["run_id"]
    assert a["payload"] == ack("r1", {"task_id": task_id, "run_id": run_id})
    (created,) = by_type["task.created"]
    assert created["payload"]["task"]["task_id"] == task_id and created["payload"]["task"]["title"] == "hi there"
    (started,) = by_type["run.started"]
    assert started["task_id"] == task_id and started["run_id"] == run_id
    p = started["payload"]
    assert p == {"run_id": run_id, "task_id": task_id, "session_id": task_id, "surface": "loomi",
                 "model": "demo-small", "provider": "demo", "started_at": p["started_at"], "title": "hi there"}
    deltas = by_type["run.delta"]
    assert "".join(d["payload"]["text"] for d in deltas) == "Echo: hi there"  # increments, not cumulative
    assert deltas[1]["payload"] == {"run_id": run_id, "text": " hi", "kind": "text", "iteration": 0}
    done = by_type["run.completed"][0]
    assert done["payload"] == {"run_id": run_id, "status": "completed", "text": "Echo: hi there", "error": None,
                               "finished": True}
    assert "run.failed" not in by_type
    for f in frames:  # the envelope on every frame
        assert set(f) == {"v", "seq", "ts", "type", "task_id", "run_id", "event_id", "payload"}
        assert f["event_id"] == f"e_{f['seq']}" and f["v"] == 1
    # a second message in the same task
    r2 = await c.request("session.send", {"task_id": task_id, "text": "again", "request_id": "r2"})
    assert r2["payload"]["result"]["task_id"] == task_id and r2["payload"]["result"]["run_id"] != run_id
    await c.close()


async def test_session_send_errors(loomi):
    c, _ = await pair(loomi)
    err = await c.request("session.send", {"task_id": "f" * 32, "text": "x", "request_id": "r1"})
    assert err["type"] == "error"
    assert err["payload"] == {"code": "task_not_found", "message": "Conversation not found", "fatal": False,
                              "request_id": "r1"}
    err = await c.request("session.send", {"text": 5, "request_id": "r2"})
    assert err["payload"]["code"] == "bad_request" and err["payload"]["request_id"] == "r2"
    err = await c.request("session.send", {"request_id": "r3"})
    assert err["payload"]["code"] == "bad_request"
    await c.close()


async def test_repeated_request_id_returns_the_first_ack_and_runs_once(loomi):
    c, _ = await pair(loomi)
    first = await c.request("session.send", {"text": "once", "request_id": "same"})
    await c.recv_type("run.completed")
    again = await c.request("session.send", {"text": "once", "request_id": "same"})
    assert again["type"] == "ack" and again["payload"] == first["payload"] and again["seq"] > first["seq"]
    assert len(loomi.bridge.conversations) == 1
    conv = next(iter(loomi.bridge.conversations.values()))
    assert [m.text for m in conv.messages] == ["once", "Echo: once"]
    await c.close()


async def test_duplicates_in_flight_run_once(loomi):
    c, _ = await pair(loomi)
    for _ in range(3):
        await c.send("session.send", {"text": "burst", "request_id": "dup"})
    acks = []
    while len(acks) < 3:
        f = await c.recv()
        if f["type"] in ("ack", "error"):
            acks.append(f)
    assert all(a["type"] == "ack" for a in acks)
    assert len({str(a["payload"]) for a in acks}) == 1
    assert len(loomi.bridge.conversations) == 1
    await c.close()


async def test_approval_flow_and_already_resolved(loomi):
    c, _ = await pair(loomi)
    await c.send("session.send", {"text": "/approve ls -la", "request_id": "r1"})
    req = await c.recv_type("approval.required")
    p = req["payload"]
    assert p == {
        "approval_id": p["approval_id"],
        "run_id": req["run_id"],
        "task_id": req["task_id"],
        "command": "ls -la",
        "description": "Demo approval for a shell command",
        "choices": [
            {"label": "Allow once", "choice": "once", "style": "primary"},
            {"label": "Allow for this session", "choice": "session", "style": "secondary"},
            {"label": "Always allow", "choice": "always", "style": "warning"},
            {"label": "Deny", "choice": "deny", "style": "danger"},
        ],
        "smart_denied": False,
        "session_key_ref": p["session_key_ref"],
        "deadline_ts": p["deadline_ts"],
    }
    assert len(p["session_key_ref"]) == 8 and "agent:" not in p["session_key_ref"]
    a = await c.request("approval.resolve", {"approval_id": p["approval_id"], "choice": "once", "request_id": "a1"})
    assert a["payload"] == ack("a1", {"approval_id": p["approval_id"], "choice": "once", "decided_by": "remote"})
    resolved = await c.recv_type("approval.resolved")
    assert resolved["payload"] == {"approval_id": p["approval_id"], "choice": "once", "decided_by": "remote",
                                   "accepted": True, "surface": "loomi"}
    frames = await c.recv_until(lambda f: f["type"] == "run.completed")
    started = next(f for f in frames if f["type"] == "run.tool_started")
    finished = next(f for f in frames if f["type"] == "run.tool_finished")
    assert started["payload"]["tool"] == "terminal" and started["payload"]["preview"] == "ls -la"
    assert finished["payload"]["call_id"] == started["payload"]["call_id"]
    assert finished["payload"]["index"] == started["payload"]["index"] == 1
    assert finished["payload"]["ok"] is True and isinstance(finished["payload"]["duration"], float)
    assert frames[-1]["payload"]["text"] == "Ran: ls -la"
    # the same request again: the same ack, nothing done twice
    again = await c.request("approval.resolve", {"approval_id": p["approval_id"], "choice": "once", "request_id": "a1"})
    assert again["type"] == "ack" and again["payload"] == a["payload"]
    # a new request for a resolved approval
    err = await c.request("approval.resolve", {"approval_id": p["approval_id"], "choice": "deny", "request_id": "a2"})
    assert err["payload"] == {"code": "already_resolved", "message": "Approval already resolved", "fatal": False,
                              "request_id": "a2"}
    err = await c.request("approval.resolve", {"approval_id": "nope", "choice": "once", "request_id": "a3"})
    assert err["payload"]["code"] == "approval_not_found"
    await c.close()


async def test_two_devices_race_an_approval(loomi):
    a, _ = await pair(loomi, "A")
    b, _ = await pair(loomi, "B")
    await a.send("session.send", {"text": "/approve rm -rf build", "request_id": "r1"})
    pa = (await a.recv_type("approval.required"))["payload"]
    pb = (await b.recv_type("approval.required"))["payload"]
    assert pa == pb
    aid = pa["approval_id"]
    await asyncio.gather(
        a.send("approval.resolve", {"approval_id": aid, "choice": "once", "request_id": "ra"}),
        b.send("approval.resolve", {"approval_id": aid, "choice": "deny", "request_id": "rb"}),
    )

    ra, rb = await a.answer("ra"), await b.answer("rb")
    assert sorted([ra["type"], rb["type"]]) == ["ack", "error"]
    loser = ra if ra["type"] == "error" else rb
    assert loser["payload"]["code"] == "already_resolved"
    winner_choice = "once" if ra["type"] == "ack" else "deny"
    ea, eb = await a.recv_type("approval.resolved"), await b.recv_type("approval.resolved")
    assert ea["payload"]["choice"] == eb["payload"]["choice"] == winner_choice
    await a.close()
    await b.close()


async def test_cancel_pause_and_resume(loomi):
    c, _ = await pair(loomi)
    r = await c.request("session.send", {"text": "/slow 30", "request_id": "r1"})
    task_id, run_id = r["payload"]["result"]["task_id"], r["payload"]["result"]["run_id"]
    await c.recv_type("run.delta")
    x = await c.request("run.cancel", {"run_id": run_id, "request_id": "c1"})
    assert x["payload"] == ack("c1", {"run_id": run_id})
    done = await c.recv_type("run.completed")
    assert done["payload"]["status"] == "cancelled" and done["payload"]["finished"] is False
    err = await c.request("run.cancel", {"run_id": run_id, "request_id": "c2"})
    assert err["payload"]["code"] == "not_found"

    # pause = soft interrupt (the run ends, the task stays), resume = "continue" injected
    r = await c.request("session.send", {"task_id": task_id, "text": "/slow 30", "request_id": "r2"})
    run2 = r["payload"]["result"]["run_id"]
    await c.recv_type("run.delta")
    p = await c.request("run.pause", {"run_id": run2, "request_id": "p1"})
    assert p["payload"] == ack("p1", {"run_id": run2})
    assert (await c.recv_type("run.completed"))["payload"]["status"] == "cancelled"
    res = await c.request("run.resume", {"run_id": run2, "request_id": "u1"})
    run3 = res["payload"]["result"]["run_id"]
    assert res["payload"]["result"]["task_id"] == task_id and run3 not in (run_id, run2)
    msg = await c.recv_type("session.message")
    assert msg["payload"]["text"] == "continue" and msg["run_id"] == run3
    done = await c.recv_type("run.completed")
    assert done["payload"]["text"] == "Echo: continue"
    await c.close()


async def test_failed_run_sends_completed_then_failed(loomi):
    c, _ = await pair(loomi)
    await c.send("session.send", {"text": "/fail", "request_id": "r1"})
    done = await c.recv_type("run.completed")
    failed = await c.recv()
    assert done["payload"]["status"] == "failed" and done["payload"]["error"] == "demo failure"
    assert failed["type"] == "run.failed" and failed["seq"] == done["seq"] + 1
    assert failed["payload"] == {"run_id": done["run_id"], "error": "demo failure", "status": "failed"}
    await c.close()


async def test_task_list(loomi):
    c, _ = await pair(loomi)
    r1 = await c.request("session.send", {"text": "one", "request_id": "r1"})
    await c.recv_type("run.completed")
    await c.request("session.send", {"text": "/approve true", "request_id": "r2"})
    await c.recv_type("approval.required")
    res = await c.request("task.list", {"request_id": "t1"}, answer="task.list.result")
    assert res["type"] == "task.list.result" and res["payload"]["request_id"] == "t1"
    tasks = res["payload"]["tasks"]
    assert [t["status"] for t in tasks] == ["waiting", "idle"]
    t = tasks[1]
    assert set(t) == {"task_id", "title", "status", "created_at", "updated_at", "preview", "source"}
    assert t["task_id"] == r1["payload"]["result"]["task_id"] and t["title"] == "one"
    assert t["preview"] == "Echo: one" and t["source"] == "demo" and isinstance(t["created_at"], float)
    res = await c.request("task.list", {"request_id": "t2", "status_filter": "idle", "limit": 5},
                          answer="task.list.result")
    assert [x["task_id"] for x in res["payload"]["tasks"]] == [t["task_id"]]
    res = await c.request("task.list", {"request_id": "t3", "limit": 1}, answer="task.list.result")
    assert len(res["payload"]["tasks"]) == 1
    err = await c.request("task.list", {"request_id": "t4", "status_filter": "bogus"}, answer="task.list.result")
    assert err["type"] == "error" and err["payload"]["code"] == "bad_request"
    await c.close()


async def test_tool_and_notification_frames(loomi):
    c, _ = await pair(loomi)
    await c.send("session.send", {"text": "/tool grep", "request_id": "r1"})
    st = await c.recv_type("run.tool_started")
    fin = await c.recv_type("run.tool_finished")
    assert st["payload"] == {"run_id": st["run_id"], "iteration": 0, "tool": "grep", "preview": "grep(input=demo)",
                             "index": 1, "call_id": st["payload"]["call_id"]}
    assert fin["payload"] == {"run_id": st["run_id"], "iteration": 0, "tool": "grep", "ok": True, "index": 1,
                              "call_id": st["payload"]["call_id"], "duration": fin["payload"]["duration"],
                              "status": "completed", "error": None}
    await c.recv_type("run.completed")
    await c.send("session.send", {"text": "/notify the build is green", "request_id": "r2"})
    n = await c.recv_type("notification")
    assert n["payload"] == {"category": "result", "title": "Demo notification", "text": "the build is green",
                            "source": "demo", "requires_attention": False}
    assert n["run_id"] is None
    await c.close()


async def test_clarification_extension(loomi):
    c, _ = await pair(loomi)
    await c.send("session.send", {"text": "/clarify Deploy now?", "request_id": "r1"})
    q = await c.recv_type("clarify.required")
    assert q["payload"] == {"clarify_id": q["payload"]["clarify_id"], "run_id": q["run_id"], "task_id": q["task_id"],
                            "question": "Deploy now?", "choices": ["yes", "no"], "allow_free_text": True}
    cid = q["payload"]["clarify_id"]
    a = await c.request("clarify.resolve", {"clarify_id": cid, "response": "yes", "request_id": "q1"})
    assert a["payload"] == ack("q1", {"clarify_id": cid, "response": "yes"})
    r = await c.recv_type("clarify.resolved")
    assert r["payload"] == {"clarify_id": cid, "response": "yes", "decided_by": "remote", "surface": "loomi"}
    assert (await c.recv_type("run.completed"))["payload"]["text"] == 'You answered: "yes"'
    err = await c.request("clarify.resolve", {"clarify_id": cid, "response": "no", "request_id": "q2"})
    assert err["payload"]["code"] == "already_resolved"
    await c.close()


async def test_attachment_extension_with_authenticated_download(loomi):
    c, creds = await pair(loomi)
    await c.send("session.send", {"text": "/attach", "request_id": "r1"})
    f = await c.recv_type("attachment.added")
    p = f["payload"]
    assert p["filename"] == "demo.txt" and p["mime_type"] == "text/plain" and p["size"] == 16
    assert p["url"] == f"/attachments/{p['attachment_id']}" and p["run_id"] == f["run_id"]
    assert p["kind"] == "document" and p["inline_image"] is False
    auth = {"Authorization": f"Bearer {creds['device_id']}:{creds['credential']}"}
    async with aiohttp.ClientSession() as http:
        async with http.get(base(loomi) + p["url"], headers=auth) as r:
            assert r.status == 200 and await r.read() == b"demo attachment\n"
            assert r.headers["Content-Type"].startswith("text/plain")
        async with http.get(base(loomi) + p["url"]) as r:
            assert r.status == 401
        bad = {"Authorization": f"Bearer {creds['device_id']}:wrong"}
        async with http.get(base(loomi) + p["url"], headers=bad) as r:
            assert r.status == 401
        async with http.get(base(loomi) + "/attachments/" + "0" * 32, headers=auth) as r:
            assert r.status == 404
        async with http.get(base(loomi) + "/attachments/..%2F..%2Fbridge.db", headers=auth) as r:
            assert r.status == 404
    await c.close()


async def test_client_ping_unknown_types_and_garbage(loomi):
    c, _ = await pair(loomi)
    await c.send("ping")
    pong = await c.recv()
    assert pong["type"] == "pong" and pong["payload"] == {} and pong["seq"] == 1
    await c.send("no.such.thing", {"request_id": "u1"})
    err = await c.recv()
    assert err["payload"] == {"code": "unknown_type", "message": "Unknown type 'no.such.thing'", "fatal": False,
                              "request_id": "u1"}
    await c.ws.send_str("{not json")
    assert (await c.recv())["payload"]["code"] == "invalid_json"
    await c.ws.send_str('{"v":1,"type":"session.send","payload":[1]}')
    assert (await c.recv())["payload"]["code"] == "bad_request"
    await c.ws.send_bytes(b"\x00\x01")
    assert (await c.recv())["payload"]["code"] == "bad_request"
    await c.send("hello", {"token": "x"})
    assert (await c.recv())["payload"]["code"] == "bad_request"
    await c.send("ping")
    last = await c.recv()
    assert last["type"] == "pong" and last["seq"] == 7  # every reply took the next seq
    await c.close()


async def test_oversized_frame_is_refused(loomi):
    c, _ = await pair(loomi)
    await c.ws.send_str('{"v":1,"type":"ping","payload":{"x":"' + "a" * (2 * 1024 * 1024 + 10) + '"}}')
    frames, close = await c.closed()
    assert [f["payload"] for f in frames] == [
        {"code": "too_large", "message": "Frame larger than 2097152 bytes", "fatal": True}]
    assert close == 1009  # refused from its header, before it is read; the error goes first
    await c.close()


async def test_server_pings_and_drops_a_silent_device(loomi):
    fe = loomi.frontends["loomi"]
    fe.ping_interval = 0.05
    fe.pong_timeout = 0.03  # each ping is missed 30 ms after it, 3 in a row close the socket
    c, _ = await pair(loomi)
    frames, close = await c.closed()
    assert [f["type"] for f in frames] == ["ping", "ping", "ping", "error"]
    assert frames[-1]["payload"]["code"] == "heartbeat_timeout" and frames[-1]["payload"]["fatal"] is True
    assert close == 4008
    await c.close()


async def test_a_device_answering_pings_stays(loomi):
    fe = loomi.frontends["loomi"]
    fe.ping_interval = 0.02
    c, creds = await pair(loomi)
    for _ in range(8):
        f = await c.recv_type("ping")
        await c.send("pong")
    assert fe.registry.devices[creds["device_id"]].conn is not None
    await c.close()


async def test_a_second_socket_of_the_same_device_replaces_the_first(loomi):
    c, creds = await pair(loomi)
    from .helpers import resume

    c2, ok = await resume(loomi, creds, last_seq=1)
    frames, close = await c.closed()
    assert frames[-1]["payload"]["code"] == "replaced" and close == 4000
    await c2.send("ping")
    assert (await c2.recv())["type"] == "pong"
    await c.close()
    await c2.close()


async def test_garbage_over_the_socket_keeps_the_server_serving(loomi):
    import random

    rnd = random.Random(7)
    c, _ = await pair(loomi)
    samples = ['{"type":', "[]", "null", '{"type":5}', '{"v":1,"type":"run.cancel","payload":{"run_id":[]}}',
               '{"v":1,"type":"task.list","payload":{"limit":-1e400}}', '"\\ud800"', "{}" * 1000]
    samples += ["".join(chr(rnd.randrange(1, 0x2FFF)) for _ in range(rnd.randrange(1, 80))) for _ in range(150)]
    for s in samples:
        await c.ws.send_str(s)
    errors = [await c.recv() for _ in samples]
    assert all(e["type"] == "error" and e["payload"]["fatal"] is False for e in errors)
    await c.send("ping")
    assert (await c.recv())["type"] == "pong"
    await c.close()
