"""Hypothesis: garbage into the plugin and browser decoders and the REST inputs; the server keeps serving.

The socket-level properties run against one real service on a background event loop
(Hypothesis drives synchronous examples; each example talks to the server over its
real sockets through ``run``).
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.parse

import aiohttp
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lvmh_adapter import codec, protocol
from lvmh_adapter.codec import FrameError
from tests.conftest import LVMH_TOKEN, make_config

SID = "fuzz-session-1"
AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_leaf = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | st.text(max_size=20)
json_value = st.recursive(json_leaf, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
                          max_leaves=12)
types = st.sampled_from(["hello", "message_start", "message_update", "message_end", "tool_execution_start",
                         "tool_execution_update", "tool_execution_end", "agent_start", "agent_end", "agent_settled",
                         "session_info", "bye", "buffer_overflow", "welcome", "prompt"]) | st.text(max_size=12)
envelope = st.fixed_dictionaries(
    {},
    optional={
        "v": st.sampled_from([1, 2, 0, "1", True, None, 1.0]),
        "sessionId": st.sampled_from([SID, "other", "", "a/b", None, 7]) | st.text(max_size=10),
        "seq": st.integers(-3, 2**60) | st.sampled_from([None, "1", 1.5, True]),
        "ts": st.integers(-5, 2**62) | st.floats(allow_nan=False) | st.sampled_from([None, "now"]),
        "type": types,
        "session": json_value,
        "message": json_value,
        "delta": json_value,
        "usage": json_value,
        "toolCallId": json_value,
        "args": json_value,
    },
)
plugin_frames = (
    st.text(max_size=60)
    | st.binary(max_size=60)
    | json_value.map(json.dumps)
    | envelope.map(json.dumps)
    | envelope.map(lambda d: json.dumps(d).encode())
)
browser_frames = (
    st.text(max_size=60)
    | st.binary(max_size=40)
    | st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["subscribe", "unsubscribe", "ping"]) | st.text(max_size=8),
            "sessionId": st.sampled_from([SID, "", "x y", None, 3]) | st.text(max_size=12),
            "after": st.integers(-2, 2**60) | st.sampled_from([None, "1", 1.5]),
        },
    ).map(json.dumps)
)


# --- pure decoders -----------------------------------------------------------------------------------


@given(plugin_frames)
@settings(max_examples=400, deadline=None)
def test_plugin_decoder_raises_only_frame_errors(data):
    try:
        frame = codec.decode_plugin_frame(data)
    except FrameError as exc:
        assert exc.code and exc.message
        return
    assert codec.is_session_id(frame.session_id)
    assert frame.type == "hello" or 1 <= frame.seq <= codec.MAX_SEQ
    stored = json.loads(frame.raw)
    assert stored["seq"] == frame.obj["seq"] and stored["type"] == frame.type and stored["ts"] == frame.ts


@given(st.lists(plugin_frames, max_size=8))
@settings(max_examples=200, deadline=None)
def test_plugin_state_machine_never_raises(frames):
    s = protocol.PluginProtocol()
    for data in frames:
        action = s.receive(data)
        if isinstance(action, protocol.Hello) and not action.rebind:
            s.welcomed()


@given(browser_frames)
@settings(max_examples=300, deadline=None)
def test_browser_decoder_raises_only_frame_errors(data):
    try:
        frame = codec.decode_browser_frame(data)
    except FrameError:
        return
    assert frame.type in ("subscribe", "unsubscribe")


@given(json_value, st.text(min_size=1, max_size=5).filter(codec.is_session_id))
def test_session_info_always_normalises(raw, sid):
    info = codec.session_info(raw, sid)
    assert set(info) == {"id", "name", "cwd", "model", "provider", "agent", "repo", "startedAt"}
    assert isinstance(info["cwd"], str) and isinstance(info["agent"], bool) and isinstance(info["startedAt"], int)
    json.dumps(info)


# --- over the sockets ----------------------------------------------------------------------------------


class LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="fuzz-loop", daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 20.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Live:
    """One service, one plugin socket and one browser socket, on a background loop."""

    async def start(self, tmp_path):
        from bridge_core.bridge.demo import DemoAgent
        from cli.serve import Service

        self.svc = Service(make_config(tmp_path, ("lvmh",)), DemoAgent())
        await self.svc.start()
        self.base = f"http://127.0.0.1:{self.svc.ports['lvmh']}"
        self.http = aiohttp.ClientSession()
        await self.reconnect_plugin()
        self.browser = await self.http.ws_connect(f"{self.base}/ws?token={LVMH_TOKEN}")
        conv = self.svc.bridge.create_conversation("fuzz target")
        self.bridge_sid = conv.conversation_id

    async def reconnect_plugin(self):
        self.plugin = await self.http.ws_connect(f"{self.base}/agent/ws", headers=AUTH)
        await self.plugin.send_str(json.dumps({"v": 1, "type": "hello", "sessionId": SID, "seq": 0, "ts": 1,
                                               "session": {"name": "fuzz"}}))
        assert (await self.plugin.receive_json(timeout=5))["type"] == "welcome"

    async def probe(self, ws, data) -> list[dict]:
        """Send ``data`` then a probe that always fails; the frames answered in between."""
        if isinstance(data, bytes):
            await ws.send_bytes(data)
        else:
            await ws.send_str(data)
        await ws.send_str("probe")
        out = []
        while True:
            msg = await ws.receive(timeout=5)
            assert msg.type == aiohttp.WSMsgType.TEXT, (msg.type, msg.data, data)
            frame = json.loads(msg.data)
            if frame.get("type") == "error" and frame.get("error") == "Frame is not valid JSON":
                return out
            out.append(frame)

    async def request(self, method, path, data=None):
        async with self.http.request(method, self.base + path, data=data, headers=AUTH) as resp:
            body = await resp.read()
            return resp.status, body

    async def stop(self):
        await self.http.close()
        await self.svc.stop()


@pytest.fixture
def live(tmp_path, monkeypatch):
    monkeypatch.setattr(protocol, "MAX_ERROR_FRAMES", 10**9)  # every bad frame is answered: the probe works
    lt = LoopThread()
    lv = Live()
    lt.run(lv.start(tmp_path))
    lv.lt = lt
    yield lv
    lt.run(lv.stop())
    lt.close()


@FUZZ
@given(data=plugin_frames)
def test_plugin_socket_survives_garbage(live, data):
    if isinstance(data, (bytes, str)) and _is_probe_like(data):
        return
    answered = live.lt.run(live.probe(live.plugin, data))
    for frame in answered:
        assert frame["type"] in ("error", "welcome"), frame
    assert not live.plugin.closed


@FUZZ
@given(data=browser_frames)
def test_browser_socket_survives_garbage(live, data):
    if isinstance(data, (bytes, str)) and _is_probe_like(data):
        return
    answered = live.lt.run(live.probe(live.browser, data))
    for frame in answered:
        assert frame["type"] in ("error", "session_list", "session_entry", "events", "spawn_status"), frame
    assert not live.browser.closed


def _is_probe_like(data) -> bool:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    try:
        json.loads(text)
        return False
    except ValueError:
        return True  # answered exactly like the probe; covered by the decoder property


query_values = st.text(max_size=12) | st.integers(-10, 2**70).map(str)


@FUZZ
@given(query=st.dictionaries(st.sampled_from(["after", "limit", "x", "token"]) | st.text(max_size=5), query_values,
                             max_size=3),
       target=st.sampled_from([SID, "bridge", "unknown", "a%2Fb", "%00", "..", "x" * 300]))
def test_events_query_strings_never_500(live, query, target):
    sid = live.bridge_sid if target == "bridge" else target
    path = f"/api/sessions/{sid}/events?" + urllib.parse.urlencode(query)
    status, body = live.lt.run(live.request("GET", path))
    assert status in (200, 400, 404), (status, body)
    parsed = json.loads(body)
    if status == 200:
        assert isinstance(parsed, list)
    else:
        assert isinstance(parsed["error"], str)


bodies = (
    st.binary(max_size=80)
    | json_value.map(lambda v: json.dumps(v).encode())
    | st.fixed_dictionaries({}, optional={"message": json_value, "choice": json_value, "response": json_value,
                                          "reason": json_value}).map(lambda v: json.dumps(v).encode())
)


@FUZZ
@given(body=bodies,
       path=st.sampled_from(["/api/sessions/{plugin}/prompt", "/api/sessions/{bridge}/prompt",
                             "/api/sessions/{plugin}/abort", "/api/sessions/{bridge}/abort",
                             "/api/sessions/nobody/prompt", "/api/approvals/abc", "/api/clarifications/abc",
                             "/api/sessions", "/api/attachments/abc"]))
def test_rest_bodies_never_500(live, body, path):
    method = "GET" if path in ("/api/sessions", "/api/attachments/abc") else "POST"
    url = path.format(plugin=SID, bridge=live.bridge_sid)
    status, raw = live.lt.run(live.request(method, url, data=body))
    assert status in (200, 400, 404, 409, 413), (status, raw, body)
    parsed = json.loads(raw)
    if status != 200:
        assert isinstance(parsed["error"], str)
    # the plugin socket is still fine (it may have been sent prompts/aborts)
    assert not live.plugin.closed
