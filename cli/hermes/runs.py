"""One Hermes turn as the bridge sees it, and the text it streams.

Hermes 0.19.0 streams a reply by sending a message and then editing it with
the cumulative text plus a cursor; a turn with tool calls in between opens a
new message (segment) after each tool. ``HermesRun`` folds those sends and
edits into one draft (segments joined by a blank line) and tells the caller
the increment, so every front end sees one assistant message per run.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import draft_message_id

SEGMENT_JOIN = "\n\n"
ERROR_MAX = 500  # characters of a run's or a tool's error, and of a refusal Hermes explains


def strip_cursor(text: str, cursor: str) -> str:
    if cursor and text.endswith(cursor):
        return text[: -len(cursor)]
    bare = cursor.strip() if cursor else ""
    if bare and text.endswith(bare):
        return text[: -len(bare)].rstrip(" ")
    return text


class HermesRun:
    """A bridge run driven by Hermes: draft text, segments, how it ends."""

    def __init__(
        self,
        *,
        run_id: str,
        conversation_id: str,
        platform: str,
        session_key: str,
        user_message_id: str,
        event: Any = None,
    ):
        self.run_id = run_id
        self.conversation_id = conversation_id
        self.platform = platform
        self.session_key = session_key
        self.user_message_id = user_message_id
        self.message_id = draft_message_id(run_id)
        self.event = event
        self.draft = ev.Draft()
        self.reasoning = ev.Draft()
        self.segments: list[list] = []  # [hermes message id, text]
        self.hook_messages: set[str] = set()  # streamed messages whose text the stream hooks carry
        self.cancelling = False
        self.cancel_request_id: Optional[str] = None
        self.interrupted = False
        self.turn_ids: set[str] = set()  # Hermes turns (pre_llm_call) of this run
        self.failed_notice: Optional[str] = None
        self.stream_final: Optional[str] = None  # on_stream_end's final text (newer Hermes)
        self.finished = False
        self.tool_index = 0
        self.tool_started_ms: dict[str, float] = {}
        loop = _running_loop()
        self.done: Optional[asyncio.Future] = loop.create_future() if loop is not None else None

    # --- text ---------------------------------------------------------------

    def text(self) -> str:
        return SEGMENT_JOIN.join(s[1] for s in self.segments if s[1].strip())

    def _update(self, before: str) -> tuple[str, bool]:
        """(increment, appended): what changed in the joined text since ``before``."""
        after = self.text()
        if after.startswith(before):
            delta = after[len(before):]
            if delta:
                self.draft.append(delta)
            return delta, True
        self.draft.set(after)  # a non-append edit (markdown fix-up): the draft is replaced
        return "", False

    def segment_started(self, message_id: str, text: str) -> tuple[str, bool]:
        text = text.lstrip()  # Hermes opens a segment after a tool with a blank line
        before = self.text()
        self.segments.append([message_id, text])
        return self._update(before)

    def segment_edited(self, message_id: str, text: str) -> Optional[tuple[str, bool]]:
        text = text.lstrip()
        for seg in self.segments:
            if seg[0] == message_id:
                if seg[1] == text:
                    return "", True
                before = self.text()
                seg[1] = text
                return self._update(before)
        return None

    def has_segment(self, message_id: Optional[str]) -> bool:
        return message_id is not None and any(s[0] == message_id for s in self.segments)

    def final_reply(self, message_id: str, text: str) -> tuple[str, bool]:
        """A non-streamed reply (``send`` with the user's message as reply anchor)."""
        if self.segments and self.segments[-1][1].strip() == text.strip():
            return "", True  # the streamed text sent again
        return self.segment_started(message_id, text)

    def stream_delta(self, delta: str, kind: str = "text") -> None:
        """Newer Hermes: an on_stream_delta increment (no segments involved)."""
        if kind == "reasoning":
            self.reasoning.append(delta)
            return
        if not self.segments:
            self.segments.append(["stream", ""])
        self.segments[-1][1] += delta
        self.draft.append(delta)

    def stream_ended(self, final_text: str) -> tuple[str, bool]:
        """Newer Hermes: on_stream_end's final text, which wins over what was streamed."""
        self.stream_final = final_text
        if not self.segments or self.text() == final_text:
            return "", True
        before = self.text()
        self.segments = [["stream", final_text]]
        return self._update(before)

    def final_text(self) -> str:
        if self.stream_final is not None and not self.segments:
            return self.stream_final
        return self.text()

    def finish(self) -> None:
        self.finished = True
        if self.done is not None and not self.done.done():
            self.done.set_result(None)


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
