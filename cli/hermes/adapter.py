"""The Hermes gateway platform adapter: one per registered front end (pheby, loomi, lvmh).

Every adapter instance hands what Hermes gives it to the one shared agent
source (``source.HermesAgent``) of this process's bridge; the bridge and its
front ends (the WebSocket servers) start with the first adapter's
``connect()`` and stop with the last ``disconnect()`` (``host.BridgeHost``).

The class derives from Hermes's ``BasePlatformAdapter``, which this package may not
import before Hermes calls in (the plugin imports without Hermes installed). So the
methods are the module-level ``BridgePlatform``, and ``adapter_class()`` puts it in
front of Hermes's base on first use, never at import time.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

log = logging.getLogger("agent_bridge.hermes")

NOTIFY_CHAT = "agent-bridge-home"  # home channel: cron/background deliveries become notifications
NOT_RUNNING = "agent-bridge is not running"

_CLASS: Optional[type] = None


def adapter_class() -> type:
    global _CLASS
    if _CLASS is None:
        _CLASS = _build()
    return _CLASS


def _build() -> type:
    from gateway.platforms.base import BasePlatformAdapter

    class BridgePlatformAdapter(BridgePlatform, BasePlatformAdapter):
        __doc__ = BridgePlatform.__doc__

    if not hasattr(BasePlatformAdapter, "send_exec_approval"):
        # Hermes 0.19.0: the gateway calls send_exec_approval when the class defines it
        # (upstream's base defines it and calls the override point _send_exec_approval_prompt).
        BridgePlatformAdapter.send_exec_approval = send_exec_approval  # type: ignore[attr-defined]
    return BridgePlatformAdapter


class BridgePlatform:
    """Hermes sees a chat platform; the chats are the bridge's conversations."""

    # supports_code_blocks stays False: with it, Hermes renders terminal commands
    # as fenced progress bubbles without asking format_tool_event.

    def __init__(self, config: Any, platform: Any, host: Any):
        super().__init__(config, platform)  # type: ignore[call-arg]  # Hermes's BasePlatformAdapter
        self.host = host
        self.platform_name = str(getattr(platform, "value", platform))

    @property
    def source(self) -> Any:
        return self.host.source

    # Our front ends authenticate their own clients (Pheby secret, Loomi device
    # credentials, lvmh token): Hermes's per-user allowlists do not apply.
    @property
    def authorization_is_upstream(self) -> bool:
        return True

    def _bridge_result(self, ok: bool, message_id: Optional[str] = None, error: Optional[str] = None) -> Any:
        """Hermes's ``SendResult``: ``error`` only when not ``ok``."""
        return self.host.api.send_result(bool(ok), message_id=message_id, error=None if ok else error)

    async def connect(self, *, is_reconnect: bool = False) -> bool:
        try:
            await self.host.attach(self)
        except Exception as exc:
            message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            log.error("agent-bridge could not start the %s front end: %s", self.platform_name, message)
            self._set_fatal_error("agent_bridge_start", message, retryable=False)  # type: ignore[attr-defined]
            return False
        self._mark_connected()  # type: ignore[attr-defined]
        return True

    async def disconnect(self) -> None:
        self._mark_disconnected()  # type: ignore[attr-defined]
        await self.host.detach(self)

    async def get_chat_info(self, chat_id: str) -> dict:
        conv = None
        if self.host.service is not None:
            conv = self.host.service.bridge.conversations.get(chat_id)
        return {"name": conv.name if conv is not None else chat_id, "type": "dm", "chat_id": chat_id}

    # --- text ---------------------------------------------------------------

    async def send(self, chat_id: str, content: str, reply_to: Optional[str] = None, metadata: Any = None):
        if not self.host.ready:
            return self._bridge_result(False, error=NOT_RUNNING)
        msg_id = self.source.on_send(self.platform_name, str(chat_id), content, reply_to, metadata)
        return self._bridge_result(True, message_id=msg_id)

    async def edit_message(self, chat_id: str, message_id: str, content: str, *, finalize: bool = False, **kw: Any):
        if not self.host.ready:
            return self._bridge_result(False, error=NOT_RUNNING)
        ok = self.source.on_edit(self.platform_name, str(chat_id), str(message_id), content, bool(finalize))
        return self._bridge_result(ok, message_id=message_id, error="unknown message")

    def format_tool_event(self, event: Any, *, mode: str = "all", preview_max_len: int = 40) -> Optional[str]:
        return None  # tool activity goes out as structured tool events, never as chat text

    async def on_processing_complete(self, event: Any, outcome: Any) -> None:
        if self.host.ready and not self.source.is_control(event):
            self.source.processing_complete(self.platform_name, event, outcome)

    # --- decisions ---------------------------------------------------------------

    def _bridge_approval(self, chat_id: Any, command: Any, session_key: Any, description: Any, *,
                      allow_permanent: bool, smart_denied: bool, request_id: Optional[str]) -> Any:
        ok = self.host.ready and self.source.approval_requested(
            self.platform_name,
            str(chat_id),
            str(command),
            str(session_key),
            str(description or "dangerous command"),
            allow_permanent=allow_permanent,
            smart_denied=smart_denied,
            request_id=request_id,
        )
        return self._bridge_result(ok, error="unknown chat")

    async def _send_exec_approval_prompt(self, prompt: Any):
        """Upstream's override point: the prompt carries a request id."""
        actions = getattr(prompt, "actions", None) or []
        choices = [a[1] for a in actions if isinstance(a, (tuple, list)) and len(a) > 1]
        return self._bridge_approval(
            getattr(prompt, "chat_id", ""),
            getattr(prompt, "command", ""),
            getattr(prompt, "session_key", ""),
            getattr(prompt, "description", ""),
            allow_permanent=("always" in choices) if choices else True,
            smart_denied=bool(getattr(prompt, "smart_denied", False)),
            request_id=getattr(prompt, "request_id", None),
        )

    async def send_clarify(self, chat_id, question, choices, clarify_id, session_key, metadata=None, **kw):
        ok = self.host.ready and self.source.clarify_requested(
            self.platform_name, str(chat_id), str(question), choices, str(clarify_id), str(session_key)
        )
        if not ok:
            return await super().send_clarify(chat_id, question, choices, clarify_id, session_key, metadata)  # type: ignore[misc]
        return self._bridge_result(True)

    # --- deliverables (MEDIA:) --------------------------------------------------------

    async def _deliver(self, chat_id: str, path: str, filename: Optional[str] = None):
        try:
            att_id = await self.source.media(self.platform_name, str(chat_id), path, filename) if self.host.ready else None
        except Exception:
            log.exception("copying a Hermes deliverable failed")
            att_id = None
        if att_id is None:
            return self._bridge_result(False, error="could not deliver the file")
        return self._bridge_result(True, message_id=att_id)

    async def send_document(self, chat_id, file_path, caption=None, file_name=None, reply_to=None, metadata=None, **kw):
        return await self._deliver(chat_id, file_path, file_name)

    async def send_image_file(self, chat_id, image_path, caption=None, reply_to=None, metadata=None, **kw):
        return await self._deliver(chat_id, image_path)

    async def send_voice(self, chat_id, audio_path, caption=None, reply_to=None, metadata=None, **kw):
        return await self._deliver(chat_id, audio_path)

    async def send_video(self, chat_id, video_path, caption=None, reply_to=None, metadata=None, **kw):
        return await self._deliver(chat_id, video_path)

    async def send_animation(self, chat_id, animation_url, caption=None, reply_to=None, metadata=None, **kw):
        path = str(animation_url)
        if path.startswith("file://"):
            path = path[7:]
        if path.startswith("/"):
            return await self._deliver(chat_id, path)
        return await super().send_animation(chat_id, animation_url, caption, reply_to, metadata)  # type: ignore[misc]


async def send_exec_approval(
    self: BridgePlatform,
    chat_id,
    command,
    session_key,
    description="dangerous command",
    metadata=None,
    allow_permanent=True,
    smart_denied=False,
    **kw,
):
    """Hermes 0.19.0's approval prompt (no base method, no request id; a newer caller may pass one)."""
    return self._bridge_approval(
        chat_id,
        command,
        session_key,
        description,
        allow_permanent=bool(allow_permanent),
        smart_denied=bool(smart_denied),
        request_id=kw.get("request_id"),
    )
