"""The run driver: a bridge run is one Hermes turn, from the user's message to its end.

A run starts when the bridge's ``SendMessage`` is injected into the chat through the
adapter's ``handle_message``; it ends when the adapter's ``on_processing_complete`` reports
the turn's task done (or when ``/stop`` has unwound it). Its end is published once, by
``RunDriver.finish``: the message completed with the run's final text when there is one,
then ``RunFinished``; whatever else the run left open (an empty message, decisions still
pending) is closed by the bridge's one run-end rule, ``Bridge.close_run``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from bridge_core.model import events as ev
from bridge_core.model.errors import NotFound, Unavailable

from .chats import Chats, chat_of_event
from .control import Controls
from .runs import ERROR_MAX, HermesRun
from .sessions import Sessions
from .settings import HermesSettings

if TYPE_CHECKING:
    from bridge_core.model.state import ConversationState

log = logging.getLogger("agent_bridge.hermes")

CANCEL_WAIT = 15.0


def end_status(outcome: Any, stopped: bool) -> str:
    """A run's status from Hermes's processing outcome (``ProcessingOutcome`` or its name)."""
    name = str(getattr(outcome, "value", outcome) or "").lower()
    if stopped or "cancel" in name:
        return "cancelled"
    if "fail" in name:
        return "failed"
    return "completed"


class RunDriver:
    def __init__(self, chats: Chats, controls: Controls, sessions: Sessions, settings: HermesSettings):
        self.chats = chats
        self.controls = controls
        self.sessions = sessions
        self.settings = settings

    async def send_message(
        self, conv: "ConversationState", text: str, run_id: str, request_id: Optional[str]
    ) -> Optional[str]:
        """Start a run: publish its start and inject the user's text into the chat."""
        chats, cid = self.chats, conv.conversation_id
        platform = chats.platform_of(cid)
        adapter = chats.adapter(platform)
        chats.conv_platform.setdefault(cid, platform)
        run = HermesRun(
            run_id=run_id, conversation_id=cid, platform=platform, session_key=chats.session_key(cid),
            user_message_id=f"u-{run_id}",
        )
        run.event = chats.api.message_event(
            text=text, source=chats.build_source(adapter, cid, conv.name), message_id=run.user_message_id
        )
        chats.runs[(platform, cid)] = run
        bridge = chats.bridge
        bridge.publish(ev.UserMessageSent(conversation_id=cid, message_id=run.user_message_id, text=text, run_id=run_id))
        model, provider = self._model(cid)
        bridge.publish(
            ev.RunStarted(
                conversation_id=cid, run_id=run_id, message_id=run.message_id, model=model, provider=provider,
                title=conv.name, request_id=request_id,
            )
        )
        try:
            await adapter.handle_message(run.event)
        except Exception:
            log.exception("Hermes refused a message")
            run.failed_notice = "Hermes could not accept the message"
            self.finish(run, "failed")
        return run_id

    def _model(self, conversation_id: str) -> tuple[Optional[str], Optional[str]]:
        """The model a run starts with, as far as Hermes tells (None, None when it cannot)."""
        try:
            current = self.settings.current_model(conversation_id)
        except Exception:
            return None, None
        return current.model, current.provider

    def processing_complete(self, platform: str, event: Any, outcome: Any) -> None:
        """The adapter's ``on_processing_complete``: the turn's task is over."""
        run = self.chats.run(platform, chat_of_event(event))
        if run is None or run.event is not event:
            return
        queue = getattr(self.chats.runner(platform), "_startup_restore_queue", None) or ()
        if any(e is event for e in queue):
            return  # parked while the gateway finishes starting; Hermes replays this very event
        self.finish(run, end_status(outcome, run.cancelling or run.interrupted))

    def finish(self, run: HermesRun, status: str) -> None:
        """Publish the run's end, once."""
        if run.finished:
            return
        run.finish()
        chats = self.chats
        if chats.runs.get((run.platform, run.conversation_id)) is run:
            del chats.runs[(run.platform, run.conversation_id)]
        text = run.final_text()
        if text:
            chats.bridge.publish(
                ev.MessageCompleted(
                    conversation_id=run.conversation_id, message_id=run.message_id, text=text, run_id=run.run_id
                )
            )
        error = (run.failed_notice or "Hermes run failed")[:ERROR_MAX] if status == "failed" else None
        chats.bridge.publish(
            ev.RunFinished(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                status=status,  # type: ignore[arg-type]
                error=error,
                text=text,
                request_id=run.cancel_request_id if status == "cancelled" else None,
            )
        )
        self.sessions.retitle(run)

    async def cancel(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        """``/stop`` into the chat, wait for the turn to unwind (at most ``CANCEL_WAIT``), end the run cancelled."""
        platform = self.chats.platform_of(conv.conversation_id)
        run = self.chats.run(platform, conv.conversation_id)
        if run is None or run.run_id != run_id or run.cancelling or run.finished:
            raise NotFound("Run not found or no longer cancellable")
        run.cancelling = True
        run.cancel_request_id = request_id
        try:
            await self.controls.send(platform, conv.conversation_id, "/stop")
        except Unavailable:
            log.warning("Hermes did not acknowledge /stop for run %s", run_id)
        if run.done is not None and not run.done.done():
            try:
                await asyncio.wait_for(asyncio.shield(run.done), CANCEL_WAIT)
            except asyncio.TimeoutError:
                log.warning("Hermes run %s did not unwind after /stop; reporting it cancelled", run_id)
        self.finish(run, "cancelled")

    # --- turns (hooks, on the loop) -------------------------------------------------------

    def turn_started(self, platform: str, chat_id: str, turn_id: str) -> None:
        run = self.chats.live_run(platform, chat_id)
        if run is not None and turn_id:
            run.turn_ids.add(turn_id)

    def turn_ended(self, platform: str, chat_id: str, turn_id: str, interrupted: bool) -> None:
        """Hook ``on_session_end``: only the turns of the active run count (a late hook of an older turn does not)."""
        run = self.chats.run(platform, chat_id)
        if run is not None and interrupted and turn_id and turn_id in run.turn_ids:
            run.interrupted = True
