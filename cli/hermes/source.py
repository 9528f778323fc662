"""The Hermes agent source: Hermes activity -> shared events, shared commands -> Hermes.

It lives in the Hermes gateway's process and event loop (the plugin starts
the bridge there). Its inputs are:

- the platform adapters' calls (``on_send``/``on_edit``, approvals, clarify
  prompts, media, processing start/complete), all on the gateway loop;
- the plugin hooks (tools, approval outcomes, turn ends, upstream stream
  hooks), which run on the agent's worker thread: ``hooks.py`` copies what
  it needs and crosses to this loop with ``call_soon_threadsafe``.

Its outputs are ``bridge.publish(event)`` calls and, for commands, messages
injected through the adapter's ``handle_message`` (user text, ``/stop``,
``/model``, ``/reasoning``) or Hermes's own resolver functions.

``HermesAgent`` is a composition of parts, one concern each, sharing one ``chats.Chats``:

- ``driver.RunDriver``: a run from the user's message to its end, cancel (``/stop``), turns;
- ``stream.Stream``: Hermes's sends, edits and stream hooks as text deltas and notices;
- ``activity.Activity``: tool calls and deliverables;
- ``decisions.Decisions``: approvals (Hermes's order kept by ``decisions.ApprovalBook``) and clarifications;
- ``settings.HermesSettings``: model, reasoning, yolo;
- ``sessions.Sessions``: Hermes sessions as conversations (list, titles, deletion);
- ``control.Controls``: the slash commands the others inject, and Hermes's replies to them.

The table below says which part answers each call (the bridge's ``AgentSource`` interface,
the adapter's and the hooks' calls); only what several parts take part in is written here.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from bridge_core.bridge.agent import AgentSource
from bridge_core.model.ids import short_id

from .activity import Activity, tool_preview
from .chats import SOURCE, Chats
from .compat import HermesApi
from .control import Controls
from .decisions import Decisions
from .driver import RunDriver
from .sessions import Sessions
from .settings import HermesSettings
from .stream import Stream

if TYPE_CHECKING:
    from bridge_core.bridge.bridge import Bridge
    from bridge_core.model.state import ConversationState

log = logging.getLogger("agent_bridge.hermes")


class _Part:
    """``name = _Part("driver")``: the method ``name`` of the part ``HermesAgent.driver``."""

    def __init__(self, part: str, method: Optional[str] = None):
        self.part = part
        self.method = method

    def __set_name__(self, owner: type, name: str) -> None:
        self.method = self.method or name

    def __get__(self, obj: Any, owner: Optional[type] = None) -> Any:
        if obj is None:
            return self
        return getattr(getattr(obj, self.part), self.method)  # type: ignore[arg-type]


class HermesAgent(AgentSource):
    name = SOURCE
    label = "Hermes"

    def __init__(self, platforms: tuple[str, ...] = ("pheby",), api: Optional[HermesApi] = None):
        super().__init__()
        self.chats = chats = Chats(platforms, api or HermesApi())
        self.controls = Controls(chats)
        self.sessions = Sessions(chats)
        self.settings = HermesSettings(chats, self.controls)
        self.driver = RunDriver(chats, self.controls, self.sessions, self.settings)
        self.stream = Stream(chats)
        self.activity = Activity(chats)
        self.decisions = Decisions(chats)
        # the shared state, under the names the host and the plugin use
        self.platforms, self.primary, self.api = chats.platforms, chats.primary, chats.api
        self.adapters, self.runs, self.conv_platform = chats.adapters, chats.runs, chats.conv_platform

    def attach(self, bridge: "Bridge") -> None:
        super().attach(bridge)
        self.chats.bridge = bridge

    async def start(self) -> None:
        self.chats.loop = asyncio.get_running_loop()
        try:
            self.chats.use_stream_hooks = bool(self.api.stream_hooks)
        except Exception:
            self.chats.use_stream_hooks = False
        await self.sessions.load()

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return self.chats.loop

    @property
    def use_stream_hooks(self) -> bool:
        return self.chats.use_stream_hooks

    @property
    def cursor(self) -> str:
        return self.chats.cursor

    def platform_of(self, conversation_id: str) -> str:
        return self.chats.platform_of(conversation_id)

    def session_key(self, conv_id: str, surface: Optional[str] = None) -> str:  # type: ignore[override]
        return self.chats.session_key(conv_id)

    def is_online(self, conv: "ConversationState") -> bool:
        return self.platform_of(conv.conversation_id) in self.adapters

    # --- the bridge's commands (AgentSource) --------------------------------------------

    send_message = _Part("driver")
    cancel = _Part("driver")
    resolve_approval = _Part("decisions")
    answer_clarify = _Part("decisions")
    conversation_deleted = _Part("sessions", "delete")
    current_model = _Part("settings")
    models = _Part("settings")
    set_model = _Part("settings")
    reasoning = _Part("settings")
    set_reasoning = _Part("settings")
    yolo = _Part("settings")
    set_yolo = _Part("settings")

    # --- what the platform adapters call (gateway loop) ---------------------------------------

    def on_send(
        self, platform: str, chat_id: str, content: str, reply_to: Optional[str], metadata: Optional[dict]
    ) -> str:
        """A ``send()`` from Hermes; returns the message id given back to Hermes."""
        meta = metadata or {}
        content = content or ""
        log.debug("send chat=%s reply_to=%s meta=%s len=%d %r", chat_id, reply_to, sorted(meta), len(content), content[:40])
        msg_id = f"h-{short_id()}"
        if not self.controls.answered(reply_to, content):  # else the reply to a slash command the bridge injected
            self.stream.sent(platform, chat_id, msg_id, content, reply_to, meta)
        return msg_id

    on_edit = _Part("stream", "edited")
    processing_complete = _Part("driver")
    is_control = _Part("controls")
    approval_requested = _Part("decisions")
    clarify_requested = _Part("decisions")
    media = _Part("activity")

    # --- what the hooks call (hooks.py; already on the gateway loop) ----------------------------

    tool_started = _Part("activity")
    tool_finished = _Part("activity")
    turn_started = _Part("driver")
    turn_ended = _Part("driver")
    approval_settled = _Part("decisions")
    stream_delta = _Part("stream")
    interim = _Part("stream")
    stream_ended = _Part("stream")


__all__ = ["HermesAgent", "tool_preview"]
