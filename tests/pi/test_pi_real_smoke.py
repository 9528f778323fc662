"""Real pi 1.6.0 with the lvmh extension, against the fake OpenAI server and a small fake daemon.

- ``pi -p`` (print mode): one prompt with a bash tool call; the run starts before the
  handshake, so its first events are buffered and replayed after ``welcome``.
- ``pi --mode rpc`` (long-lived, like a terminal session): the daemon's ``prompt`` runs a turn
  through ``pi.sendUserMessage(..., {deliverAs: "steer"})``, ``abort`` stops a slow one,
  ``set_session_name`` gives ``session_info``, ``new_session`` a new sessionId with seq from 1.

Real pi against agent-bridge's own daemon (REST, browser stream, Pheby, a daemon restart) is
``test_pi_bridge_e2e.py``; the shared pieces live in ``helpers.py``.

Offline: PI_OFFLINE, no version check, no telemetry, HOME and PI_CODING_AGENT_DIR in tmp_path.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from typing import Any, Callable, Optional

import pytest
from aiohttp import WSMsgType, web

from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCall, last_role, last_user_text
from tests.pi.conftest import EXTENSION_DIR
from tests.pi.helpers import check_envelopes, pi_args, pi_environment, start_rpc

pytestmark = pytest.mark.pi

TOKEN = "smoke-token-5f0c2e"


class FakeDaemon:
    """Just enough lvmh daemon: bearer check, hello -> welcome(lastSeq), records every frame."""

    def __init__(self, token: str = TOKEN) -> None:
        self.token = token
        self.frames: list[dict] = []
        self.rejected = 0
        self.sockets: dict[str, web.WebSocketResponse] = {}
        self.persisted: dict[str, dict[int, dict]] = {}
        self._changed = asyncio.Event()
        self._runner: Optional[web.AppRunner] = None
        self.url = ""

    async def start(self) -> "FakeDaemon":
        app = web.Application()
        app.router.add_get("/agent/ws", self._ws)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"ws://127.0.0.1:{port}/agent/ws"
        return self

    async def stop(self) -> None:
        for ws in list(self.sockets.values()):
            await ws.close()
        if self._runner:
            await self._runner.cleanup()

    async def _ws(self, request: web.Request) -> web.StreamResponse:
        if request.headers.get("Authorization") != f"Bearer {self.token}":
            self.rejected += 1
            return web.Response(status=401)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            self.frames.append(frame)
            sid = frame.get("sessionId")
            if frame.get("type") == "hello":
                self.sockets[sid] = ws
                rows = self.persisted.get(sid, {})
                await ws.send_json({"v": 1, "type": "welcome", "sessionId": sid, "seq": 0,
                                    "ts": int(time.time() * 1000), "lastSeq": max(rows, default=0)})
            elif frame.get("type") != "message_update":
                self.persisted.setdefault(sid, {}).setdefault(frame["seq"], frame)
            self._changed.set()
        return ws

    async def send(self, sid: str, frame: dict) -> None:
        await self.sockets[sid].send_json({"v": 1, "sessionId": sid, "seq": 0, "ts": int(time.time() * 1000), **frame})

    def events(self, sid: str) -> list[dict]:
        return [f for f in self.frames if f.get("sessionId") == sid and f.get("type") != "hello"]

    async def wait_for(self, pred: Callable[[], Any], timeout: float = 30.0, what: str = "condition") -> Any:
        deadline = time.monotonic() + timeout
        while True:
            value = pred()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                seen = [(f.get("sessionId", "")[-6:], f.get("seq"), f.get("type")) for f in self.frames]
                raise AssertionError(f"timed out waiting for {what}; daemon saw {seen}")
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), min(left, 0.5))
            except asyncio.TimeoutError:
                pass


def _responder(body: dict) -> Reply:
    """bash tool call first, then a short answer; prompts with SLOW stream slowly (for abort)."""
    text = last_user_text(body)
    if "SLOW" in text and last_role(body) == "user":
        return Reply(text=" ".join(["word"] * 200), chunk_delay=0.05)
    if last_role(body) == "tool":
        return Reply(chunks=["The tool ", "said hello. ", "Done."])
    return Reply(text="Let me run a command.", tool_calls=[ToolCall("bash", {"command": "echo hello-from-tool"})])


@pytest.fixture
async def daemon():
    d = await FakeDaemon().start()
    yield d
    await d.stop()


@pytest.fixture
def llm():
    with FakeOpenAI(responder=_responder) as fake:
        yield fake


@pytest.fixture
def pi_env(tmp_path, llm, daemon, node22):
    return pi_environment(tmp_path, node22, llm.base_url, daemon.url, TOKEN)


async def test_print_mode_run_with_a_tool_call(pi_cli, pi_env, daemon, llm):
    proc = await asyncio.create_subprocess_exec(
        *pi_args(pi_cli, "-p", "Please run echo"), cwd=pi_env.cwd, env=pi_env.env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    log = pi_env.log.read_text() if pi_env.log.exists() else ""
    assert proc.returncode == 0, (out, err, log)
    assert b"Done." in out

    hello = await daemon.wait_for(lambda: next((f for f in daemon.frames if f["type"] == "hello"), None), 10, "hello")
    sid = hello["sessionId"]
    session = hello["session"]
    assert hello["seq"] == 0 and session["id"] == sid
    assert session["cwd"] == pi_env.cwd and session["model"] == "fake-model" and session["provider"] == "fake"
    assert session["agent"] is True and session["repo"] == "group/project" and isinstance(session["startedAt"], int)

    await daemon.wait_for(lambda: any(f["type"] == "bye" for f in daemon.events(sid)), 10, "bye")
    evs = daemon.events(sid)
    check_envelopes(evs, sid)
    types = [e["type"] for e in evs]
    # message_update deltas and bash's tool_execution_update partials vary with timing (the run
    # starts before the handshake, and deltas are never buffered); the rest is exact.
    assert [t for t in types if t not in ("message_update", "tool_execution_update")] == [
        "agent_start",
        "message_start", "message_end",  # user (pi's empty system message is not forwarded)
        "message_start", "message_end",  # assistant with the tool call
        "tool_execution_start", "tool_execution_end",
        "message_start", "message_end",  # toolResult
        "message_start", "message_end",  # final answer
        "agent_end", "agent_settled", "bye",
    ], types
    assert "tool_execution_update" in types
    ends = [e["message"] for e in evs if e["type"] == "message_end"]
    assert [m["role"] for m in ends] == ["user", "assistant", "toolResult", "assistant"]
    user, call, result, final = ends
    assert user["text"] == "Please run echo"
    assert call["toolCalls"][0]["name"] == "bash"
    assert json.loads(call["toolCalls"][0]["argsJson"]) == {"command": "echo hello-from-tool"}
    assert result["toolCallId"] == call["toolCalls"][0]["id"] and result["text"] == "hello-from-tool\n"
    assert final["text"] == "The tool said hello. Done." and final["stopReason"] == "stop"
    starts = [e["message"] for e in evs if e["type"] == "message_start"]
    assert [m["id"] for m in starts] == [m["id"] for m in ends] and len({m["id"] for m in ends}) == 4
    tend = next(e for e in evs if e["type"] == "tool_execution_end")
    assert tend["toolName"] == "bash" and tend["isError"] is False and tend["resultPreview"] == "hello-from-tool\n"
    usage = next(e for e in evs if e["type"] == "agent_end")["usage"]
    assert usage["inputTokens"] > 0 and usage["outputTokens"] > 0
    assert next(e for e in evs if e["type"] == "agent_settled")["aborted"] is False
    assert TOKEN not in pi_env.log.read_text()


async def test_daemon_down_pi_works_and_exits_promptly(pi_cli, pi_env, llm, unused_tcp_port):
    env = dict(pi_env.env, LVMH_URL=f"ws://127.0.0.1:{unused_tcp_port}/agent/ws")
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *pi_args(pi_cli, "-p", "Please run echo", extension=os.path.join(EXTENSION_DIR, "lvmh-agent.mjs")),
        cwd=pi_env.cwd, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, (out, err)
    assert b"Done." in out and b"lvmh" not in out + err, (out, err)
    assert elapsed < 30, elapsed
    log = pi_env.log.read_text()
    assert "cannot reach" in log and "events not delivered" in log, log


async def test_rpc_session_prompt_abort_rename_and_new_session(pi_cli, pi_env, daemon, llm):
    rpc = await start_rpc(pi_cli, pi_env)
    try:
        hello = await daemon.wait_for(lambda: next((f for f in daemon.frames if f["type"] == "hello"), None), 60,
                                      "hello")
        sid = hello["sessionId"]
        await daemon.wait_for(lambda: sid in daemon.sockets, 10, "welcome sent")

        # a prompt from the web runs a turn (tool call included), delivered as steer
        await daemon.send(sid, {"type": "prompt", "promptId": "p1", "message": "Please run echo (from web)"})
        await daemon.wait_for(lambda: any(e["type"] == "agent_settled" for e in daemon.events(sid)), 60, "turn 1")
        evs = daemon.events(sid)
        users = [e["message"]["text"] for e in evs if e["type"] == "message_end" and e["message"]["role"] == "user"]
        assert users == ["Please run echo (from web)"]
        assert any(e["type"] == "tool_execution_start" and e["args"] == {"command": "echo hello-from-tool"}
                   for e in evs)
        assert any(e["type"] == "message_update" for e in evs), "live deltas are streamed"
        assert llm.requests[0]["messages"][-1]["role"] == "user"

        # a slow run, aborted from the daemon
        await daemon.send(sid, {"type": "prompt", "promptId": "p2", "message": "SLOW please"})
        await daemon.wait_for(lambda: sum(e["type"] == "message_update" for e in daemon.events(sid)) >= 8, 30,
                              "slow run streaming")
        await daemon.send(sid, {"type": "abort"})
        settled = await daemon.wait_for(
            lambda: [e for e in daemon.events(sid) if e["type"] == "agent_settled"][1:], 30, "aborted settle")
        assert settled[0]["aborted"] is True
        aborted = [e["message"] for e in daemon.events(sid) if e["type"] == "message_end"][-1]
        assert aborted["role"] == "assistant" and aborted["stopReason"] == "aborted"

        # rename -> session_info
        assert (await rpc.command("set_session_name", name="smoke session"))["success"]
        info = await daemon.wait_for(
            lambda: next((e for e in daemon.events(sid) if e["type"] == "session_info"), None), 10, "session_info")
        assert info["session"]["name"] == "smoke session" and info["session"]["id"] == sid

        # /new: bye for the old session, a new sessionId from seq 1
        assert (await rpc.command("new_session"))["success"]
        hello2 = await daemon.wait_for(
            lambda: next((f for f in daemon.frames if f["type"] == "hello" and f["sessionId"] != sid), None), 20,
            "second hello")
        sid2 = hello2["sessionId"]
        await daemon.wait_for(lambda: any(e["type"] == "bye" for e in daemon.events(sid)), 10, "bye of the first")
        check_envelopes(daemon.events(sid), sid)
        await daemon.wait_for(lambda: sid2 in daemon.sockets, 10, "welcome 2")
        await daemon.send(sid2, {"type": "prompt", "promptId": "p3", "message": "hello again"})
        await daemon.wait_for(lambda: any(e["type"] == "agent_settled" for e in daemon.events(sid2)), 60, "turn 2")
        assert daemon.events(sid2)[0]["seq"] == 1

        assert await rpc.close() == 0
        await daemon.wait_for(lambda: any(e["type"] == "bye" for e in daemon.events(sid2)), 10, "bye on exit")
        check_envelopes(daemon.events(sid2), sid2)
    finally:
        await rpc.kill()
    log = pi_env.log.read_text()
    assert TOKEN not in log
    assert "prompt p1" in log and "abort from the daemon" in log


async def test_rpc_resumed_session_continues_after_the_daemons_last_seq(pi_cli, pi_env, daemon, llm, tmp_path):
    rpc = await start_rpc(pi_cli, pi_env, "--session-dir", str(tmp_path / "sessions"), persist=True)
    try:
        hello = await daemon.wait_for(lambda: next((f for f in daemon.frames if f["type"] == "hello"), None), 60,
                                      "hello")
        sid = hello["sessionId"]
        await daemon.wait_for(lambda: sid in daemon.sockets, 10, "welcome")
        await daemon.send(sid, {"type": "prompt", "promptId": "p1", "message": "hi"})
        await daemon.wait_for(lambda: any(e["type"] == "agent_settled" for e in daemon.events(sid)), 60, "turn 1")
        state = await rpc.command("get_state")
        session_file = state["data"]["sessionFile"]
        assert (await rpc.command("new_session"))["success"]
        last = await daemon.wait_for(
            lambda: next((e["seq"] for e in daemon.events(sid) if e["type"] == "bye"), None), 20, "bye")
        # /resume: the same session id again, in the same process; its seqs follow the daemon's
        assert (await rpc.command("switch_session", sessionPath=session_file))["success"]
        await daemon.wait_for(lambda: sum(f["type"] == "hello" and f["sessionId"] == sid for f in daemon.frames) == 2,
                              20, "hello again")
        await daemon.send(sid, {"type": "prompt", "promptId": "p2", "message": "again"})
        await daemon.wait_for(lambda: sum(e["type"] == "agent_settled" for e in daemon.events(sid)) == 2, 60,
                              "turn 2")
        evs = daemon.events(sid)
        check_envelopes(evs, sid)
        after = [e for e in evs if e["seq"] > last]
        assert after[0]["seq"] == last + 1 and after[0]["type"] == "agent_start"
        assert len(daemon.persisted[sid]) == len([e for e in evs if e["type"] != "message_update"])
        assert await rpc.close() == 0
    finally:
        await rpc.kill()
    assert f"daemon has seq <= {last}, continuing after it" in pi_env.log.read_text()
