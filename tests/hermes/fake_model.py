"""A scripted OpenAI-compatible model server on loopback, for the Hermes end-to-end tests.

``GET /v1/models`` and ``POST /v1/chat/completions`` (SSE when ``stream: true``);
everything else is 404 (Hermes probes ``/api/show`` for Ollama). The reply is
chosen by keywords in the last user message:

- ``DANGER <path>``  tool call ``terminal {"command": "rm -rf <path>"}`` (needs approval)
- ``CLARIFY``        tool call ``clarify {question, choices: [staging, production]}``
- ``MEDIA <path>``   the text ``Here is your report.`` and a ``MEDIA:<path>`` line
- ``SLOW``           a long reply, one word every 0.2 s (for cancelling)
- anything else      ``Hello from fake model! You said: <text>``, streamed in small pieces

After a tool result the reply quotes it (``Tool said: ...``). Every request is
recorded (``requests``) so tests can check the model and reasoning Hermes sent.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

MODELS = ("fake-model", "fake-model-2")
SLOW_WORDS = 400
SLOW_DELAY = 0.2


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


class FakeModel:
    def __init__(self) -> None:
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        self.server: Optional[ThreadingHTTPServer] = None
        self.thread: Optional[threading.Thread] = None
        self.stop_event = threading.Event()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "FakeModel":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, code: int, obj: Any) -> None:
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": m, "object": "model", "owned_by": "fake"} for m in MODELS]})
                else:
                    self._json(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found"}})
                    return
                try:
                    req = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "bad json"}})
                    return
                with fake._lock:
                    fake.requests.append(req)
                fake.respond(self, req)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-model", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    # --- the script -------------------------------------------------------------

    def plan(self, req: dict) -> tuple[list[str], Optional[dict], float]:
        """(text pieces, tool call or None, delay between pieces)."""
        messages = req.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "tool":
            result = _text_of(last.get("content"))[:300]
            return _pieces(f"Tool said: {result}"), None, 0.0
        user = ""
        for m in reversed(messages):
            if m.get("role") == "user":
                user = _text_of(m.get("content"))
                break
        # Hermes folds a message that interrupted a turn into the next user message
        # ("SLOW story please" ... "hello again"): the script answers the newest line
        # (Hermes's own bracketed notes, which may span lines, are not what the user typed)
        typed = re.sub(r"\[[^\]]*\]", "", user, flags=re.S)
        lines = [ln.strip() for ln in typed.splitlines() if ln.strip()]
        user = lines[-1] if lines else ""
        if "DANGER" in user:
            target = (re.search(r"DANGER\s+(\S+)", user) or [None, "/tmp/nothing-here"])[1]
            return [], {"name": "terminal", "arguments": {"command": f"rm -rf {target}"}}, 0.0
        if "CLARIFY" in user:
            return [], {
                "name": "clarify",
                "arguments": {"question": "Deploy to staging or production?", "choices": ["staging", "production"]},
            }, 0.0
        if "MEDIA" in user:
            path = (re.search(r"MEDIA\s+(\S+)", user) or [None, "/tmp/none.pdf"])[1]
            return _pieces("Here is your report.") + [f"\nMEDIA:{path}"], None, 0.0
        if "SLOW" in user:
            return [("w%d " % i) for i in range(SLOW_WORDS)], None, SLOW_DELAY
        said = user.strip()[:200]
        return _pieces(f"Hello from fake model! You said: {said}"), None, 0.0

    def respond(self, h: BaseHTTPRequestHandler, req: dict) -> None:
        pieces, tool, delay = self.plan(req)
        model = req.get("model") or MODELS[0]
        if not req.get("stream"):
            msg: dict = {"role": "assistant", "content": "".join(pieces) or None}
            if tool is not None:
                msg["tool_calls"] = [_tool_call(tool)]
            h._json(200, {  # type: ignore[attr-defined]
                "id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls" if tool else "stop"}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            })
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True

        def chunk(delta: dict, finish: Optional[str] = None) -> bytes:
            obj = {
                "id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        try:
            h.wfile.write(chunk({"role": "assistant", "content": ""}))
            for i, piece in enumerate(pieces):
                if self.stop_event.is_set():
                    return
                h.wfile.write(chunk({"content": piece}))
                h.wfile.flush()
                if delay:
                    time.sleep(delay)
            if tool is not None:
                call = _tool_call(tool)
                args = call["function"]["arguments"]
                h.wfile.write(chunk({"tool_calls": [{"index": 0, "id": call["id"], "type": "function",
                                                     "function": {"name": call["function"]["name"], "arguments": ""}}]}))
                for i in range(0, len(args), 16):
                    h.wfile.write(chunk({"tool_calls": [{"index": 0, "function": {"arguments": args[i:i + 16]}}]}))
            h.wfile.write(chunk({}, "tool_calls" if tool else "stop"))
            if (req.get("stream_options") or {}).get("include_usage"):
                usage = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": int(time.time()),
                         "model": model, "choices": [],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
                h.wfile.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            h.wfile.write(b"data: [DONE]\n\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


_CALLS = [0]


def _tool_call(tool: dict) -> dict:
    _CALLS[0] += 1
    return {
        "id": f"call_fake_{_CALLS[0]}",
        "type": "function",
        "function": {"name": tool["name"], "arguments": json.dumps(tool["arguments"])},
    }


def _pieces(text: str, size: int = 6) -> list[str]:
    return [text[i:i + size] for i in range(0, len(text), size)]
