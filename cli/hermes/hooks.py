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

import functools
import logging
from typing import Any, Callable, Optional

from bridge_core.model.redact import redact_tool_args

from .activity import RESULT_MAX
from .chats import chat_from_key, on_platform
from .compat import STREAM_HOOKS

log = logging.getLogger("agent_bridge.hermes")


def observer(hook: Callable[..., None]) -> Callable[..., None]:
    """A hook that only observes: it returns None (no veto, no rewrite) and never raises into Hermes."""

    @functools.wraps(hook)
    def observe(self: "HookSet", *args: Any, **kw: Any) -> None:
        try:
            hook(self, *args, **kw)
        except Exception:
            log.debug("%s hook failed", hook.__name__, exc_info=True)
        return None

    return observe


class HookSet:
    def __init__(self, host_getter: Callable[[], Any]):
        self._host = host_getter

    # --- plumbing ----------------------------------------------------------------

    def _live_host(self) -> Any:
        host = self._host()
        if host is None or not host.ready or host.loop is None:
            return None
        return host

    def _target(self, kw: dict) -> Optional[tuple[Any, str, str]]:
        """(host, platform, chat) of the turn this hook belongs to, when it is one of our chats."""
        host = self._live_host()
        if host is None:
            return None
        api = host.api
        platform = api.session_env("HERMES_SESSION_PLATFORM") or str(kw.get("platform") or kw.get("surface") or "")
        if platform not in host.platforms:
            return None
        chat = api.session_env("HERMES_SESSION_CHAT_ID")
        if not chat:
            key = api.session_env("HERMES_SESSION_KEY") or str(kw.get("session_key") or "")
            chat = chat_from_key(key, platform)
        if not chat:
            return None
        return host, platform, chat

    @staticmethod
    def _post(host: Any, fn: Callable, *args: Any) -> None:
        try:
            host.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # loop closed: the bridge is shutting down
            pass

    def _to_source(self, kw: dict, method: str, *args: Any) -> None:
        """Call the agent source's ``method(platform, chat, *args)`` on the bridge's loop, for our chats only."""
        t = self._target(kw)
        if t is not None:
            host, platform, chat = t
            self._post(host, getattr(host.source, method), platform, chat, *args)

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

    @observer
    def pre_tool_call(self, **kw: Any) -> None:
        t = self._target(kw)
        if t is not None:  # arguments redacted here, before they leave the agent's thread
            host, platform, chat = t
            args = redact_tool_args(kw.get("args"))
            self._post(host, host.source.tool_started, platform, chat, kw.get("tool_name") or "tool", args, kw.get("tool_call_id"))

    @observer
    def post_tool_call(self, **kw: Any) -> None:
        result = kw.get("result")
        result = result[:RESULT_MAX] if isinstance(result, str) else ""
        self._to_source(
            kw, "tool_finished", kw.get("tool_name") or "tool", kw.get("tool_call_id"), kw.get("status"),
            kw.get("duration_ms"), kw.get("error_message"), result,
        )

    @observer
    def post_approval_response(self, **kw: Any) -> None:
        host = self._live_host()
        key = str(kw.get("session_key") or "")
        if host is None or not on_platform(key, host.platforms):
            return
        choice, command = str(kw.get("choice") or "timeout"), str(kw.get("command") or "")
        self._post(host, host.source.approval_settled, key, choice, command, kw.get("request_id"))

    @observer
    def pre_llm_call(self, **kw: Any) -> None:  # nothing injected into the prompt
        self._to_source(kw, "turn_started", str(kw.get("turn_id") or ""))

    @observer
    def on_session_end(self, **kw: Any) -> None:
        if kw.get("interrupted"):
            self._to_source(kw, "turn_ended", str(kw.get("turn_id") or ""), True)

    # upstream stream hooks (never fire on 0.19.0)

    @observer
    def on_stream_delta(self, delta: str = "", kind: str = "text", **kw: Any) -> None:
        if delta:
            self._to_source(kw, "stream_delta", str(delta), "reasoning" if kind == "reasoning" else "text")

    @observer
    def on_interim_message(self, text: str = "", already_streamed: bool = False, **kw: Any) -> None:
        self._to_source(kw, "interim", str(text or ""), bool(already_streamed))

    @observer
    def on_stream_end(self, final_text: Optional[str] = None, finished: bool = True, error: Any = None, **kw: Any) -> None:
        self._to_source(kw, "stream_ended", final_text, str(error) if error else None)


__all__ = ["HookSet", "STREAM_HOOKS"]
