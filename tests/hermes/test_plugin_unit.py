"""The plugin's Hermes-facing parts against fakes: register(), hooks, the adapter class, the CLI.

The adapter class is built against fake ``gateway.platforms.base`` modules
shaped like 0.19.0 (no ``send_exec_approval`` on the base: the plugin defines
it) and like upstream 0.21.x (the base has it and calls the override point
``_send_exec_approval_prompt(prompt)``, which carries a request id).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import types

import pytest

from agent_bridge_cli import hermes as plugin
from agent_bridge_cli.hermes import adapter as adapter_mod
from agent_bridge_cli.hermes.cli import setup_loomi
from agent_bridge_cli.hermes.compat import accepts_kwarg, has_param, parse_effort
from agent_bridge_cli.hermes.hooks import HookSet
from agent_bridge_cli.hermes.runs import strip_cursor

from tests.waiting import turns, until

from .fakes import FakeApi


class Recorder:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def record(*args, **kw):
            self.calls.append((name, args) if not kw else (name, args, kw))
            return True

        return record


class FakeHost:
    def __init__(self, loop, env):
        self.ready = True
        self.loop = loop
        self.platforms = ("pheby", "loomi")
        self.source = Recorder()
        api = FakeApi()
        api.session_env = lambda name: env.get(name, "")
        self.api = api


async def test_hooks_cross_to_the_loop_and_redact():
    loop = asyncio.get_running_loop()
    env = {"HERMES_SESSION_PLATFORM": "pheby", "HERMES_SESSION_CHAT_ID": "c1"}
    host = FakeHost(loop, env)
    hooks = HookSet(lambda: host)
    results = []

    def agent_thread():
        results.append(hooks.pre_tool_call(tool_name="terminal", args={"command": "ls", "api_key": "sk-123",
                                                                         "nested": {"password": "p"}},
                                           tool_call_id="call_1", telemetry_schema_version="hermes.observer.v1"))
        results.append(hooks.post_tool_call(tool_name="terminal", tool_call_id="call_1", status="ok", duration_ms=5,
                                            result="x" * 5000))
        results.append(hooks.pre_tool_call())  # garbage: never raises into Hermes
        results.append(hooks.post_approval_response(session_key="agent:main:pheby:dm:c1", choice="timeout",
                                                    command="rm"))
        results.append(hooks.post_approval_response(session_key="agent:main:telegram:dm:9", choice="once"))
        results.append(hooks.pre_llm_call(turn_id="t1"))
        results.append(hooks.on_session_end(turn_id="t1", interrupted=True))
        results.append(hooks.on_session_end(turn_id="t2", interrupted=False))

    t = threading.Thread(target=agent_thread)
    t.start()
    t.join()
    assert results == [None] * 8  # no veto, no prompt injection
    await until(lambda: len(host.source.calls) >= 6, what="the hook calls on the loop")
    names = [c[0] for c in host.source.calls]
    assert names == ["tool_started", "tool_finished", "tool_started", "approval_settled", "turn_started", "turn_ended"]
    args = host.source.calls[0][1]
    assert args[:3] == ("pheby", "c1", "terminal")
    assert args[3] == {"command": "ls", "api_key": "<redacted>", "nested": {"password": "<redacted>"}}
    assert len(host.source.calls[1][1][-1]) == 2048
    assert host.source.calls[3][1][:2] == ("agent:main:pheby:dm:c1", "timeout")


async def test_hooks_ignore_other_platforms_and_a_stopped_bridge():
    loop = asyncio.get_running_loop()
    host = FakeHost(loop, {"HERMES_SESSION_PLATFORM": "telegram", "HERMES_SESSION_CHAT_ID": "9"})
    hooks = HookSet(lambda: host)
    hooks.pre_tool_call(tool_name="x", args={})
    host.ready = False
    host.api.session_env = lambda name: {"HERMES_SESSION_PLATFORM": "pheby", "HERMES_SESSION_CHAT_ID": "c"}.get(name, "")
    hooks.pre_tool_call(tool_name="x", args={})
    await turns()  # anything crossed to the loop (call_soon_threadsafe) has run
    assert host.source.calls == []


async def test_upstream_stream_hooks_use_session_context():
    loop = asyncio.get_running_loop()
    host = FakeHost(loop, {"HERMES_SESSION_PLATFORM": "loomi", "HERMES_SESSION_KEY": "agent:main:loomi:dm:c9"})
    hooks = HookSet(lambda: host)
    threading.Thread(target=lambda: (
        hooks.on_stream_delta(delta="Hi", kind="text", turn_id="t", iteration=1, surface="loomi"),
        hooks.on_stream_delta(delta="hmm", kind="reasoning"),
        hooks.on_interim_message(text="Looking", already_streamed=False),
        hooks.on_stream_end(final_text="Hi", finished=True, error=None),
    )).start()
    await until(lambda: len(host.source.calls) >= 4, what="the stream hook calls on the loop")
    assert host.source.calls == [
        ("stream_delta", ("loomi", "c9", "Hi", "text")),
        ("stream_delta", ("loomi", "c9", "hmm", "reasoning")),
        ("interim", ("loomi", "c9", "Looking", False)),
        ("stream_ended", ("loomi", "c9", "Hi", None)),
    ]


class _Base:
    """Shaped like gateway.platforms.base.BasePlatformAdapter (only what the plugin touches)."""

    def __init__(self, config, platform):
        self.config = config
        self.platform = platform

    def _mark_connected(self):
        self.connected = True

    def _mark_disconnected(self):
        self.connected = False

    def _set_fatal_error(self, code, message, retryable):
        self.fatal = (code, message, retryable)

    async def send_clarify(self, chat_id, question, choices, clarify_id, session_key, metadata=None):
        return "text fallback"

    async def send_animation(self, *a, **k):
        return "base animation"


def _fake_gateway(monkeypatch, base_cls):
    base_mod = types.ModuleType("gateway.platforms.base")
    base_mod.BasePlatformAdapter = base_cls
    monkeypatch.setitem(sys.modules, "gateway", types.ModuleType("gateway"))
    monkeypatch.setitem(sys.modules, "gateway.platforms", types.ModuleType("gateway.platforms"))
    monkeypatch.setitem(sys.modules, "gateway.platforms.base", base_mod)


class _AdapterHost:
    def __init__(self):
        self.ready = True
        self.api = FakeApi()
        self.source = Recorder()
        self.service = None
        self.attached = []

    async def attach(self, adapter):
        self.attached.append(adapter)

    async def detach(self, adapter):
        self.attached.remove(adapter)


async def test_adapter_on_hermes_0_19(monkeypatch):
    _fake_gateway(monkeypatch, _Base)
    cls = adapter_mod._build()
    assert "send_exec_approval" in cls.__dict__  # 0.19.0 calls it when the class defines it
    host = _AdapterHost()
    a = cls(types.SimpleNamespace(extra={}), types.SimpleNamespace(value="pheby"), host)
    assert a.authorization_is_upstream is True
    assert await a.connect() is True and host.attached == [a]
    assert a.format_tool_event(object()) is None
    r = await a.send_exec_approval(chat_id="c", command="rm -rf /x", session_key="k", description="delete",
                                   metadata=None, allow_permanent=False, smart_denied=False)
    assert r.success
    assert host.source.calls[-1] == ("approval_requested", ("pheby", "c", "rm -rf /x", "k", "delete"),
                                     {"allow_permanent": False, "smart_denied": False, "request_id": None})
    r = await a.send("c", "hello", reply_to="u-1", metadata={"notify": True})
    assert r.success and host.source.calls[-1][0] == "on_send"
    r = await a.edit_message("c", "m1", "hello \u2589", finalize=True)
    assert r.success and host.source.calls[-1] == ("on_edit", ("pheby", "c", "m1", "hello \u2589", True))
    await a.disconnect()
    assert host.attached == []


async def test_adapter_on_upstream_prompt_override(monkeypatch):
    class UpstreamBase(_Base):
        async def send_exec_approval(self, chat_id, command, session_key, description="", metadata=None,
                                     allow_permanent=True, smart_denied=False, request_id=None):
            prompt = types.SimpleNamespace(chat_id=chat_id, session_key=session_key, metadata=metadata,
                                           request_id=request_id, command=command, description=description,
                                           smart_denied=smart_denied, text="...",
                                           actions=[("Once", "once", "primary"), ("Deny", "deny", "danger")])
            return await self._send_exec_approval_prompt(prompt)

    _fake_gateway(monkeypatch, UpstreamBase)
    cls = adapter_mod._build()
    assert "send_exec_approval" not in cls.__dict__  # the base's own method builds the prompt
    host = _AdapterHost()
    seen = {}

    def approval_requested(*args, **kw):
        seen["args"], seen["kw"] = args, kw
        return True

    host.source.approval_requested = approval_requested
    a = cls(types.SimpleNamespace(extra={}), types.SimpleNamespace(value="loomi"), host)
    r = await a.send_exec_approval("c", "rm x", "agent:main:loomi:dm:c", "delete", request_id="req-7")
    assert r.success
    assert seen["args"] == ("loomi", "c", "rm x", "agent:main:loomi:dm:c", "delete")
    assert seen["kw"] == {"allow_permanent": False, "smart_denied": False, "request_id": "req-7"}


async def test_adapter_startup_failure_is_fatal_not_a_crash(monkeypatch):
    _fake_gateway(monkeypatch, _Base)
    cls = adapter_mod._build()

    class Failing(_AdapterHost):
        async def attach(self, adapter):
            from bridge_core.model.errors import ConfigError

            raise ConfigError("pheby: cannot listen on 127.0.0.1:8620: Address already in use")

    a = cls(types.SimpleNamespace(extra={}), types.SimpleNamespace(value="pheby"), Failing())
    assert await a.connect() is False
    assert a.fatal[0] == "agent_bridge_start" and "8620" in a.fatal[1] and a.fatal[2] is False


def test_register_platforms_hooks_and_cli(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENT_BRIDGE_DATA", str(tmp_path / "data"))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "config.toml").write_text('adapters = "pheby,loomi"\n')
    monkeypatch.setattr("agent_bridge_cli.hermes.host._HOST", None)

    class Ctx:
        def __init__(self):
            self.platforms, self.hooks, self.cli = [], [], []

        def register_platform(self, **kw):
            self.platforms.append(kw)

        def register_hook(self, name, cb):
            self.hooks.append(name)

        def register_cli_command(self, **kw):
            self.cli.append(kw)

    ctx = Ctx()
    plugin.register(ctx)
    assert [p["name"] for p in ctx.platforms] == ["pheby", "loomi"]
    assert all(p["check_fn"]() and p["is_connected"](None) for p in ctx.platforms)
    assert set(ctx.hooks) == {"pre_tool_call", "post_tool_call", "post_approval_response", "pre_llm_call",
                              "on_session_end"}  # no stream hooks: this "Hermes" does not list them
    assert [c["name"] for c in ctx.cli] == ["loomi"]
    assert not (tmp_path / "data" / "secrets").exists()  # registering never generates secrets


def test_hermes_loomi_cli_is_agent_bridge_loomi():
    parser = argparse.ArgumentParser(prog="hermes loomi")
    setup_loomi(parser)
    args = parser.parse_args(["pair", "--json", "--ttl", "60"])
    assert args.json is True and args.ttl == 60 and callable(args.func)
    assert getattr(args.func, "__agent_bridge_wrapped__", False)
    args = parser.parse_args(["revoke", "dev-1"])
    assert args.device_id == "dev-1"
    args = parser.parse_args(["devices", "--json"])
    assert args.json is True


def test_compat_helpers():
    def old(session_key, choice, resolve_all=False, reason=None):
        pass

    def new(session_key, choice, resolve_all=False, reason=None, request_id=None):
        pass

    assert not has_param(old, "request_id") and has_param(new, "request_id")
    assert accepts_kwarg(lambda **kw: None, "anything") and not accepts_kwarg(old, "request_id")
    assert parse_effort({"enabled": False}) == ("none", False)
    assert parse_effort({"enabled": True, "effort": "high"}) == ("high", True)
    assert parse_effort("LOW") == ("low", True)
    assert parse_effort(None) == (None, True)
    assert strip_cursor("Hello \u2589", " \u2589") == "Hello"
    assert strip_cursor("Hello\u2589", " \u2589") == "Hello"
    assert strip_cursor("Hello", " \u2589") == "Hello"


def test_plugin_imports_without_hermes():
    assert "gateway" not in sys.modules or not hasattr(sys.modules["gateway"], "run")
    assert callable(plugin.register)


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
