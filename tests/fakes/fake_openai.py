"""A scriptable fake of the OpenAI chat-completions API, on loopback, for agent tests.

Endpoints: ``GET /v1/models`` and ``POST /v1/chat/completions`` (server-sent events when the
request has ``"stream": true``, one JSON body otherwise). Everything else is 404.

What the model answers is scripted per test:

- ``replies``: a FIFO of :class:`Reply` (or plain strings); each request takes the next one;
- ``responder``: ``callable(request_body) -> Reply | str | None``, asked first when set
  (``None`` falls through to the FIFO);
- when both are exhausted: ``Echo: <last user text>``.

A :class:`Reply` is plain text split into chunks (explicit ``chunks``, or word by word),
optional reasoning, optional tool calls (their arguments streamed in two fragments), delays
before the first byte and between chunks, a finish reason, usage, or an HTTP error instead.

Library use (sync or async; the server runs in its own thread)::

    with FakeOpenAI([Reply(tool_calls=[ToolCall("bash", {"command": "echo hi"})]), "Done."]) as llm:
        llm.base_url      # http://127.0.0.1:PORT/v1
        llm.requests      # every request body received, in order

Command line: ``python -m tests.fakes.fake_openai [--port N] [--script replies.json]``
prints the base URL, then serves until interrupted. ``replies.json`` is a list of strings
or Reply-like objects: ``{"text": ..., "chunks": [...], "reasoning": ...,
"tool_calls": [{"name": ..., "arguments": {...}}], "delay": s, "chunk_delay": s,
"status": 500, "error": "..."}``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Optional, Union

__all__ = ["FakeOpenAI", "Reply", "ToolCall", "last_role", "last_user_text", "text_of", "tool_then_text"]

_ids = itertools.count(1)


@dataclass
class ToolCall:
    name: str
    arguments: Union[dict, str] = field(default_factory=dict)
    id: Optional[str] = None

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class Reply:
    text: str = ""
    chunks: Optional[list[str]] = None  # explicit text pieces; default: word by word
    reasoning: Optional[str] = None  # streamed as delta.reasoning_content
    tool_calls: list[ToolCall] = field(default_factory=list)
    delay: float = 0.0  # seconds before the response starts
    chunk_delay: float = 0.0  # seconds between streamed chunks
    finish_reason: Optional[str] = None  # default: "tool_calls" with tool calls, else "stop"
    usage: Optional[dict] = None  # default: computed from the request and the reply
    status: int = 200  # anything else: an OpenAI-style error body with `error`
    error: str = "fake failure"

    @classmethod
    def of(cls, value: Union["Reply", str, dict]) -> "Reply":
        if isinstance(value, Reply):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if isinstance(value, dict):
            data = dict(value)
            data["tool_calls"] = [
                tc if isinstance(tc, ToolCall) else ToolCall(**tc) for tc in data.get("tool_calls", [])
            ]
            return cls(**data)
        raise TypeError(f"cannot make a Reply of {value!r}")

    def text_chunks(self) -> list[str]:
        if self.chunks is not None:
            return list(self.chunks)
        return re.findall(r"\S+\s*|\s+", self.text) if self.text else []


def text_of(content: Any, sep: str = "") -> str:
    """The text of a message's ``content`` (a string, or a list of parts joined with ``sep``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return sep.join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def last_role(body: dict) -> Optional[str]:
    messages = body.get("messages") or []
    return messages[-1].get("role") if messages else None


def last_user_text(body: dict, sep: str = "") -> str:
    for m in reversed(body.get("messages") or []):
        if m.get("role") == "user":
            return text_of(m.get("content"), sep)
    return ""


def tool_then_text(name: str, arguments: dict, final: Union[Reply, str], *, text: str = "") -> Callable[[dict], Reply]:
    """Responder: a tool call when the conversation does not end with a tool result, else ``final``."""

    def respond(body: dict) -> Reply:
        if last_role(body) == "tool":
            return Reply.of(final)
        return Reply(text=text, tool_calls=[ToolCall(name, arguments)])

    return respond


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


class FakeOpenAI:
    def __init__(
        self,
        replies: Iterable[Union[Reply, str, dict]] = (),
        *,
        responder: Optional[Callable[[dict], Union[Reply, str, None]]] = None,
        models: Iterable[str] = ("fake-model",),
        api_key: Optional[str] = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._replies: deque[Reply] = deque(Reply.of(r) for r in replies)
        self.responder = responder
        self.models = list(models)
        self.api_key = api_key
        self.host = host
        self._port = port
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        self._server: Optional[ThreadingHTTPServer] = None
        self._thread: Optional[threading.Thread] = None
        self._stopping = threading.Event()  # set by stop(): streams in progress end early

    # ------------------------------------------------------------------ scripting

    def add(self, *replies: Union[Reply, str, dict]) -> "FakeOpenAI":
        with self._lock:
            self._replies.extend(Reply.of(r) for r in replies)
        return self

    def _next_reply(self, body: dict) -> Reply:
        if self.responder is not None:
            got = self.responder(body)
            if got is not None:
                return Reply.of(got)
        with self._lock:
            if self._replies:
                return self._replies.popleft()
        return Reply(text=f"Echo: {last_user_text(body)}")

    # ------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        assert self._server is not None, "not started"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def start(self) -> "FakeOpenAI":
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = ThreadingHTTPServer((self.host, self._port), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._server = None

    def __enter__(self) -> "FakeOpenAI":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def __aenter__(self) -> "FakeOpenAI":
        return self.start()

    async def __aexit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ HTTP

    def _handler_class(self) -> type:
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

            def _authorized(self) -> bool:
                if fake.api_key is None or self.headers.get("Authorization") == f"Bearer {fake.api_key}":
                    return True
                self._json(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                           "code": "invalid_api_key"}})
                return False

            def do_GET(self) -> None:
                if self.path.split("?")[0].rstrip("/") != "/v1/models":
                    self._json(404, {"error": {"message": "not found"}})
                    return
                if self._authorized():
                    self._json(200, {"object": "list", "data": [
                        {"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in fake.models]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if self.path.split("?")[0].rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": "not found"}})
                    return
                if not self._authorized():
                    return
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    self._json(400, {"error": {"message": "body is not JSON"}})
                    return
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = fake._next_reply(body)
                if reply.delay:
                    time.sleep(reply.delay)  # the subject: a slow model, as the test scripted it
                if reply.status != 200:
                    self._json(reply.status, {"error": {"message": reply.error, "type": "server_error"}})
                    return
                try:
                    if body.get("stream"):
                        self._stream(body, reply)
                    else:
                        self._json(200, fake._completion(body, reply))
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (an abort): nothing to do

            def _stream(self, body: dict, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                for i, chunk in enumerate(fake._chunks(body, reply)):
                    if i and reply.chunk_delay:
                        time.sleep(reply.chunk_delay)  # the subject: a model streaming slowly (scripted)
                    if fake._stopping.is_set():
                        return  # the server is stopping: end the stream without [DONE]
                    self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                    self.wfile.flush()
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        return Handler

    # ------------------------------------------------------------------ bodies

    @staticmethod
    def _finish(reply: Reply) -> str:
        return reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")

    @staticmethod
    def _usage(body: dict, reply: Reply) -> dict:
        if reply.usage is not None:
            return reply.usage
        prompt = sum(_approx_tokens(text_of(m.get("content"))) for m in body.get("messages") or [])
        completion = _approx_tokens(reply.text) + sum(_approx_tokens(tc.arguments_json()) for tc in reply.tool_calls)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _completion(self, body: dict, reply: Reply) -> dict:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text or None}
        if reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": tc.id or f"call_fake_{next(_ids)}", "type": "function",
                 "function": {"name": tc.name, "arguments": tc.arguments_json()}}
                for tc in reply.tool_calls
            ]
        return {
            "id": f"chatcmpl-fake-{next(_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model") or (self.models[0] if self.models else "fake-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": self._finish(reply)}],
            "usage": self._usage(body, reply),
        }

    def _chunks(self, body: dict, reply: Reply) -> Iterable[dict]:
        cid = f"chatcmpl-fake-{next(_ids)}"
        model = body.get("model") or (self.models[0] if self.models else "fake-model")
        created = int(time.time())

        def chunk(delta: dict, finish: Optional[str] = None) -> dict:
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        yield chunk({"role": "assistant", "content": ""})
        if reply.reasoning:
            for piece in re.findall(r"\S+\s*|\s+", reply.reasoning):
                yield chunk({"reasoning_content": piece})
        for piece in reply.text_chunks():
            yield chunk({"content": piece})
        for index, tc in enumerate(reply.tool_calls):
            args = tc.arguments_json()
            half = len(args) // 2
            yield chunk({"tool_calls": [{"index": index, "id": tc.id or f"call_fake_{next(_ids)}", "type": "function",
                                         "function": {"name": tc.name, "arguments": ""}}]})
            for part in (args[:half], args[half:]):
                if part:
                    yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        yield chunk({}, self._finish(reply))
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": self._usage(body, reply)}


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fakes.fake_openai", description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model", action="append", dest="models", help="model id to list (repeatable)")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--script", help="JSON file: list of replies, used in order, then echo")
    args = parser.parse_args(argv)
    replies: list = []
    if args.script:
        with open(args.script, encoding="utf-8") as f:
            replies = json.load(f)
    fake = FakeOpenAI(replies, models=args.models or ["fake-model"], api_key=args.api_key, host=args.host,
                      port=args.port).start()
    print(fake.base_url, flush=True)
    try:
        while True:
            time.sleep(3600)  # the command-line fake serves until Ctrl-C (its server runs in a thread)
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
