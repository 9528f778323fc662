"""The fake OpenAI server speaks the chat-completions wire format that clients parse."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.fakes.fake_openai import FakeOpenAI, Reply, ToolCall, tool_then_text

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _post(url: str, body: dict, key: str = "k") -> tuple[int, bytes]:
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _sse(raw: bytes) -> list:
    out = []
    for block in raw.decode().split("\n\n"):
        if block.startswith("data: "):
            data = block[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_non_streaming_fifo_then_echo():
    with FakeOpenAI(["first", Reply(text="", tool_calls=[ToolCall("bash", {"command": "ls"}, id="c1")])]) as f:
        msgs = {"model": "fake-model", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}
        status, body = _post(f.base_url, msgs)
        first = json.loads(body)
        assert status == 200 and first["object"] == "chat.completion"
        assert first["choices"][0] == {"index": 0, "message": {"role": "assistant", "content": "first"},
                                       "finish_reason": "stop"}
        assert first["usage"]["total_tokens"] == first["usage"]["prompt_tokens"] + first["usage"]["completion_tokens"]
        second = json.loads(_post(f.base_url, msgs)[1])["choices"][0]
        assert second["finish_reason"] == "tool_calls"
        assert second["message"]["tool_calls"] == [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]
        third = json.loads(_post(f.base_url, msgs)[1])
        assert third["choices"][0]["message"]["content"] == "Echo: hi"
        assert len(f.requests) == 3 and f.headers[0]["authorization"] == "Bearer k"


def test_streaming_text_reasoning_tool_calls_and_usage():
    reply = Reply(chunks=["Hel", "lo"], reasoning="think hard", tool_calls=[ToolCall("bash", {"command": "echo hi"})])
    with FakeOpenAI([reply]) as f:
        status, raw = _post(f.base_url, {"model": "m", "stream": True, "stream_options": {"include_usage": True},
                                         "messages": [{"role": "user", "content": "x"}]})
    chunks = _sse(raw)
    assert status == 200 and chunks[-1] == "[DONE]"
    deltas = [c["choices"][0]["delta"] for c in chunks[:-1] if c["choices"]]
    assert "".join(d.get("content", "") for d in deltas) == "Hello"
    assert "".join(d.get("reasoning_content", "") for d in deltas) == "think hard"
    calls = [tc for d in deltas for tc in d.get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "bash" and calls[0]["id"].startswith("call_")
    assert json.loads("".join(tc["function"]["arguments"] for tc in calls)) == {"command": "echo hi"}
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"]][-1] == "tool_calls"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] > 0
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == "m" for c in chunks[:-1])


def test_responder_delays_errors_and_auth():
    with FakeOpenAI(responder=tool_then_text("bash", {"command": "ls"}, Reply(text="done", delay=0.2)),
                    api_key="sekrit", models=["a", "b"]) as f:
        assert _post(f.base_url, {"messages": []}, key="wrong")[0] == 401
        first = json.loads(_post(f.base_url, {"messages": [{"role": "user", "content": "go"}]}, key="sekrit")[1])
        assert first["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "bash"
        t0 = time.monotonic()
        body = {"messages": [{"role": "user", "content": "go"}, {"role": "tool", "content": "a"}]}
        second = json.loads(_post(f.base_url, body, key="sekrit")[1])
        assert second["choices"][0]["message"]["content"] == "done" and time.monotonic() - t0 >= 0.2
        req = urllib.request.Request(f.base_url + "/models", headers={"Authorization": "Bearer sekrit"})
        assert [m["id"] for m in json.loads(urllib.request.urlopen(req, timeout=10).read())["data"]] == ["a", "b"]
    with FakeOpenAI([Reply(status=503, error="overloaded")]) as f:
        status, body = _post(f.base_url, {"messages": []})
        assert status == 503 and json.loads(body)["error"]["message"] == "overloaded"
        assert _post(f.url + "/v1/nothing", {})[0] == 404


def test_reply_from_plain_data():
    r = Reply.of({"text": "a b", "tool_calls": [{"name": "t", "arguments": {"x": 1}}], "chunk_delay": 0.01})
    assert r.text_chunks() == ["a ", "b"] and r.tool_calls[0].name == "t" and r.chunk_delay == 0.01
    with pytest.raises(TypeError):
        Reply.of(3)


async def test_async_context_manager():
    async with FakeOpenAI(["x"]) as f:
        assert f.base_url.startswith("http://127.0.0.1:")


def test_command_line(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["scripted reply"]))
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.fake_openai", "--script", str(script)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        body = json.loads(_post(url, {"messages": [{"role": "user", "content": "q"}]})[1])
        assert body["choices"][0]["message"]["content"] == "scripted reply"
    finally:
        proc.terminate()
        proc.wait(10)
