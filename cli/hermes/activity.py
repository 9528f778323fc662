"""What a Hermes run does besides text: tool calls (from the hooks) and deliverables (MEDIA:).

Tool calls arrive through ``hooks.py`` (``pre_tool_call``/``post_tool_call``), already on the
bridge's loop, and become ``ToolStarted``/``ToolFinished`` of the chat's active run; calls
outside a run (another platform's turn, a late hook) are dropped. Deliverables Hermes sends
with ``send_document``/``send_image_file``/... are copied into the attachment store and
announced against the run's draft message.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import short_id
from bridge_core.model.redact import redact_tool_args

from .chats import Chats
from .runs import ERROR_MAX

TOOL_PREVIEW_MAX = 80
RESULT_MAX = 2048  # characters of a tool's result kept as its preview
FAILED = ("error", "failed", "failure", "blocked")  # Hermes's tool statuses that mean it failed


def tool_preview(args: Any) -> str:
    """One line saying what a tool call does: its most telling argument, else its arguments as JSON."""
    if isinstance(args, dict):
        for key in ("command", "query", "path", "url", "question", "code"):
            val = args.get(key)
            if isinstance(val, str) and val:
                return val[:TOOL_PREVIEW_MAX]
    try:
        text = json.dumps(args, ensure_ascii=False, default=str)
    except Exception:
        text = str(args)
    return text[:TOOL_PREVIEW_MAX]


class Activity:
    def __init__(self, chats: Chats):
        self.chats = chats

    def tool_started(self, platform: str, chat_id: str, tool_name: str, args: Any, call_id: Optional[str]) -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is None:
            return
        run.tool_index += 1
        call_id = str(call_id) if call_id else f"t-{short_id()}"
        safe = redact_tool_args(args)
        run.tool_started_ms[call_id] = time.monotonic()
        self.chats.bridge.publish(
            ev.ToolStarted(
                conversation_id=chat_id,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=str(tool_name),
                args=safe,
                preview=tool_preview(safe),
                index=run.tool_index,
            )
        )

    def tool_finished(
        self,
        platform: str,
        chat_id: str,
        tool_name: str,
        call_id: Optional[str],
        status: Optional[str],
        duration_ms: Any,
        error: Optional[str],
        result: Any,
    ) -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is None or not call_id:
            return
        call_id = str(call_id)
        started = run.tool_started_ms.pop(call_id, None)
        if not isinstance(duration_ms, (int, float)):
            duration_ms = int((time.monotonic() - started) * 1000) if started else None
        failed = bool(error) or str(status or "").lower() in FAILED
        preview = result if isinstance(result, str) else ""
        self.chats.bridge.publish(
            ev.ToolFinished(
                conversation_id=chat_id,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=str(tool_name),
                status="failed" if failed else "completed",
                duration_ms=int(duration_ms) if duration_ms is not None else None,
                error=(str(error or status))[:ERROR_MAX] if failed else None,
                result_preview=preview[:RESULT_MAX],
                index=run.tool_index,
            )
        )

    async def media(self, platform: str, chat_id: str, path: str, filename: Optional[str] = None) -> Optional[str]:
        """A deliverable: copied into the attachment store; its id, or None when it cannot be delivered."""
        bridge = self.chats.bridge
        if chat_id not in bridge.conversations or not path or not os.path.isfile(path):
            return None
        run = self.chats.run(platform, chat_id)
        att = await bridge.attachments.add_file(
            path,
            conversation_id=chat_id,
            message_id=run.message_id if run is not None else bridge.active_draft_id(chat_id),
            filename=filename,
        )
        bridge.publish(
            ev.AttachmentAdded(conversation_id=chat_id, attachment=att, run_id=run.run_id if run is not None else None)
        )
        return att.attachment_id
