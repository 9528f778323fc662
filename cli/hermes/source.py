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
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Optional

from bridge_core import events as ev
from bridge_core.agents.base import AgentSource
from bridge_core.errors import (
    ClarifyNotFound,
    ConversationNotFound,
    NotFound,
    Unavailable,
)
from bridge_core.ids import is_hex32, new_id, short_id
from bridge_core.redact import redact

from .compat import HermesApi
from .runs import HermesRun, strip_cursor
from .settings import ERROR_MAX, HermesSettings

if TYPE_CHECKING:
    from bridge_core.state import ConversationState

log = logging.getLogger("agent_bridge.hermes")

CONTROL_CHAT = "agent-bridge-control"  # chat used for global-scope slash commands
CONTROL_TIMEOUT = 60.0
CANCEL_WAIT = 15.0
TOOL_PREVIEW_MAX = 80


def tool_preview(args: Any) -> str:
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


class HermesAgent(HermesSettings, AgentSource):
    name = "hermes"
    label = "Hermes"

    def __init__(self, platforms: tuple[str, ...] = ("pheby",), api: Optional[HermesApi] = None):
        super().__init__()
        if not platforms:
            raise ValueError("at least one platform")
        self.platforms = tuple(platforms)
        self.primary = self.platforms[0]
        self.api = api or HermesApi()
        self.adapters: dict[str, Any] = {}  # platform -> BasePlatformAdapter (set by the plugin)
        self.runs: dict[tuple[str, str], HermesRun] = {}  # (platform, chat_id) -> active run
        self.conv_platform: dict[str, str] = {}
        self._controls: dict[str, asyncio.Future] = {}
        self._approvals: dict[str, dict] = {}  # approval_id -> {session_key, request_id, command, ...}
        self._approval_queue: dict[str, list[str]] = {}  # session_key -> approval ids (Hermes's FIFO)
        self._decided: dict[str, tuple[str, Optional[str]]] = {}  # approval_id -> (choice, reason) awaiting its turn
        self._orphans: dict[tuple[str, str, str], str] = {}  # streamed messages outside any run
        self._cursor: Optional[str] = None
        self.use_stream_hooks = False
        self.loop: Optional[asyncio.AbstractEventLoop] = None

    # --- lifecycle -----------------------------------------------------------------

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        try:
            self.use_stream_hooks = bool(self.api.stream_hooks)
        except Exception:
            self.use_stream_hooks = False
        try:
            await asyncio.get_running_loop().run_in_executor(None, self._load_sessions)
        except Exception:
            log.warning("could not read Hermes's session database; conversation list starts empty", exc_info=True)

    @property
    def cursor(self) -> str:
        if self._cursor is None:
            try:
                self._cursor = self.api.streaming_cursor()
            except Exception:
                self._cursor = " \u2589"
        return self._cursor

    def platform_of(self, conversation_id: str) -> str:
        return self.conv_platform.get(conversation_id, self.primary)

    def session_key(self, conv_id: str, surface: Optional[str] = None) -> str:  # type: ignore[override]
        return f"agent:main:{self.platform_of(conv_id)}:dm:{conv_id}"

    def adapter(self, platform: str) -> Any:
        adapter = self.adapters.get(platform)
        if adapter is None:
            raise Unavailable(f"Hermes platform {platform!r} is not connected")
        return adapter

    def is_online(self, conv: "ConversationState") -> bool:
        return self.platform_of(conv.conversation_id) in self.adapters

    def _source(self, adapter: Any, chat_id: str, name: Optional[str] = None) -> Any:
        return adapter.build_source(
            chat_id=chat_id, chat_name=name, chat_type="dm", user_id="agent-bridge", user_name="agent-bridge"
        )

    # --- Hermes sessions <-> bridge conversations -------------------------------------

    def _load_sessions(self) -> None:
        """Hermes conversations of our platforms become bridge conversations (list and history)."""
        db = self.api.session_db()
        found: list[tuple[str, str, dict, list]] = []
        for platform in self.platforms:
            rows = db.list_sessions_rich(source=platform, limit=500, min_message_count=1)
            for row in rows:
                chat_id = row.get("chat_id")
                if not chat_id:
                    full = db.get_session(row["id"]) or {}
                    chat_id = full.get("chat_id")
                if not is_hex32(chat_id) or any(f[1] == chat_id for f in found):
                    continue  # newest session of a chat first; older ones are its past
                try:
                    history = db.get_messages_as_conversation(row["id"])
                except Exception:
                    history = []
                found.append((platform, chat_id, row, history))
        assert self.loop is not None
        self.loop.call_soon_threadsafe(self._adopt_sessions, found)

    def _adopt_sessions(self, found: list) -> None:
        for platform, chat_id, row, history in found:
            self.conv_platform[chat_id] = platform
            conv = self.bridge.conversations.get(chat_id)
            title = (row.get("title") or row.get("preview") or "Hermes chat").strip()[:200]
            if conv is None:
                conv = self.bridge.create_conversation(title, source=self.name, conversation_id=chat_id, session_id=row.get("id"))
            conv.session_id = row.get("id")
            messages = _transcript(history, row)
            if messages:  # Hermes's transcript is the authority for history
                conv.messages.clear()
                conv.messages.extend(messages)
                conv.preview = messages[-1].text[:200]
            last = row.get("last_active") or row.get("started_at")
            if isinstance(last, (int, float)):
                conv.last_active = float(last)

    def _session_id(self, platform: str, chat_id: str) -> Optional[str]:
        key = f"agent:main:{platform}:dm:{chat_id}"
        adapter = self.adapters.get(platform)
        store = getattr(getattr(adapter, "gateway_runner", None), "session_store", None)
        if store is not None and hasattr(store, "peek_session_id"):
            try:
                sid = store.peek_session_id(key)
                if sid:
                    return sid
            except Exception:
                pass
        conv = self.bridge.conversations.get(chat_id)
        return conv.session_id if conv is not None else None

    async def conversation_deleted(self, conv: "ConversationState") -> None:
        platform = self.platform_of(conv.conversation_id)
        sid = self._session_id(platform, conv.conversation_id)
        key = self.session_key(conv.conversation_id)
        adapter = self.adapters.get(platform)
        store = getattr(getattr(adapter, "gateway_runner", None), "session_store", None)
        if store is not None and hasattr(store, "reset_session"):
            try:
                store.reset_session(key)
            except Exception:
                log.debug("session_store.reset_session failed", exc_info=True)
        if sid:
            def delete() -> None:
                self.api.session_db().delete_session(sid)

            try:
                await asyncio.get_running_loop().run_in_executor(None, delete)
            except Exception:
                log.warning("deleting Hermes session %s failed", sid, exc_info=True)
        self.conv_platform.pop(conv.conversation_id, None)

    # --- runs -----------------------------------------------------------------------------

    async def send_message(
        self, conv: "ConversationState", text: str, run_id: str, request_id: Optional[str]
    ) -> Optional[str]:
        cid = conv.conversation_id
        platform = self.platform_of(cid)
        adapter = self.adapter(platform)
        self.conv_platform.setdefault(cid, platform)
        run = HermesRun(
            run_id=run_id,
            conversation_id=cid,
            platform=platform,
            session_key=self.session_key(cid),
            user_message_id=f"u-{run_id}",
        )
        run.event = self.api.message_event(
            text=text, source=self._source(adapter, cid, conv.name), message_id=run.user_message_id
        )
        self.runs[(platform, cid)] = run
        bridge = self.bridge
        bridge.publish(ev.UserMessageSent(conversation_id=cid, message_id=run.user_message_id, text=text, run_id=run_id))
        try:
            current = self.current_model(cid)
            model, provider = current.model, current.provider
        except Exception:
            model = provider = None
        bridge.publish(
            ev.RunStarted(
                conversation_id=cid,
                run_id=run_id,
                message_id=run.message_id,
                model=model,
                provider=provider,
                title=conv.name,
                request_id=request_id,
            )
        )
        try:
            await adapter.handle_message(run.event)
        except Exception:
            log.exception("Hermes refused a message")
            run.failed_notice = "Hermes could not accept the message"
            self._finish(run, "failed")
        return run_id

    def processing_complete(self, platform: str, event: Any, outcome: Any) -> None:
        """The adapter's ``on_processing_complete``: the turn's task is over."""
        run = self.runs.get((platform, _chat_of(event)))
        if run is None or run.event is not event:
            return
        queue = getattr(self._runner(platform), "_startup_restore_queue", None) or ()
        if any(e is event for e in queue):
            return  # parked while the gateway finishes starting; Hermes replays this very event
        name = str(getattr(outcome, "value", outcome) or "").lower()
        if run.cancelling or run.interrupted or "cancel" in name:
            status = "cancelled"
        elif "fail" in name:
            status = "failed"
        else:
            status = "completed"
        self._finish(run, status)

    def _finish(self, run: HermesRun, status: str) -> None:
        if run.finished:
            return
        run.finish()
        if self.runs.get((run.platform, run.conversation_id)) is run:
            del self.runs[(run.platform, run.conversation_id)]
        text = run.final_text()
        if text:
            self.bridge.publish(
                ev.MessageCompleted(
                    conversation_id=run.conversation_id, message_id=run.message_id, text=text, run_id=run.run_id
                )
            )
        error = None
        if status == "failed":
            error = (run.failed_notice or "Hermes run failed")[:ERROR_MAX]
        self.bridge.publish(
            ev.RunFinished(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                status=status,  # type: ignore[arg-type]
                error=error,
                text=text,
                request_id=run.cancel_request_id if status == "cancelled" else None,
            )
        )
        self._maybe_retitle(run)

    def _maybe_retitle(self, run: HermesRun) -> None:
        """Hermes auto-titles sessions; pick the title up when it appears."""
        conv = self.bridge.conversations.get(run.conversation_id)
        if conv is None or self.loop is None:
            return
        sid = self._session_id(run.platform, run.conversation_id)
        if not sid:
            return
        conv.session_id = sid

        def read() -> Optional[str]:
            try:
                return self.api.session_db().get_session_title(sid)
            except Exception:
                return None

        async def retitle() -> None:
            await asyncio.sleep(2.0)  # Hermes titles in the background after the first turn
            title = await asyncio.get_running_loop().run_in_executor(None, read)
            current = self.bridge.conversations.get(run.conversation_id)
            if title and current is not None and title.strip() and title.strip()[:200] != current.name:
                self.bridge.publish(ev.ConversationUpdated(conversation_id=current.conversation_id, name=title.strip()[:200]))

        self.bridge.tasks.spawn(retitle(), name=f"hermes-title-{run.run_id}")

    async def cancel(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        platform = self.platform_of(conv.conversation_id)
        run = self.runs.get((platform, conv.conversation_id))
        if run is None or run.run_id != run_id or run.cancelling or run.finished:
            raise NotFound("Run not found or no longer cancellable")
        run.cancelling = True
        run.cancel_request_id = request_id
        try:
            await self._control(platform, conv.conversation_id, "/stop")
        except Unavailable:
            log.warning("Hermes did not acknowledge /stop for run %s", run_id)
        if run.done is not None and not run.done.done():
            try:
                await asyncio.wait_for(asyncio.shield(run.done), CANCEL_WAIT)
            except asyncio.TimeoutError:
                log.warning("Hermes run %s did not unwind after /stop; reporting it cancelled", run_id)
        self._finish(run, "cancelled")

    # --- what the adapter receives ----------------------------------------------------

    def on_send(
        self, platform: str, chat_id: str, content: str, reply_to: Optional[str], metadata: Optional[dict]
    ) -> str:
        """A ``send()`` from Hermes; returns the message id given back to Hermes."""
        meta = metadata or {}
        content = content or ""
        log.debug("send chat=%s reply_to=%s meta=%s len=%d %r", chat_id, reply_to, sorted(meta), len(content), content[:40])
        msg_id = f"h-{short_id()}"
        fut = self._controls.get(reply_to or "")
        if fut is not None:  # the reply to a slash command the bridge injected
            if not fut.done():
                fut.set_result(content)
            return msg_id
        run = self.runs.get((platform, chat_id))
        if meta.get("expect_edits"):
            text = strip_cursor(content, self.cursor)
            if run is not None:
                if not self.use_stream_hooks:
                    self._text(run, *run.segment_started(msg_id, text))
                else:
                    run.hook_messages.add(msg_id)  # the stream hooks carry the text
            else:
                self._orphans[(platform, chat_id, msg_id)] = text
            return msg_id
        if run is not None and reply_to == run.user_message_id and meta.get("notify"):
            if not self.use_stream_hooks or not run.segments:
                self._text(run, *run.final_reply(msg_id, content))
            return msg_id
        self._notice(platform, chat_id, content, during_run=run)
        return msg_id

    def on_edit(self, platform: str, chat_id: str, message_id: str, content: str, finalize: bool) -> bool:
        text = strip_cursor(content or "", self.cursor)
        run = self.runs.get((platform, chat_id))
        if run is not None and (run.has_segment(message_id) or message_id in run.hook_messages):
            if not self.use_stream_hooks:
                changed = run.segment_edited(message_id, text)
                if changed is not None:
                    self._text(run, *changed)
            return True
        key = (platform, chat_id, message_id)
        if key in self._orphans:
            if finalize:
                del self._orphans[key]
                self._notice(platform, chat_id, text, during_run=None)
            else:
                self._orphans[key] = text
            return True
        return False

    def _text(self, run: HermesRun, delta: str, appended: bool) -> None:
        if run.finished or (not delta and appended):
            return
        self.bridge.publish(
            ev.TextDelta(
                conversation_id=run.conversation_id,
                run_id=run.run_id,
                message_id=run.message_id,
                delta=delta,
                draft=run.draft,
            )
        )

    def _notice(self, platform: str, chat_id: str, content: str, during_run: Optional[HermesRun]) -> None:
        text = content.strip()
        if not text:
            return
        if during_run is not None:
            during_run.failed_notice = text
        conv_id = chat_id if chat_id in self.bridge.conversations else None
        self.bridge.publish(
            ev.Notification(
                conversation_id=conv_id,
                message_id=f"n-{new_id()}",
                text=text,
                title="Hermes" if during_run is None else "Hermes notice",
                category="result" if during_run is None else "diagnostic",
                source="hermes",
                requires_attention=during_run is None,
            )
        )

    # --- approvals ----------------------------------------------------------------------

    def approval_requested(
        self,
        platform: str,
        chat_id: str,
        command: str,
        session_key: str,
        description: str,
        allow_permanent: bool = True,
        smart_denied: bool = False,
        request_id: Optional[str] = None,
    ) -> bool:
        if chat_id not in self.bridge.conversations:
            return False
        choices = ["once", "session", "always", "deny"]
        if smart_denied:
            choices = ["once", "deny"]
        elif not allow_permanent:
            choices.remove("always")
        approval_id = short_id()
        run = self.runs.get((platform, chat_id))
        self._approvals[approval_id] = {"session_key": session_key, "request_id": request_id, "command": command}
        self._approval_queue.setdefault(session_key, []).append(approval_id)
        try:
            timeout = self.api.approval_timeout()
        except Exception:
            timeout = 60.0
        self.bridge.publish(
            ev.ApprovalRequested(
                conversation_id=chat_id,
                run_id=run.run_id if run is not None else None,
                approval_id=approval_id,
                session_key=session_key,
                command=command,
                description=description or "dangerous command",
                choices=tuple(choices),
                smart_denied=bool(smart_denied),
                deadline_ts=time.time() + timeout if timeout > 0 else None,
            )
        )
        return True

    async def resolve_approval(self, approval: ev.ApprovalRequested, choice: str, reason: Optional[str]) -> None:
        info = self._approvals.get(approval.approval_id)
        if info is None:
            raise NotFound("Approval no longer pending in Hermes")
        key = info["session_key"]
        if info.get("request_id") is not None and self.api.approval_request_ids:
            self._forget_approval(approval.approval_id)
            self.api.resolve_approval(key, choice, reason, request_id=info["request_id"])
            return
        queue = self._approval_queue.get(key, [])
        if queue and queue[0] != approval.approval_id:
            # Hermes 0.19.0 resolves a session's approvals oldest first: keep this
            # decision until the older ones are settled.
            self._decided[approval.approval_id] = (choice, reason)
            return
        self._apply(approval.approval_id, choice, reason)

    def _apply(self, approval_id: str, choice: str, reason: Optional[str]) -> None:
        info = self._approvals.get(approval_id)
        if info is None:
            return
        key = info["session_key"]
        self._forget_approval(approval_id)
        n = self.api.resolve_approval(key, choice, reason)
        if n == 0:
            log.info("Hermes had no pending approval for this session any more (timed out or interrupted)")
        self._drain_decided(key)

    def _drain_decided(self, key: str) -> None:
        queue = self._approval_queue.get(key) or []
        if queue and queue[0] in self._decided:
            choice, reason = self._decided.pop(queue[0])
            self._apply(queue[0], choice, reason)

    def _forget_approval(self, approval_id: str) -> None:
        info = self._approvals.pop(approval_id, None)
        self._decided.pop(approval_id, None)
        if info is None:
            return
        queue = self._approval_queue.get(info["session_key"])
        if queue and approval_id in queue:
            queue.remove(approval_id)
            if not queue:
                del self._approval_queue[info["session_key"]]

    def approval_settled(self, session_key: str, choice: str, command: str = "", request_id: Optional[str] = None) -> None:
        """Hook ``post_approval_response``: Hermes settled an approval (maybe on its own)."""
        queue = self._approval_queue.get(session_key) or []
        target = None
        if request_id is not None:
            target = next((a for a in queue if self._approvals[a].get("request_id") == request_id), None)
        if target is None:
            target = next((a for a in queue if self._approvals[a].get("command") == command), None)
        if target is None and queue:
            target = queue[0]
        if target is None:
            return  # the bridge already resolved and forgot it
        self._forget_approval(target)
        if choice == "timeout":
            self.bridge.approval_timed_out(target, "timeout")
        else:
            self.bridge.approval_timed_out(target, "agent")
        self._drain_decided(session_key)

    # --- clarifications ---------------------------------------------------------------

    def clarify_requested(
        self, platform: str, chat_id: str, question: str, choices: Optional[list], clarify_id: str, session_key: str
    ) -> bool:
        if chat_id not in self.bridge.conversations:
            return False
        run = self.runs.get((platform, chat_id))
        self.bridge.publish(
            ev.ClarifyRequested(
                conversation_id=chat_id,
                run_id=run.run_id if run is not None else None,
                clarify_id=str(clarify_id),
                session_key=session_key,
                question=question,
                choices=tuple(str(c) for c in choices) if choices else None,
                allow_free_text=True,
            )
        )
        return True

    async def answer_clarify(self, clarify: ev.ClarifyRequested, response: str) -> None:
        if not self.api.resolve_clarify(clarify.clarify_id, response):
            raise ClarifyNotFound()

    # --- attachments -------------------------------------------------------------------

    async def media(self, platform: str, chat_id: str, path: str, filename: Optional[str] = None) -> Optional[str]:
        if chat_id not in self.bridge.conversations or not path or not os.path.isfile(path):
            return None
        run = self.runs.get((platform, chat_id))
        att = await self.bridge.attachments.add_file(
            path,
            conversation_id=chat_id,
            message_id=run.message_id if run is not None else self.bridge.active_draft_id(chat_id),
            filename=filename,
        )
        self.bridge.publish(
            ev.AttachmentAdded(conversation_id=chat_id, attachment=att, run_id=run.run_id if run is not None else None)
        )
        return att.attachment_id

    # --- hooks (already on the bridge loop) ----------------------------------------------

    def tool_started(self, platform: str, chat_id: str, tool_name: str, args: Any, call_id: Optional[str]) -> None:
        run = self.runs.get((platform, chat_id))
        if run is None or run.finished:
            return
        run.tool_index += 1
        call_id = str(call_id) if call_id else f"t-{short_id()}"
        safe = redact(args) if isinstance(args, (dict, list)) else {}
        run.tool_started_ms[call_id] = time.monotonic()
        self.bridge.publish(
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
        run = self.runs.get((platform, chat_id))
        if run is None or run.finished or not call_id:
            return
        call_id = str(call_id)
        started = run.tool_started_ms.pop(call_id, None)
        if not isinstance(duration_ms, (int, float)):
            duration_ms = int((time.monotonic() - started) * 1000) if started else None
        failed = bool(error) or str(status or "").lower() in ("error", "failed", "failure", "blocked")
        preview = result if isinstance(result, str) else ""
        self.bridge.publish(
            ev.ToolFinished(
                conversation_id=chat_id,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=str(tool_name),
                status="failed" if failed else "completed",
                duration_ms=int(duration_ms) if duration_ms is not None else None,
                error=(str(error or status))[:ERROR_MAX] if failed else None,
                result_preview=preview[:2048],
                index=run.tool_index,
            )
        )

    def turn_started(self, platform: str, chat_id: str, turn_id: str) -> None:
        run = self.runs.get((platform, chat_id))
        if run is not None and not run.finished and turn_id:
            run.turn_ids.add(turn_id)

    def turn_ended(self, platform: str, chat_id: str, turn_id: str, interrupted: bool) -> None:
        """Hook ``on_session_end``: only the turns of the active run count (a late hook of an older turn does not)."""
        run = self.runs.get((platform, chat_id))
        if run is not None and interrupted and turn_id and turn_id in run.turn_ids:
            run.interrupted = True

    # upstream stream hooks (feature-detected; never fire on 0.19.0)

    def stream_delta(self, platform: str, chat_id: str, delta: str, kind: str = "text") -> None:
        run = self.runs.get((platform, chat_id))
        if run is None or run.finished or not delta:
            return
        run.stream_delta(delta, kind)
        self.bridge.publish(
            ev.TextDelta(
                conversation_id=chat_id,
                run_id=run.run_id,
                message_id=run.message_id,
                delta=delta,
                draft=run.reasoning if kind == "reasoning" else run.draft,
                kind="reasoning" if kind == "reasoning" else "text",
            )
        )

    def interim(self, platform: str, chat_id: str, text: str, already_streamed: bool) -> None:
        run = self.runs.get((platform, chat_id))
        if run is None or run.finished or not text:
            return
        self.bridge.publish(
            ev.InterimMessage(
                conversation_id=chat_id, run_id=run.run_id, text=text, already_streamed=bool(already_streamed)
            )
        )

    def stream_ended(self, platform: str, chat_id: str, final_text: Optional[str], error: Optional[str]) -> None:
        run = self.runs.get((platform, chat_id))
        if run is None or run.finished:
            return
        if final_text:
            run.stream_final = final_text
            if run.segments and run.text() != final_text:
                before = run.text()
                run.segments = [["stream", final_text]]
                self._text(run, *run._update(before))
        if error:
            run.failed_notice = str(error)[:ERROR_MAX]

    # --- slash commands the bridge injects ------------------------------------------------

    async def _control(self, platform: str, chat_id: str, text: str) -> str:
        adapter = self.adapter(platform)
        ctl_id = f"ctl-{short_id()}"
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._controls[ctl_id] = fut
        try:
            event = self.api.message_event(
                text=text, source=self._source(adapter, chat_id), message_id=ctl_id, command=True
            )
            await adapter.handle_message(event)
            try:
                return await asyncio.wait_for(fut, CONTROL_TIMEOUT)
            except asyncio.TimeoutError:
                raise Unavailable("Hermes did not answer in time")
        finally:
            self._controls.pop(ctl_id, None)

    def is_control(self, event: Any) -> bool:
        return str(getattr(event, "message_id", "") or "").startswith("ctl-")

    def _settings_chat(self, conversation_id: Optional[str]) -> tuple[str, str]:
        if conversation_id is None:
            return self.primary, CONTROL_CHAT
        if conversation_id not in self.bridge.conversations:
            raise ConversationNotFound()
        return self.platform_of(conversation_id), conversation_id

    def _runner(self, platform: Optional[str] = None) -> Any:
        adapter = self.adapters.get(platform or self.primary)
        return getattr(adapter, "gateway_runner", None)


def _chat_of(event: Any) -> str:
    return str(getattr(getattr(event, "source", None), "chat_id", "") or "")


def _transcript(history: list, row: dict) -> list:
    out = []
    base = row.get("started_at") if isinstance(row.get("started_at"), (int, float)) else None
    for i, msg in enumerate(history or []):
        role = msg.get("role")
        content = msg.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str) or not content.strip():
            continue
        ts = msg.get("timestamp") if isinstance(msg.get("timestamp"), (int, float)) else base
        out.append(ev.Message(message_id=f"hm-{row.get('id')}-{i}", role=role, text=content, ts=ts))
    return out
