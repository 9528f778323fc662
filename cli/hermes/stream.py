"""Hermes's text -> shared events: sends and edits (0.19.0) or the stream hooks (newer Hermes).

Hermes 0.19.0 streams a reply by ``send()``-ing a message marked ``expect_edits`` and then
editing it with the cumulative text plus a cursor; ``runs.HermesRun`` folds those into the
run's one draft and this module publishes each increment as a ``TextDelta``. A newer Hermes
with the ``on_stream_*`` hooks (``use_stream_hooks``) carries the text in the hooks instead;
its platform sends and edits are then only acknowledged. What Hermes sends outside a
streamed reply becomes a ``Notification``: a diagnostic during a run (and the run's failure
text), a result to look at outside any (cron, background deliveries).
"""

from __future__ import annotations

import logging
from typing import Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import new_id

from .chats import SOURCE, Chats
from .runs import ERROR_MAX, HermesRun, strip_cursor

log = logging.getLogger("agent_bridge.hermes")


class Stream:
    def __init__(self, chats: Chats):
        self.chats = chats
        self._orphans: dict[tuple[str, str, str], str] = {}  # streamed messages outside any run

    # --- platform sends and edits (0.19.0) ------------------------------------------------

    def sent(self, platform: str, chat_id: str, msg_id: str, content: str, reply_to: Optional[str], meta: dict) -> None:
        """A ``send()`` from Hermes that is not a reply to an injected command; ``msg_id`` is what Hermes gets back."""
        run = self.chats.run(platform, chat_id)
        use_hooks = self.chats.use_stream_hooks
        if meta.get("expect_edits"):
            text = strip_cursor(content, self.chats.cursor)
            if run is None:
                self._orphans[(platform, chat_id, msg_id)] = text
            elif use_hooks:
                run.hook_messages.add(msg_id)  # the stream hooks carry the text
            else:
                self._text(run, *run.segment_started(msg_id, text))
            return
        if run is not None and reply_to == run.user_message_id and meta.get("notify"):
            if not use_hooks or not run.segments:
                self._text(run, *run.final_reply(msg_id, content))
            return
        self._notice(platform, chat_id, content, during_run=run)

    def edited(self, platform: str, chat_id: str, message_id: str, content: str, finalize: bool) -> bool:
        """An ``edit_message()``: False when Hermes edits a message it never streamed here."""
        text = strip_cursor(content or "", self.chats.cursor)
        run = self.chats.run(platform, chat_id)
        if run is not None and (run.has_segment(message_id) or message_id in run.hook_messages):
            if not self.chats.use_stream_hooks:
                changed = run.segment_edited(message_id, text)
                if changed is not None:
                    self._text(run, *changed)
            return True
        key = (platform, chat_id, message_id)
        if key not in self._orphans:
            return False
        if finalize:
            del self._orphans[key]
            self._notice(platform, chat_id, text, during_run=None)
        else:
            self._orphans[key] = text
        return True

    # --- upstream stream hooks (feature-detected; never fire on 0.19.0) -------------------------

    def stream_delta(self, platform: str, chat_id: str, delta: str, kind: str = "text") -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is None or not delta:
            return
        run.stream_delta(delta, kind)
        if kind == "reasoning":
            self._publish_delta(run, delta, run.reasoning, "reasoning")
        else:
            self._publish_delta(run, delta, run.draft, "text")

    def interim(self, platform: str, chat_id: str, text: str, already_streamed: bool) -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is None or not text:
            return
        self.chats.bridge.publish(
            ev.InterimMessage(
                conversation_id=chat_id, run_id=run.run_id, text=text, already_streamed=bool(already_streamed)
            )
        )

    def stream_ended(self, platform: str, chat_id: str, final_text: Optional[str], error: Optional[str]) -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is None:
            return
        if final_text:
            self._text(run, *run.stream_ended(final_text))
        if error:
            run.failed_notice = str(error)[:ERROR_MAX]

    # --- publishing ---------------------------------------------------------------------

    def _text(self, run: HermesRun, delta: str, appended: bool) -> None:
        """The run's text changed: ``delta`` appended, or the draft replaced (``appended`` False)."""
        if run.finished or (not delta and appended):
            return
        self._publish_delta(run, delta, run.draft, "text")

    def _publish_delta(self, run: HermesRun, delta: str, draft: ev.Draft, kind: str) -> None:
        self.chats.bridge.publish(
            ev.TextDelta(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                message_id=run.message_id,
                delta=delta,
                draft=draft,
                kind=kind,  # type: ignore[arg-type]
            )
        )

    def _notice(self, platform: str, chat_id: str, content: str, during_run: Optional[HermesRun]) -> None:
        text = content.strip()
        if not text:
            return
        if during_run is not None:
            during_run.failed_notice = text
        conv_id = chat_id if chat_id in self.chats.bridge.conversations else None
        self.chats.bridge.publish(
            ev.Notification(
                conversation_id=conv_id,
                message_id=f"n-{new_id()}",
                text=text,
                title="Hermes" if during_run is None else "Hermes notice",
                category="result" if during_run is None else "diagnostic",
                source=SOURCE,
                requires_attention=during_run is None,
            )
        )

