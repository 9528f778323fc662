"""Hermes plugin hooks -> the agent source, without ever blocking the agent.

Hermes calls hooks synchronously on the agent's worker thread (0.19.0) or on
one delivery thread per callback (upstream stream hooks). Each callback here
reads the session context (which platform and chat this turn belongs to),
copies what it needs (arguments are redacted on the spot), and hands the
rest to the bridge's event loop with ``loop.call_soon_threadsafe``. It never
waits for the loop, never raises into Hermes, and returns None (no veto, no
rewrite).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

from bridge_core.redact import redact
from .compat import STREAM_HOOKS

log = logging.getLogger("agent_bridge.hermes")

RESULT_MAX = 2048


class HookSet:
    def __init__(self, host_getter: Callable[[], Any]):
        self._host = host_getter

    # --- plumbing ----------------------------------------------------------------

    def _target(self, kw: dict) -> Optional[tuple[Any, str, str]]:
        host = self._host()
        if host is None or not host.ready or host.loop is None:
            return None
        api = host.api
        platform = api.session_env("HERMES_SESSION_PLATFORM") or str(kw.get("platform") or kw.get("surface") or "")
        if platform not in host.platforms:
            return None
        chat = api.session_env("HERMES_SESSION_CHAT_ID")
        if not chat:
            key = api.session_env("HERMES_SESSION_KEY") or str(kw.get("session_key") or "")
            chat = _chat_from_key(key, platform)
        if not chat:
            return None
        return host, platform, chat

    @staticmethod
    def _post(host: Any, fn: Callable, *args: Any) -> None:
        try:
            host.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the bridge is shutting down
            pass

    def register(self, ctx: Any, stream_hooks: bool) -> None:
        ctx.register_hook("pre_tool_call", self.pre_tool_call)
        ctx.register_hook("post_tool_call", self.post_tool_call)
        ctx.register_hook("post_approval_response", self.post_approval_response)
        ctx.register_hook("pre_llm_call", self.pre_llm_call)
        ctx.register_hook("on_session_end", self.on_session_end)
        if stream_hooks:  # feature-detected: registering unknown hooks only logs warnings
            ctx.register_hook("on_stream_delta", self.on_stream_delta)
            ctx.register_hook("on_interim_message", self.on_interim_message)
            ctx.register_hook("on_stream_end", self.on_stream_end)

    # --- hooks (agent thread) ----------------------------------------------------------

    def pre_tool_call(self, **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            args = kw.get("args")
            safe = redact(args) if isinstance(args, (dict, list)) else {}
            self._post(host, host.source.tool_started, platform, chat, kw.get("tool_name") or "tool", safe, kw.get("tool_call_id"))
        except Exception:
            log.debug("pre_tool_call hook failed", exc_info=True)
        return None

    def post_tool_call(self, **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            result = kw.get("result")
            result = result[:RESULT_MAX] if isinstance(result, str) else ""
            self._post(
                host,
                host.source.tool_finished,
                platform,
                chat,
                kw.get("tool_name") or "tool",
                kw.get("tool_call_id"),
                kw.get("status"),
                kw.get("duration_ms"),
                kw.get("error_message"),
                result,
            )
        except Exception:
            log.debug("post_tool_call hook failed", exc_info=True)
        return None

    def post_approval_response(self, **kw: Any) -> None:
        try:
            host = self._host()
            key = str(kw.get("session_key") or "")
            if host is None or not host.ready or host.loop is None:
                return None
            if not any(key.startswith(f"agent:main:{p}:") for p in host.platforms):
                return None
            self._post(
                host,
                host.source.approval_settled,
                key,
                str(kw.get("choice") or "timeout"),
                str(kw.get("command") or ""),
                kw.get("request_id"),
            )
        except Exception:
            log.debug("post_approval_response hook failed", exc_info=True)
        return None

    def pre_llm_call(self, **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            self._post(host, host.source.turn_started, platform, chat, str(kw.get("turn_id") or ""))
        except Exception:
            log.debug("pre_llm_call hook failed", exc_info=True)
        return None  # nothing injected into the prompt

    def on_session_end(self, **kw: Any) -> None:
        try:
            if not kw.get("interrupted"):
                return None
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            self._post(host, host.source.turn_ended, platform, chat, str(kw.get("turn_id") or ""), True)
        except Exception:
            log.debug("on_session_end hook failed", exc_info=True)
        return None

    # upstream stream hooks (never fire on 0.19.0)

    def on_stream_delta(self, delta: str = "", kind: str = "text", **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None or not delta:
                return None
            host, platform, chat = t
            self._post(host, host.source.stream_delta, platform, chat, str(delta), "reasoning" if kind == "reasoning" else "text")
        except Exception:
            log.debug("on_stream_delta hook failed", exc_info=True)
        return None

    def on_interim_message(self, text: str = "", already_streamed: bool = False, **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            self._post(host, host.source.interim, platform, chat, str(text or ""), bool(already_streamed))
        except Exception:
            log.debug("on_interim_message hook failed", exc_info=True)
        return None

    def on_stream_end(self, final_text: Optional[str] = None, finished: bool = True, error: Any = None, **kw: Any) -> None:
        try:
            t = self._target(kw)
            if t is None:
                return None
            host, platform, chat = t
            self._post(host, host.source.stream_ended, platform, chat, final_text, str(error) if error else None)
        except Exception:
            log.debug("on_stream_end hook failed", exc_info=True)
        return None


def _chat_from_key(key: str, platform: str) -> str:
    prefix = f"agent:main:{platform}:dm:"
    if key.startswith(prefix):
        return key[len(prefix):].split(":", 1)[0]
    return ""


__all__ = ["HookSet", "STREAM_HOOKS"]
