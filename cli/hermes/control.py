"""Slash commands the bridge injects into Hermes (``/stop``, ``/model``, ``/reasoning``).

A command goes in as a ``MessageEvent`` through the adapter's ``handle_message`` with a
``ctl-`` message id; Hermes answers with a ``send()`` whose ``reply_to`` is that id, which
``answered`` hands back to the waiting ``send`` instead of the chat.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from bridge_core.model.errors import Unavailable
from bridge_core.model.ids import short_id

from .chats import Chats

CONTROL_TIMEOUT = 60.0
PREFIX = "ctl-"


class Controls:
    def __init__(self, chats: Chats):
        self.chats = chats
        self._waiting: dict[str, asyncio.Future] = {}  # ctl message id -> Hermes's reply

    async def send(self, platform: str, chat_id: str, text: str) -> str:
        """Inject ``text`` as a command into the chat; Hermes's reply (Unavailable when none comes)."""
        adapter = self.chats.adapter(platform)
        ctl_id = f"{PREFIX}{short_id()}"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._waiting[ctl_id] = fut
        try:
            event = self.chats.api.message_event(
                text=text, source=self.chats.build_source(adapter, chat_id), message_id=ctl_id, command=True
            )
            await adapter.handle_message(event)
            try:
                return await asyncio.wait_for(fut, CONTROL_TIMEOUT)
            except asyncio.TimeoutError:
                raise Unavailable("Hermes did not answer in time")
        finally:
            self._waiting.pop(ctl_id, None)

    def answered(self, reply_to: Optional[str], content: str) -> bool:
        """A ``send()`` replying to a command the bridge injected: it goes to the waiting ``send``."""
        fut = self._waiting.get(reply_to or "")
        if fut is None:
            return False
        if not fut.done():
            fut.set_result(content)
        return True

    def is_control(self, event: Any) -> bool:
        return str(getattr(event, "message_id", "") or "").startswith(PREFIX)
