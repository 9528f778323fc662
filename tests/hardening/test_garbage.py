"""Garbage: Hypothesis-driven fuzzing of every decoder over real sockets.

Decoders: Pheby (before and after hello), Loomi (before and after hello), lvmh
plugin ``/agent/ws``, lvmh browser ``/ws``, the WebSocket framing itself, raw
HTTP, and REST bodies, paths and query strings (lvmh ``/api``, Loomi's
loopback endpoints, Pheby and Loomi attachment downloads).

Every input must be answered with the protocol's error (an error frame, an
error close, a 4xx with the protocol's error body) or a documented drop (a
valid lvmh event is acknowledged through ``welcome.lastSeq``, not answered;
after 100 error frames an lvmh socket drops further bad frames silently);
never a 5xx, never a stack trace or internal detail; and the server keeps
serving. Each example is sent and checked synchronously (the sockets live in a
background event loop), so Hypothesis can shrink a failing input.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import urllib.parse
from typing import Any, Optional

import aiohttp
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lvmh_adapter import codec as lvmh_codec

from .clients import PhebyClient
from .proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from .summary import SUMMARY, scaled
from .wsraw import OP_BINARY, OP_CLOSE, OP_TEXT, RawWS, encode_frame

pytestmark = pytest.mark.hardening

EXAMPLES = scaled(300)
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=False, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.filter_too_much, HealthCheck.data_too_large])

LEAKS = ("Traceback", 'File "', '.py"', ".py,", "site-packages", "/work/", "/root/", "/tmp/", "sqlite3",
         " object at 0x", "KeyError", "TypeError", "AttributeError", "ValueError", "IndexError",
         "RuntimeError", "AssertionError", "NoneType")


def assert_no_leak(reply: Any, sent: Any) -> None:
    text = reply if isinstance(reply, str) else (reply.decode("utf-8", "replace") if isinstance(reply, bytes) else repr(reply))
    sent_text = sent if isinstance(sent, str) else (sent.decode("utf-8", "replace") if isinstance(sent, bytes) else repr(sent))
    for marker in LEAKS:
        if marker in text and marker not in sent_text:
            raise AssertionError(f"internal detail {marker!r} in a reply: {text[:500]}")


_sources = itertools.count(1)


def random_source() -> str:
    """A new loopback address per call (failed hellos lock an address out; Hypothesis seeds ``random``)."""
    n = next(_sources)
    return f"127.{100 + (n >> 16) % 150}.{(n >> 8) % 256}.{1 + n % 254}"


# --- strategies -----------------------------------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
)
json_values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=4),
                                                        st.dictionaries(st.text(max_size=8), c, max_size=4)),
                           max_leaves=12)


def _safe(obj: Any) -> Any:
    """Never let a fuzzed message be a demo command (a /slow or /bench turn would only cost time)."""
    if isinstance(obj, dict):
        return {k: _safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_safe(v) for v in obj]
    if isinstance(obj, str) and obj.lstrip().startswith("/"):
        return "x" + obj
    return obj


def text_frames(objects: st.SearchStrategy) -> st.SearchStrategy:
    """JSON-ish text: typed objects, any JSON, truncated JSON, NaN tokens, plain text."""
    return st.one_of(
        objects.map(lambda o: json.dumps(_safe(o))),
        objects.map(lambda o: json.dumps(_safe(o))[: max(1, len(json.dumps(o)) // 2)]),
        json_values.map(lambda v: json.dumps(_safe(v))),
        st.text(max_size=120).map(lambda t: t if not t.lstrip().startswith("/") else "x" + t),
        st.just('{"type": NaN}'), st.just("[]"), st.just("null"), st.just('{"type": "ping"'), st.just(""),
    )


def frames(objects: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(text_frames(objects).map(lambda t: (OP_TEXT, t)),
                     st.binary(max_size=120).map(lambda b: (OP_BINARY, b)))


PHEBY_TYPES = ["hello", "ping", "conversation.list", "conversation.open", "conversation.create",
               "conversation.rename", "conversation.delete", "chat.send", "run.cancel", "approval.respond",
               "clarify.respond", "models.list", "model.set", "models.current", "reasoning.set",
               "reasoning.current", "yolo.current"]
PHEBY_FIELDS = ["request_id", "conversation_id", "text", "name", "limit", "run_id", "approval_id", "choice",
                "reason", "clarify_id", "response", "model", "provider", "effort", "enabled", "secret",
                "protocol_version"]
LOOMI_TYPES = ["hello", "ping", "pong", "session.send", "run.cancel", "run.pause", "run.resume",
               "approval.resolve", "clarify.resolve", "task.list"]
LOOMI_FIELDS = ["request_id", "task_id", "text", "run_id", "approval_id", "choice", "reason", "clarify_id",
                "response", "limit", "status_filter", "token", "device_id", "credential", "last_seq",
                "protocol_version", "device_info"]
PLUGIN_TYPES = ["hello", "message_start", "message_update", "message_end", "tool_execution_start",
                "tool_execution_update", "tool_execution_end", "agent_start", "agent_end", "agent_settled",
                "session_info", "bye", "Bad-Type", ""]
PLUGIN_FIELDS = ["message", "delta", "toolCallId", "toolName", "args", "partial", "isError", "resultPreview",
                 "usage", "session", "reason", "aborted"]


def typed(types: list, fields: list, base: Optional[dict] = None) -> st.SearchStrategy:
    kinds = st.one_of(st.sampled_from(types), st.text(max_size=20), json_values)
    return st.builds(
        lambda t, extra, keep: {**({k: v for k, v in (base or {}).items() if keep}), "type": t, **extra},
        kinds, st.dictionaries(st.one_of(st.sampled_from(fields), st.text(max_size=8)), json_values, max_size=6),
        st.booleans())


def loomi_typed() -> st.SearchStrategy:
    return st.builds(lambda t, payload, v, env: {"v": v, "type": t, "payload": payload, **env},
                     st.one_of(st.sampled_from(LOOMI_TYPES), st.text(max_size=20), json_values),
                     st.one_of(st.dictionaries(st.one_of(st.sampled_from(LOOMI_FIELDS), st.text(max_size=8)),
                                               json_values, max_size=6), json_values),
                     st.one_of(st.just(1), json_values),
                     st.dictionaries(st.sampled_from(["seq", "ts", "event_id", "task_id", "run_id"]), json_values,
                                     max_size=3))


def plugin_typed(sid: str) -> st.SearchStrategy:
    return st.builds(
        lambda t, extra, v, seq, ts, own: {"v": v, "sessionId": sid if own else extra.pop("sessionId", "other"),
                                            "seq": seq, "ts": ts, "type": t, **extra},
        st.one_of(st.sampled_from(PLUGIN_TYPES), st.text(max_size=20)),
        st.dictionaries(st.one_of(st.sampled_from(PLUGIN_FIELDS), st.text(max_size=8)), json_values, max_size=5),
        st.one_of(st.just(1), json_values), st.one_of(st.integers(min_value=-5, max_value=2**60), json_values),
        st.one_of(st.integers(min_value=0, max_value=2**53), json_values), st.booleans())


# --- the server and a background loop -----------------------------------------------------------------------


class Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro, timeout: float = 60.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def garbage_env(tmp_path_factory):
    srv = BridgeProcess(str(tmp_path_factory.mktemp("garbage")), config={"demo": {"approval_timeout": 5}})
    srv.start()
    loop = Loop()
    env = {"srv": srv, "loop": loop, "ports": srv.ports}
    yield env
    try:
        out = srv.all_output()
        assert "Traceback" not in out, out[out.find("Traceback") - 1000: out.find("Traceback") + 3000]
    finally:
        loop.close()
        assert srv.stop() == 0


def still_serving(env) -> None:
    async def check():
        c = await PhebyClient.connect(env["ports"]["pheby"])
        try:
            cid = await c.create("still serving")
            frames = await c.run(cid, "are you there")
            assert frames[-1]["status"] == "completed"
        finally:
            await c.close()
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{env['ports']['loomi']}/health") as r:
                assert r.status == 200
            async with http.get(f"http://127.0.0.1:{env['ports']['lvmh']}/api/sessions",
                                headers={"Authorization": f"Bearer {LVMH_TOKEN}"}) as r:
                assert r.status == 200
    env["loop"].run(check())
    assert env["srv"].alive


class Counter:
    def __init__(self, name: str):
        self.name = name
        self.tried = 0
        self.answered = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        SUMMARY.garbage(self.name, self.tried, self.answered)


# --- WebSocket decoders after authentication ------------------------------------------------------------


class Session:
    """A socket that is re-opened when it closes or has taken ``per_socket`` examples (rate limits)."""

    def __init__(self, env, opener, per_socket: int):
        self.env = env
        self.opener = opener
        self.per_socket = per_socket
        self.ws: Optional[RawWS] = None
        self.used = 0
        self.n = 0

    async def get(self) -> RawWS:
        if self.ws is None or self.used >= self.per_socket or self.ws.reader.at_eof():
            if self.ws is not None:
                self.ws.abort()
            self.ws = await self.opener()
            self.used = 0
        self.used += 1
        self.n += 1
        return self.ws

    async def read_until(self, ws: RawWS, pred, timeout: float = 10.0) -> list:
        out = []
        while True:
            data = await ws.recv_text(timeout)
            if data is None:
                raise ConnectionError(f"closed {ws.close_code} {ws.close_reason!r}")
            f = orjson.loads(data)
            out.append((data, f))
            if pred(f):
                return out


def _send(ws: RawWS, frame) -> None:
    op, data = frame
    if op == OP_TEXT:
        ws.send_text(data)
    else:
        ws.send_binary(data)


async def _open_pheby(port: int) -> RawWS:
    ws = await RawWS.connect(port)
    ws.send_text(orjson.dumps({"type": "hello", "secret": PHEBY_SECRET, "protocol_version": 1}))
    assert orjson.loads(await ws.recv_text())["type"] == "ready"
    return ws


def test_fuzz_pheby_frames(garbage_env):
    env = garbage_env
    sess = Session(env, lambda: _open_pheby(env["ports"]["pheby"]), per_socket=80)  # 2 frames each, 200 burst

    with Counter("Pheby frames") as count:
        @FUZZ
        @given(frames(typed(PHEBY_TYPES, PHEBY_FIELDS)))
        def check(frame):
            async def go():
                ws = await sess.get()
                _send(ws, frame)
                rid = f"sentinel-{sess.n}"
                ws.send_text(orjson.dumps({"type": "ping", "request_id": rid}))
                got = await sess.read_until(ws, lambda f: f.get("type") == "pong" and f.get("request_id") == rid)
                answers = got[:-1]
                for data, _ in got:
                    assert_no_leak(data, frame[1])
                return answers

            count.tried += 1
            answers = env["loop"].run(go())
            # every frame is answered: an error, or the reply of a valid request (broadcasts aside)
            assert answers, f"no answer to {frame!r}"
            for _, f in answers:
                if f.get("type") == "error":
                    assert f["error"]["code"] in ("invalid_json", "unknown_type", "bad_request", "not_found",
                                                  "conversation_not_found", "approval_not_found", "clarify_not_found",
                                                  "too_large", "rate_limited", "run_active", "not_implemented"), f
            count.answered += 1

        check()
    still_serving(env)


async def _open_loomi(port: int, device: tuple) -> RawWS:
    ws = await RawWS.connect(port)
    ws.send_text(orjson.dumps({"v": 1, "type": "hello", "payload": {
        "protocol_version": 1, "device_id": device[0], "credential": device[1]}}))
    assert orjson.loads(await ws.recv_text())["type"] == "hello.ok"
    return ws


def _pair_device(env) -> tuple:
    async def pair():
        from bench.load import pair_loomi_devices

        async with aiohttp.ClientSession() as http:
            return (await pair_loomi_devices(http, env["ports"]["loomi"], 1))[0]
    return env["loop"].run(pair())


def test_fuzz_loomi_frames(garbage_env):
    env = garbage_env
    device = _pair_device(env)
    sess = Session(env, lambda: _open_loomi(env["ports"]["loomi"], device), per_socket=80)

    with Counter("Loomi frames") as count:
        @FUZZ
        @given(frames(loomi_typed()))
        def check(frame):
            async def go():
                ws = await sess.get()
                _send(ws, frame)
                rid = f"sentinel-{sess.n}"
                ws.send_text(orjson.dumps({"v": 1, "type": "task.list", "payload": {"request_id": rid, "limit": 1}}))
                got = await sess.read_until(
                    ws, lambda f: f.get("type") == "task.list.result" and f["payload"].get("request_id") == rid)
                for data, _ in got:
                    assert_no_leak(data, frame[1])
                return [f for _, f in got[:-1] if f.get("type") not in (
                    "ping", "task.created", "task.updated", "session.message", "run.started", "run.delta",
                    "run.completed", "run.failed", "notification", "run.tool_started", "run.tool_finished")]

            count.tried += 1
            answers = env["loop"].run(go())
            # an error for anything that is not a valid request; a valid one is acked (or silently done:
            # Loomi answers requests without a request_id only when they fail)
            for f in answers:
                assert f.get("type") in ("error", "ack", "pong", "task.list.result"), f
                if f["type"] == "error":
                    assert f["payload"]["fatal"] is False, f
            count.answered += 1

        check()
    still_serving(env)


def test_fuzz_lvmh_plugin_frames(garbage_env):
    env = garbage_env
    sid = "fuzz-plugin-session"
    hello = orjson.dumps({"v": 1, "type": "hello", "sessionId": sid, "seq": 0, "ts": 1, "session": {"id": sid}})

    async def opener():
        ws = await RawWS.connect(env["ports"]["lvmh"], "/agent/ws", {"Authorization": f"Bearer {LVMH_TOKEN}"})
        ws.send_text(hello)
        assert orjson.loads(await ws.recv_text())["type"] == "welcome"
        return ws

    sess = Session(env, opener, per_socket=90)  # at most 100 error frames per socket, then a silent drop

    with Counter("lvmh plugin frames") as count:
        @FUZZ
        @given(st.one_of(frames(plugin_typed(sid)), frames(typed(PLUGIN_TYPES, PLUGIN_FIELDS))))
        def check(frame):
            op, data = frame
            try:
                decoded = lvmh_codec.decode_plugin_frame(data)
                valid = True
                own_hello = decoded.type == "hello" and decoded.session_id == sid
            except lvmh_codec.FrameError:
                valid = own_hello = False

            async def go():
                ws = await sess.get()
                _send(ws, frame)
                ws.send_text(hello)  # a repeated hello: welcome once everything before it is settled
                welcomes = []
                got = await sess.read_until(ws, lambda f: f.get("type") == "welcome" and (welcomes.append(f) or True)
                                            and len(welcomes) >= (2 if own_hello else 1))
                for raw, _ in got:
                    assert_no_leak(raw, data)
                return [f for _, f in got[:-1]]

            count.tried += 1
            answers = env["loop"].run(go())
            if not valid:
                assert any(f.get("type") == "error" for f in answers), f"no error for {frame!r}: {answers}"
            # a valid event is not answered: it is acknowledged through welcome.lastSeq (documented)
            count.answered += 1

        check()
    still_serving(env)


def test_fuzz_lvmh_browser_frames(garbage_env):
    env = garbage_env

    async def opener():
        ws = await RawWS.connect(env["ports"]["lvmh"], f"/ws?token={LVMH_TOKEN}")
        assert orjson.loads(await ws.recv_text())["type"] == "session_list"
        return ws

    sess = Session(env, opener, per_socket=45)  # two error frames per example at most, 100 per socket
    browser_types = ["subscribe", "unsubscribe", "ping", ""]

    with Counter("lvmh browser frames") as count:
        @FUZZ
        @given(frames(typed(browser_types, ["sessionId", "type"])))
        def check(frame):
            op, data = frame
            try:
                lvmh_codec.decode_browser_frame(data)
                valid = True
            except lvmh_codec.FrameError:
                valid = False

            async def go():
                ws = await sess.get()
                _send(ws, frame)
                ws.send_text("{}")  # the sentinel: always an error frame
                want = 1 if valid else 2
                errors = []
                got = await sess.read_until(ws, lambda f: f.get("type") == "error" and (errors.append(f) or True)
                                            and len(errors) >= want)
                for raw, _ in got:
                    assert_no_leak(raw, data)
                return errors

            count.tried += 1
            errors = env["loop"].run(go())
            assert len(errors) == (1 if valid else 2)
            count.answered += 1

        check()
    still_serving(env)


# --- before authentication ---------------------------------------------------------------------------------


def test_fuzz_hellos(garbage_env):
    """Pheby and Loomi first frames: each a new socket from a new loopback address (failures lock an address)."""
    env = garbage_env
    with Counter("Pheby/Loomi hello") as count:
        @FUZZ
        @given(st.sampled_from(["pheby", "loomi"]),
               st.one_of(frames(typed(["hello"], PHEBY_FIELDS)), frames(loomi_typed()),
                         frames(st.builds(lambda p: {"v": 1, "type": "hello", "payload": p},
                                          st.dictionaries(st.sampled_from(LOOMI_FIELDS), json_values, max_size=6)))))
        def check(which, frame):
            async def go():
                ws = await RawWS.connect(env["ports"][which], local_addr=random_source())
                _send(ws, frame)
                replies = []
                while True:
                    data = await ws.recv_text(10)
                    if data is None:
                        break
                    replies.append(data)
                ws.abort()
                return replies, ws.close_code

            count.tried += 1
            replies, code = env["loop"].run(go())
            for r in replies:
                assert_no_leak(r, frame[1])
            assert replies and orjson.loads(replies[-1])["type"] == "error", replies
            assert code in (1008, 1009, 4001, 4003, 4029) or (which == "loomi" and code == 1002), code
            count.answered += 1

        check()
    still_serving(env)


# --- the WebSocket framing and HTTP themselves --------------------------------------------------------------


def test_fuzz_websocket_framing(garbage_env):
    """Raw bytes after the upgrade (bad opcodes, reserved bits, unmasked frames, lies about lengths)."""
    env = garbage_env
    targets = [("pheby", "/ws", {}), ("loomi", "/ws", {}),
               ("lvmh", "/agent/ws", {"Authorization": f"Bearer {LVMH_TOKEN}"}),
               ("lvmh", f"/ws?token={LVMH_TOKEN}", {})]
    with Counter("WebSocket framing") as count:
        @FUZZ
        @given(st.sampled_from(range(len(targets))),
               st.one_of(st.binary(min_size=1, max_size=64),
                         st.builds(lambda b0, b1, rest: bytes([b0, b1]) + rest, st.integers(0, 255),
                                   st.integers(0, 255), st.binary(max_size=32))))
        def check(t, raw):
            name, path, headers = targets[t]

            async def go():
                ws = await RawWS.connect(env["ports"][name], path, headers, local_addr=random_source())
                ws.send_raw(raw)
                ws.send_raw(encode_frame(b"", OP_CLOSE))  # then a clean close, so every socket ends
                replies = []
                try:  # a frame header may promise more bytes than ever come: the server waits (bounded by
                    # its heartbeat and hello deadlines), so do not wait for its close here
                    while True:
                        op, data = await ws.recv_frame(1)
                        if op == OP_CLOSE:
                            break
                        replies.append(data)
                except (asyncio.TimeoutError, ConnectionError, asyncio.IncompleteReadError):
                    pass
                ws.abort()
                return replies

            count.tried += 1
            for r in env["loop"].run(go()):
                assert_no_leak(r, raw)
            count.answered += 1

        check()
    still_serving(env)


def test_fuzz_raw_http(garbage_env):
    env = garbage_env
    with Counter("raw HTTP") as count:
        @FUZZ
        @given(st.sampled_from(["pheby", "loomi", "lvmh"]),
               st.one_of(
                   st.binary(max_size=300),
                   st.builds(lambda m, p, v, h: f"{m} {p} {v}\r\n{h}\r\n\r\n".encode("utf-8", "surrogateescape"),
                             st.one_of(st.sampled_from(["GET", "POST", "PUT", "DELETE", "OPTIONS", "HEAD"]),
                                       st.text(max_size=10)),
                             st.one_of(st.sampled_from(["/", "/ws", "/api/sessions", "/health", "/internal/pair/new",
                                                        "/attachments/x", "/agent/ws"]), st.text(max_size=40)),
                             st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2", "", "HTTP/9.9"]),
                             st.text(max_size=80)),
               ))
        def check(name, raw):
            async def go():
                r, w = await asyncio.open_connection("127.0.0.1", env["ports"][name], local_addr=(random_source(), 0))
                w.write(raw)
                if not raw.endswith(b"\r\n\r\n"):
                    w.write(b"\r\n\r\n")
                try:
                    await w.drain()
                    data = await asyncio.wait_for(r.read(65536), 2)
                except (ConnectionError, asyncio.TimeoutError):
                    data = b""
                w.transport.abort()
                return data

            count.tried += 1
            data = env["loop"].run(go())
            if data.startswith(b"HTTP/"):
                status = int(data.split(b" ", 2)[1])
                assert status < 500, data[:300]
            assert_no_leak(data, raw)
            count.answered += 1  # an HTTP error status, or the connection closed: both are HTTP's answers

        check()
    still_serving(env)


# --- REST bodies, paths and query strings ------------------------------------------------------------------------

REST_TARGETS = [
    ("lvmh", "POST", "/api/sessions/{id}/prompt"), ("lvmh", "POST", "/api/sessions/{id}/abort"),
    ("lvmh", "GET", "/api/sessions/{id}/events"), ("lvmh", "GET", "/api/sessions"),
    ("lvmh", "POST", "/api/approvals/{id}"), ("lvmh", "POST", "/api/clarifications/{id}"),
    ("lvmh", "GET", "/api/attachments/{id}"), ("lvmh", "POST", "/api/gitlab/connect"),
    ("lvmh", "GET", "/api/gitlab/repos"), ("lvmh", "POST", "/api/spawn"), ("lvmh", "GET", "/api/spawn/status"),
    ("lvmh", "DELETE", "/api/sessions/{id}/container"), ("lvmh", "GET", "/api/{id}"),
    ("loomi", "POST", "/internal/pair/new"), ("loomi", "POST", "/internal/devices/revoke"),
    ("loomi", "GET", "/internal/devices"), ("loomi", "GET", "/attachments/{id}"), ("loomi", "GET", "/health"),
    ("pheby", "GET", "/attachments/{id}"),
]


def test_fuzz_rest(garbage_env):
    env = garbage_env
    cid_holder: dict = {}

    async def setup():
        c = await PhebyClient.connect(env["ports"]["pheby"])
        cid_holder["cid"] = await c.create("rest fuzz")
        await c.close()
    env["loop"].run(setup())
    http_holder: dict = {}

    async def session() -> aiohttp.ClientSession:
        if "http" not in http_holder:
            http_holder["http"] = aiohttp.ClientSession()
        return http_holder["http"]

    ids = st.one_of(st.just("{cid}"), st.text(min_size=1, max_size=40), st.sampled_from(
        ["..", "../../etc/passwd", "%2e%2e%2fsecrets", "0" * 32, "a" * 300, "%00", "..%2f..%2f", "~root"]))
    bodies = st.one_of(st.none(), st.binary(max_size=200), json_values.map(lambda v: json.dumps(_safe(v)).encode()),
                       st.dictionaries(st.sampled_from(["message", "choice", "reason", "response", "token", "repo",
                                                        "branch", "ttl", "device_id"]), json_values, max_size=4)
                       .map(lambda d: json.dumps(_safe(d)).encode()))
    queries = st.dictionaries(st.one_of(st.sampled_from(["after", "limit", "token", "page"]), st.text(max_size=8)),
                              st.one_of(st.text(max_size=20), st.integers().map(str)), max_size=3)

    with Counter("REST bodies/paths/queries") as count:
        @FUZZ
        @given(st.sampled_from(range(len(REST_TARGETS))), ids, bodies, queries,
               st.sampled_from(["application/json", "text/plain", "", "application/x-www-form-urlencoded"]))
        def check(t, ident, body, query, ctype):
            name, method, path = REST_TARGETS[t]
            ident = ident.replace("{cid}", cid_holder["cid"])
            url_path = path.replace("{id}", urllib.parse.quote(ident, safe=""))
            headers = {}
            if name == "lvmh":
                headers["Authorization"] = f"Bearer {LVMH_TOKEN}"
            elif name == "pheby":
                headers["Authorization"] = f"Bearer {PHEBY_SECRET}"
            elif "/internal/" in path:  # the loopback-only endpoints: past the admin key, to their parsers
                headers.update(env["srv"].admin_headers())
            if ctype:
                headers["Content-Type"] = ctype

            async def go():
                http = await session()
                url = f"http://127.0.0.1:{env['ports'][name]}{url_path}"
                async with http.request(method, url, params=query, data=body, headers=headers) as r:
                    return r.status, await r.read(), r.headers.get("Content-Type", "")

            count.tried += 1
            status, data, content_type = env["loop"].run(go())
            external = "/gitlab/" in path or "/spawn" in path or "/container" in path
            # GitLab and Docker are not there (they point at nothing): 502/503 is their honest answer
            assert status < 500 or (external and status in (502, 503, 504)), (status, data[:300], method, url_path, body)
            assert_no_leak(data, (body or b"") + ident.encode() + repr(query).encode())
            if status >= 400 and data not in (b"404: Not Found", b"405: Method Not Allowed"):
                # (a path that matches no route at all gets aiohttp's plain 404/405: no detail either)
                assert "json" in content_type, (status, content_type, data[:200])
                err = orjson.loads(data)
                assert "error" in err, err
            count.answered += 1

        try:
            check()
        finally:
            if "http" in http_holder:
                env["loop"].run(http_holder["http"].close())
    still_serving(env)
