"""End to end: the real bridge, a real long-lived pi session with the lvmh extension, a fake model.

One pi 1.6.0 process (``pi --mode rpc``, the extension from ``lvmh_adapter/pi_extension``) talks to
agent-bridge's lvmh front end; the model is ``tests/fakes/fake_openai.py``. In order:

1. the session is ``online: true`` over REST ``GET /api/sessions`` and in the browser stream's
   ``session_list``, with pi's own session id, model and the repo;
2. a REST prompt runs a turn; its events are persisted in order (seqs ascending, the only gaps are
   the numbers of the live ``message_update`` deltas, which the subscribed browser received and
   REST never returns);
3. a bash tool call shows as ``tool_execution_start``/``_end`` with the model's toolCallId;
4. a REST abort during a slow streamed reply ends the run (``agent_settled {aborted: true}``);
5. the daemon stops while a reply is streaming and pi takes a prompt on stdin meanwhile; a new bridge
   on the same data dir and port gets everything after ``welcome.lastSeq`` replayed, once;
6. the session is a conversation for a Pheby client, and ``chat.send`` from Pheby reaches pi.

Skips (with the reason) without Node >= 22.19 and pi 1.6.0 (``scripts/install-pi.sh``).
"""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.conftest import LVMH_TOKEN
from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCall, last_role, last_user_text
from tests.lvmh.helpers import Api, Browser
from tests.pheby.client import PhebyClient
from tests.pi.helpers import (
    gaps_inside_assistant_messages,
    mirrored,
    persisted_shape,
    pi_environment,
    start_rpc,
    text_deltas,
)

pytestmark = pytest.mark.pi

ADAPTERS = ("pheby", "lvmh")
TOOL_CALL_ID = "call_echo_hi"
STEADY = [f"part{i} " for i in range(60)]  # 60 chunks, 50 ms apart: still streaming when the daemon stops
SLOW = " ".join(["slow"] * 400)  # 20 s at 50 ms a word: only an abort ends it in time


def reply_to(text: str) -> str:
    return f"Reply to: {text}"


def responder(body: dict) -> Reply:
    text = last_user_text(body)
    if last_role(body) == "tool":
        return Reply(chunks=["The tool ", "said hi."])
    if "run echo" in text:
        return Reply(text="Running it.", tool_calls=[ToolCall("bash", {"command": "echo hi"}, id=TOOL_CALL_ID)])
    if "SLOW" in text:
        return Reply(text=SLOW, chunk_delay=0.05)
    if "STEADY" in text:
        return Reply(chunks=STEADY, chunk_delay=0.05)
    return Reply(text=reply_to(text))


@pytest.fixture
def llm():
    with FakeOpenAI(responder=responder) as fake:
        yield fake


def user_turn(request: dict) -> tuple:
    """(role, text) of the last message the model was sent."""
    return last_role(request), last_user_text(request)


def of_run(events: list[dict], after: int) -> list[dict]:
    return [e for e in events if e["seq"] > after]


def ends(events: list[dict], role: str) -> list[dict]:
    return [e["message"] for e in events if e["type"] == "message_end" and e["message"]["role"] == role]


class Live:
    """Every event a browser received for one session (persisted kinds and live deltas)."""

    def __init__(self, browser: Browser, sid: str) -> None:
        self.browser = browser
        self.sid = sid
        self.events: list[dict] = []

    async def pump(self, pred, timeout: float = 30.0) -> list[dict]:
        """Read frames until ``pred(self.events)`` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not pred(self.events):
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"browser never saw it: {[(e['seq'], e['type']) for e in self.events][-30:]}")
            frame = await self.browser.recv(left)
            if frame["type"] == "events" and frame["sessionId"] == self.sid:
                self.events.extend(frame["events"])
        return self.events


async def test_real_pi_through_the_bridge(pi_cli, node22, llm, service_factory, tmp_path, unused_tcp_port):
    svc = await service_factory(adapters=ADAPTERS, lvmh_port=unused_tcp_port)
    port = svc.ports["lvmh"]
    assert port == unused_tcp_port
    env = pi_environment(tmp_path, node22, llm.base_url, f"ws://127.0.0.1:{port}/agent/ws", LVMH_TOKEN,
                         LVMH_BACKOFF_BASE_MS="50", LVMH_BACKOFF_MAX_MS="300")
    api = Api(port)
    browser = await Browser(port).open()
    rpc = await start_rpc(pi_cli, env)
    to_close = [api, browser]
    try:
        # --- 1. online over REST and the browser stream ---------------------------------------------
        state = await rpc.command("get_state", timeout=60)
        sid = state["data"]["sessionId"]
        listed = await browser.session_list(lambda ss: any(s["id"] == sid and s["online"] for s in ss), timeout=30)
        mine = next(s for s in listed if s["id"] == sid)
        status, sessions = await api.get("/api/sessions")
        assert status == 200
        rest = next(s for s in sessions if s["id"] == sid)
        assert rest["online"] is True and mine["online"] is True
        for view in (rest, mine):
            assert view["cwd"] == env.cwd and view["model"] == "fake-model" and view["provider"] == "fake"
            assert view["agent"] is True and view["repo"] == "group/project" and isinstance(view["startedAt"], int)

        # --- 2. a REST prompt runs a turn, persisted in order; deltas only live ------------------------
        await browser.send({"type": "subscribe", "sessionId": sid})
        live = Live(browser, sid)
        prompt = "Hello from REST"
        status, body = await api.post(f"/api/sessions/{sid}/prompt", {"message": prompt})
        assert status == 200 and body["ok"] is True and body["promptId"], body
        await rpc.settled(1)
        evs = await api.wait_events(sid, lambda e: bool(e) and e[-1]["type"] == "agent_settled", timeout=10)
        assert [e["type"] for e in evs] == ["agent_start", "message_start", "message_end", "message_start",
                                            "message_end", "agent_end", "agent_settled"]
        assert evs[0]["seq"] == 1
        assert [m["text"] for m in ends(evs, "user")] == [prompt]
        assert [m["text"] for m in ends(evs, "assistant")] == [reply_to(prompt)]
        assert evs[-1]["aborted"] is False and evs[-2]["usage"]["outputTokens"] > 0
        gaps = gaps_inside_assistant_messages(evs)
        await live.pump(lambda got: any(e["type"] == "agent_settled" for e in got))
        deltas = [e for e in live.events if e["type"] == "message_update"]
        assert [d["seq"] for d in deltas] == gaps and len(gaps) == text_deltas(rpc.events()) > 1
        assert "".join(d["delta"] for d in deltas) == reply_to(prompt)
        assert [e for e in live.events if e["type"] != "message_update"] == evs  # the same events, live
        assert user_turn(llm.requests[-1]) == ("user", prompt)

        # --- 3. a tool call ---------------------------------------------------------------------------
        done = evs[-1]["seq"]
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "Please run echo hi"})
        assert status == 200
        await rpc.settled(2)
        evs = await api.wait_events(sid, lambda e: e[-1]["type"] == "agent_settled" and e[-1]["seq"] > done)
        run = of_run(evs, done)
        start = next(e for e in run if e["type"] == "tool_execution_start")
        end = next(e for e in run if e["type"] == "tool_execution_end")
        assert start["toolCallId"] == end["toolCallId"] == TOOL_CALL_ID
        assert start["toolName"] == end["toolName"] == "bash" and start["args"] == {"command": "echo hi"}
        assert end["isError"] is False and end["resultPreview"] == "hi\n"
        call, final = ends(run, "assistant")
        assert [(c["id"], c["name"]) for c in call["toolCalls"]] == [(TOOL_CALL_ID, "bash")]
        assert [(m["toolCallId"], m["text"]) for m in ends(run, "toolResult")] == [(TOOL_CALL_ID, "hi\n")]
        assert final["text"] == "The tool said hi."
        assert run.index(start) < run.index(end) < run.index(next(e for e in run if e["type"] == "agent_settled"))

        # --- 4. abort during a slow streamed reply --------------------------------------------------
        done = evs[-1]["seq"]
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "SLOW please"})
        assert status == 200
        await live.pump(lambda got: sum(e["type"] == "message_update" and e["seq"] > done for e in got) >= 3)
        status, body = await api.post(f"/api/sessions/{sid}/abort")
        assert (status, body) == (200, {"ok": True})
        await rpc.settled(3, timeout=15)
        evs = await api.wait_events(sid, lambda e: e[-1]["type"] == "agent_settled" and e[-1]["seq"] > done)
        run = of_run(evs, done)
        assert run[-1]["aborted"] is True
        partial = ends(run, "assistant")[-1]
        assert partial["stopReason"] == "aborted" and SLOW.startswith(partial["text"]) and partial["text"] != SLOW

        # --- 5. the daemon restarts mid-session -----------------------------------------------------
        done = evs[-1]["seq"]
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "STEADY please"})
        assert status == 200
        await live.pump(lambda got: any(e["type"] == "message_update" and e["seq"] > done for e in got))
        await browser.close()
        to_close.remove(browser)
        # held still while the bridge shuts down, so it cannot reconnect into the closing daemon;
        # then it streams the rest of the reply with no daemon at all (into its buffer)
        rpc.pause()
        try:
            await svc.stop()
        finally:
            rpc.resume()
        await rpc.settled(4, timeout=15)
        offline = "typed into pi while the daemon was down"
        assert (await rpc.command("prompt", message=offline))["success"]
        await rpc.settled(5)
        assert "disconnected" in env.log_text()

        # pi is held still while the new bridge starts and a browser subscribes, so that browser
        # sees the whole replay (pi itself keeps its buffer; nothing of it is lost by the pause)
        rpc.pause()
        try:
            svc = await service_factory(adapters=ADAPTERS, lvmh_port=port)
            assert svc.ports["lvmh"] == port
            browser = await Browser(port).open()
            to_close.append(browser)
            listed = await browser.session_list()
            assert [s["online"] for s in listed if s["id"] == sid] == [False]  # known from the database
            await browser.send({"type": "subscribe", "sessionId": sid})
            live = Live(browser, sid)
            status, evs = await api.get(f"/api/sessions/{sid}/events")
            assert status == 200
            stored = evs[-1]["seq"]  # what the first bridge had persisted when it stopped
        finally:
            rpc.resume()
        await browser.session_list(lambda ss: any(s["id"] == sid and s["online"] for s in ss), timeout=30)
        evs = await api.wait_events(sid, lambda e: len(ends(e, "user")) == 5 and e[-1]["type"] == "agent_settled")
        welcome = re.findall(rf"session {sid}: reconnected to \S+, lastSeq=(\d+), replaying (\d+)", env.log_text())
        assert len(welcome) == 1, env.log_text()
        last_seq, replayed = int(welcome[0][0]), int(welcome[0][1])
        assert last_seq == stored
        steady_user = next(e for e in evs if e["type"] == "message_end" and e["message"]["text"] == "STEADY please")
        assert steady_user["seq"] <= last_seq  # stored before the stop ...
        after = of_run(evs, last_seq)
        assert len(after) == replayed  # ... and everything after lastSeq came in the replay
        assert [m["text"] for m in ends(after, "user")] == [offline]
        assert [m["text"] for m in ends(after, "assistant")] == ["".join(STEADY), reply_to(offline)]
        assert [e["aborted"] for e in after if e["type"] == "agent_settled"] == [False, False]
        # the new bridge's browser got exactly the replayed events, each once
        await live.pump(lambda got: any(e["type"] == "agent_settled" and e["seq"] == evs[-1]["seq"] for e in got))
        assert [e["seq"] for e in live.events] == [e["seq"] for e in after]
        # the whole session, across the restart: what pi did, mirrored once each, no seq used twice
        assert persisted_shape(evs) == mirrored(rpc.events())
        gaps_inside_assistant_messages(evs)
        assert evs[-1]["seq"] == len(evs) + text_deltas(rpc.events())

        # --- 6. the same session from a Pheby client ---------------------------------------------------
        pheby = await PhebyClient.connect(svc.ports["pheby"])
        to_close.append(pheby)
        listed = await pheby.request({"type": "conversation.list", "request_id": "l"}, "conversation.snapshot")
        conv = [c for c in listed["conversations"] if c["conversation_id"] == sid]
        assert len(conv) == 1 and conv[0]["source"] == "lvmh", listed
        text = "Hello pi, this is Pheby"
        await pheby.send({"type": "chat.send", "conversation_id": sid, "text": text, "request_id": "p1"})
        accepted = await pheby.recv_type("run.accepted", "error")
        assert accepted["type"] == "run.accepted" and accepted["request_id"] == "p1", accepted
        frames = await pheby.collect_until("run.finished", timeout=30, run_id=accepted["run_id"])
        complete = [f for f in frames if f["type"] == "message.complete" and f.get("conversation_id") == sid]
        assert [f["text"] for f in complete] == [reply_to(text)]
        assert frames[-1]["status"] == "completed"
        assert user_turn(llm.requests[-1]) == ("user", text)
        evs = await api.wait_events(sid, lambda e: len(ends(e, "user")) == 6 and e[-1]["type"] == "agent_settled")
        assert ends(evs, "user")[-1]["text"] == text and ends(evs, "assistant")[-1]["text"] == reply_to(text)

        # pi quits: bye is the session's last event
        assert await rpc.close() == 0
        evs = await api.wait_events(sid, lambda e: e[-1]["type"] == "bye", timeout=15)
        assert evs[-1]["reason"] == "shutdown"
        status, sessions = await api.get("/api/sessions")
        assert next(s for s in sessions if s["id"] == sid)["online"] is False
    finally:
        await rpc.kill()
        for c in to_close:
            await c.close()
    assert LVMH_TOKEN not in env.log_text()
