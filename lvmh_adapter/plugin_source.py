"""Plugin sessions as an agent source: pi sessions seen by Pheby and Loomi clients.

A session streaming into ``/agent/ws`` is a bridge conversation (source
``lvmh``, conversation id = sessionId). Its lvmh events are translated into
shared events and published:

| lvmh event | shared events |
|---|---|
| ``agent_start`` | ``RunStarted`` (the run a ``send_message`` opened, else a new one) |
| ``message_update {delta}`` | ``TextDelta`` (one ``Draft`` per assistant message) |
| ``message_end`` user | ``UserMessageSent`` |
| ``message_end`` assistant with tool calls | ``InterimMessage`` (already streamed) |
| ``message_end`` assistant | ``MessageCompleted`` |
| ``tool_execution_start/_update/_end`` | ``ToolStarted`` / ``ToolProgress`` / ``ToolFinished`` |
| ``agent_end {usage}`` | usage summed into the run (pi ends several LLM calls per settled run) |
| ``agent_settled {aborted}`` | ``RunFinished`` completed / cancelled |
| ``bye``, or a disconnect not healed within ``DISCONNECT_GRACE`` | ``RunFinished`` cancelled / failed |

Events that need a run (deltas, tools, assistant messages) open one when none is
active (a session joined mid-run). ``send_message`` sends a ``prompt`` frame and
opens the run at once, so a second send gets ``run_active``; ``cancel`` sends
``abort``.

Several nodes (docs/scale-out.md "A pi run follows its plugin"): a plugin saying hello
to another node with its run still open takes the core's run with it (``take_over``,
``Cluster.move_run``): the same run, message and text so far, as the node it left handed
them over (``carry``, in its ``off``) or as the core's state has them. The node it left
lets the run go (``run_moved``); a run this node ends while its plugin is away (the
grace, a cancel) is ended only if it is still this node's (``Cluster.end_run``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Optional

from bridge_core.model import events as ev
from bridge_core.bridge.agent import AgentSource, ModelCurrent, ModelsSnapshot, Provider
from bridge_core.model.errors import BadRequest, Conflict, NotFound, Unavailable
from bridge_core.model.ids import draft_message_id, new_id
from bridge_core.model.redact import redact_tool_args

from .book import SOURCE_NAME

if TYPE_CHECKING:
    from bridge_core.model.state import ConversationState

    from .host import Host

log = logging.getLogger("agent_bridge.lvmh.source")

DISCONNECT_GRACE = 15.0
MAX_PREVIEW = 2048


class _Run:
    __slots__ = ("run_id", "message_id", "draft", "completions", "text", "inp", "out", "cost", "seen")
    CARRIED = (("n", "completions", int), ("x", "text", str), ("i", "inp", int), ("o", "out", int),
               ("c", "cost", float), ("s", "seen", bool))  # fmt: skip

    def __init__(self, run_id: str):
        self.run_id = run_id
        self.seen = False  # an event of pi's for this run arrived (a prompted run may not have begun yet)
        self.message_id = draft_message_id(run_id)
        self.draft = ev.Draft()
        self.completions = 0
        self.text = ""
        self.inp: Optional[int] = None
        self.out: Optional[int] = None
        self.cost: Optional[float] = None

    def add_usage(self, u: Any) -> None:
        if not isinstance(u, dict):
            return
        for key, attr in (("inputTokens", "inp"), ("outputTokens", "out")):
            v = u.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
                setattr(self, attr, (getattr(self, attr) or 0) + v)
        c = u.get("totalCost")
        if isinstance(c, (int, float)) and not isinstance(c, bool) and c == c and c >= 0:
            self.cost = (self.cost or 0.0) + float(c)

    def usage(self) -> Optional[ev.Usage]:
        if self.inp is None and self.out is None and self.cost is None:
            return None
        return ev.Usage(input_tokens=self.inp, output_tokens=self.out, total_cost=self.cost)

    def carry(self) -> dict:
        """This run's state for the node its plugin moves to (``carried``)."""
        out = {"r": self.run_id, "d": self.draft.text()}
        out.update((key, getattr(self, attr)) for key, attr, _ in self.CARRIED)
        return out

    @classmethod
    def carried(cls, data: dict, run_id: str) -> Optional["_Run"]:
        """The run another node carried over (``carry``), if it is ``run_id``."""
        if data.get("r") != run_id:
            return None
        run = cls(run_id)
        draft = data.get("d")
        run.draft = ev.Draft(draft if isinstance(draft, str) else "")
        for key, attr, kind in cls.CARRIED:
            value = data.get(key)
            if isinstance(value, kind) or (kind is float and isinstance(value, int)):
                setattr(run, attr, value)
        return run

    @classmethod
    def of_state(cls, conv: "ConversationState") -> "_Run":
        """The running run of ``conv`` as the core's state has it (nothing was carried over: its node
        died): its message, the text so far, the messages it completed; not its usage."""
        active = conv.run
        assert active is not None
        run = cls(active.run_id)
        run.seen = True
        run.message_id = active.message_id
        run.draft = ev.Draft(active.text)
        prefix = active.message_id + "-"
        done = [m for m in conv.messages if m.role == "assistant" and
                (m.message_id == active.message_id or m.message_id.startswith(prefix))]  # fmt: skip
        run.completions = len(done)
        run.text = done[-1].text if done else ""
        return run


def _s(value: Any, limit: int = 1_000_000) -> Optional[str]:
    return value[:limit] if isinstance(value, str) else None


class PluginSource(AgentSource):
    name = SOURCE_NAME
    label = "pi (lvmh)"

    def __init__(self, frontend: "Host"):
        super().__init__()
        self.fe = frontend
        self.runs: dict[str, _Run] = {}
        self._grace: dict[str, asyncio.TimerHandle] = {}

    # --- AgentSource -------------------------------------------------------------------------------

    def is_online(self, conv: "ConversationState") -> bool:
        return self.fe.book.plugin_online(conv.conversation_id)

    async def send_message(
        self, conv: "ConversationState", text: str, run_id: str, request_id: Optional[str]
    ) -> Optional[str]:
        sid = conv.conversation_id
        if not text.strip():
            raise BadRequest("message must not be empty")
        if not self.fe.book.plugin_online(sid):
            raise Unavailable("The pi session is offline")
        self.fe.plugins.send_prompt(sid, text)
        self._start(sid, run_id, request_id)
        return run_id

    async def cancel(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        sid = conv.conversation_id
        run = self.runs.get(sid)
        if run is None or run.run_id != run_id:
            raise NotFound("Run not found")
        if self.fe.book.plugin_online(sid):
            self.fe.plugins.send_abort(sid)  # the run ends with the plugin's agent_settled {aborted: true}
            if not run.seen:
                self._finish(sid, "cancelled", None)  # pi never began it: nothing will settle it
            return
        if not await self._finish_away(sid, "cancelled", None):  # pi is gone: nothing will settle it
            raise Unavailable("The pi session has just moved to another node; try again")

    async def pause(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        await self.cancel(conv, run_id, request_id)

    async def conversation_deleted(self, conv: "ConversationState") -> None:
        if self.fe.book.plugin_online(conv.conversation_id):
            raise Conflict("The pi session is connected; end it before deleting its conversation")
        self._cancel_grace(conv.conversation_id)
        self.runs.pop(conv.conversation_id, None)

    def current_model(self, conversation_id: Optional[str]) -> ModelCurrent:
        info = self.fe.book.plugin_info(conversation_id) if conversation_id else None
        if info is None:
            return ModelCurrent(model=None, provider=None, scope="global", conversation_id=conversation_id)
        return ModelCurrent(
            model=info.get("model"), provider=info.get("provider"), scope="conversation", conversation_id=conversation_id
        )

    def models(self, conversation_id: Optional[str]) -> ModelsSnapshot:
        cur = self.current_model(conversation_id)
        providers: tuple = ()
        if cur.model and cur.provider:
            providers = (Provider(slug=cur.provider, name=cur.provider, models=(cur.model,), is_current=True),)
        return ModelsSnapshot(
            providers=providers,
            current_model=cur.model,
            current_provider=cur.provider,
            supported_reasoning_efforts=(),
            scope=cur.scope,
        )

    async def stop(self) -> None:
        for handle in self._grace.values():
            handle.cancel()
        self._grace.clear()

    # --- connection lifecycle (from the server) -----------------------------------------------------

    def connected(self, sid: str) -> None:
        self._cancel_grace(sid)

    def disconnected(self, sid: str) -> None:
        if sid in self.runs and sid not in self._grace:
            loop = asyncio.get_running_loop()
            self._grace[sid] = loop.call_later(DISCONNECT_GRACE, self._grace_over, sid)

    def _grace_over(self, sid: str) -> None:
        self._grace.pop(sid, None)
        if self.fe.book.plugin_online(sid):
            return
        if self.fe.cluster is None:
            self._finish(sid, "failed", "The pi session disconnected")
        else:
            self.fe.tasks.spawn(self._finish_away(sid, "failed", "The pi session disconnected"), name="lvmh-grace")

    async def _finish_away(self, sid: str, status: str, error: Optional[str]) -> bool:
        """End the run of a session whose plugin is not connected here. Several nodes: only if the run
        is still this node's (its plugin may have taken it to another node); False when it is not."""
        run = self.runs.get(sid)
        if run is None:
            return True
        cluster = self.fe.cluster
        if cluster is not None and not await cluster.end_run(run.run_id):
            if self.runs.get(sid) is run:
                self._let_go(sid)
            return False
        if self.runs.get(sid) is run:
            self._finish(sid, status, error)
        return True

    # --- several nodes: the run follows its plugin (docs/scale-out.md) ----------------------------------

    def carry(self, sid: str) -> Optional[dict]:
        """The run this node holds for ``sid`` (its plugin left), for the node it says hello to next."""
        run = self.runs.get(sid)
        return run.carry() if run is not None else None

    async def take_over(self, sid: str, carried: Optional[dict]) -> None:
        """The plugin of ``sid`` says hello here while the core's run of its conversation runs on
        another node (it was connected there): the run moves here, and what pi streams next
        continues it (the same run, message and text so far)."""
        conv = self.bridge.conversations.get(sid)
        if conv is None or conv.run is None or sid in self.runs:
            return
        if not await self.fe.cluster.move_run(conv):
            return  # it ended meanwhile: what pi streams next opens a run of its own, as on one node
        if conv.run is None or sid in self.runs:
            return
        run = _Run.carried(carried, conv.run.run_id) if carried is not None else None
        self.runs[sid] = run if run is not None else _Run.of_state(conv)
        log.info("lvmh: pi session %s brought its run %s here", sid, conv.run.run_id)

    def run_moved(self, conv: "ConversationState", run_id: str) -> None:
        run = self.runs.get(conv.conversation_id)
        if run is not None and run.run_id == run_id:
            self._let_go(conv.conversation_id)
            log.info("lvmh: pi session %s took its run %s to another node", conv.conversation_id, run_id)

    def _let_go(self, sid: str) -> None:
        self.runs.pop(sid, None)
        self._cancel_grace(sid)

    def _cancel_grace(self, sid: str) -> None:
        handle = self._grace.pop(sid, None)
        if handle is not None:
            handle.cancel()

    def info_changed(self, sid: str, name: str, before: dict, info: dict) -> None:
        """Session ``sid``'s info changed (its hello or a ``session_info``): a new name or model
        of its conversation becomes ``ConversationUpdated`` / ``ModelChanged``."""
        conv = self.bridge.conversations.get(sid)
        if conv is None or conv.source != SOURCE_NAME:
            return
        if name != conv.name:
            self.bridge.publish(ev.ConversationUpdated(conversation_id=sid, name=name))
        model, provider = info.get("model"), info.get("provider")
        if model and (model, provider) != (before.get("model"), before.get("provider")):
            self.bridge.publish(ev.ModelChanged(model=model, provider=provider, scope="conversation", conversation_id=sid))

    # --- lvmh -> shared -------------------------------------------------------------------------------

    def _start(self, sid: str, run_id: Optional[str] = None, request_id: Optional[str] = None) -> _Run:
        run = _Run(run_id or new_id())
        self.runs[sid] = run
        info = self.fe.book.plugin_info(sid) or {}
        conv = self.bridge.conversations.get(sid)
        self.bridge.publish(
            ev.RunStarted(
                conversation_id=sid,
                run_id=run.run_id,
                message_id=run.message_id,
                model=info.get("model"),
                provider=info.get("provider"),
                title=conv.name if conv is not None else None,
                request_id=request_id,
            )
        )
        return run

    def _run(self, sid: str) -> _Run:
        run = self.runs.get(sid)
        if run is None:
            run = self._start(sid)
        run.seen = True
        return run

    def _finish(self, sid: str, status: str, error: Optional[str]) -> None:
        run = self.runs.pop(sid, None)
        self._cancel_grace(sid)
        if run is None:
            return
        self.bridge.publish(
            ev.RunFinished(
                conversation_id=sid,
                run_id=run.run_id,
                status=status,  # type: ignore[arg-type]
                error=error,
                text=run.text,
                usage=run.usage(),
            )
        )

    def translate(self, sid: str, etype: str, obj: dict) -> None:
        """Publish the shared events of one new lvmh event of plugin session ``sid``, once it is stored
        (the book's deferred effect, persistence.EventLog.later: never those of an event a crash can take
        back, nor, several nodes, of one this node may no longer write: another node claimed the session)."""
        fn = _TRANSLATE.get(etype)
        if fn is not None:
            fn(self, sid, obj)

    def _agent_start(self, sid: str, obj: dict) -> None:
        self._run(sid)

    def _message_start(self, sid: str, obj: dict) -> None:
        msg = obj.get("message")
        if isinstance(msg, dict) and msg.get("role") == "assistant":
            self._run(sid).draft = ev.Draft()

    def _message_update(self, sid: str, obj: dict) -> None:
        delta = obj.get("delta")
        if not isinstance(delta, str) or not delta:
            return
        run = self._run(sid)
        run.draft.append(delta)
        self.bridge.publish(
            ev.TextDelta(conversation_id=sid, run_id=run.run_id, message_id=run.message_id, delta=delta, draft=run.draft)
        )

    def _message_end(self, sid: str, obj: dict) -> None:
        msg = obj.get("message")
        if not isinstance(msg, dict):
            return
        role = msg.get("role")
        text = _s(msg.get("text")) or ""
        if role == "user":
            run = self.runs.get(sid)
            mid = _s(msg.get("id"), 200) or f"u-{new_id()}"
            self.bridge.publish(
                ev.UserMessageSent(
                    conversation_id=sid, message_id=mid, text=text, run_id=run.run_id if run is not None else None
                )
            )
            return
        if role != "assistant":
            return  # toolResult (covered by tool events), system, custom roles
        run = self._run(sid)
        calls = msg.get("toolCalls")
        if isinstance(calls, list) and calls:
            if text:
                self.bridge.publish(
                    ev.InterimMessage(conversation_id=sid, run_id=run.run_id, text=text, already_streamed=True)
                )
            run.draft = ev.Draft()
            return
        mid = run.message_id if run.completions == 0 else f"{run.message_id}-{run.completions}"
        run.completions += 1
        run.text = text
        run.draft = ev.Draft(text)
        self.bridge.publish(ev.MessageCompleted(conversation_id=sid, message_id=mid, text=text, run_id=run.run_id))

    def _tool_start(self, sid: str, obj: dict) -> None:
        call_id = _s(obj.get("toolCallId"), 200)
        if not call_id:
            return
        run = self._run(sid)
        self.bridge.publish(
            ev.ToolStarted(
                conversation_id=sid,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=_s(obj.get("toolName"), 200) or "tool",
                args=redact_tool_args(obj.get("args")),
            )
        )

    def _tool_update(self, sid: str, obj: dict) -> None:
        call_id = _s(obj.get("toolCallId"), 200)
        if not call_id:
            return
        run = self._run(sid)
        self.bridge.publish(
            ev.ToolProgress(
                conversation_id=sid,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=_s(obj.get("toolName"), 200) or "tool",
                partial=_s(obj.get("partial"), MAX_PREVIEW) or "",
            )
        )

    def _tool_end(self, sid: str, obj: dict) -> None:
        call_id = _s(obj.get("toolCallId"), 200)
        if not call_id:
            return
        run = self._run(sid)
        duration = obj.get("durationMs")
        self.bridge.publish(
            ev.ToolFinished(
                conversation_id=sid,
                run_id=run.run_id,
                call_id=call_id,
                tool_name=_s(obj.get("toolName"), 200) or "tool",
                status="failed" if obj.get("isError") is True else "completed",
                duration_ms=int(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool)
                and 0 <= duration < 2**53 else None,
                result_preview=_s(obj.get("resultPreview"), MAX_PREVIEW) or "",
            )
        )

    def _agent_end(self, sid: str, obj: dict) -> None:
        run = self.runs.get(sid)
        if run is not None:
            run.add_usage(obj.get("usage"))

    def _agent_settled(self, sid: str, obj: dict) -> None:
        self._finish(sid, "cancelled" if obj.get("aborted") is True else "completed", None)

    def _bye(self, sid: str, obj: dict) -> None:
        self._finish(sid, "cancelled", "The pi session ended")


_TRANSLATE = {
    "agent_start": PluginSource._agent_start,
    "message_start": PluginSource._message_start,
    "message_update": PluginSource._message_update,
    "message_end": PluginSource._message_end,
    "tool_execution_start": PluginSource._tool_start,
    "tool_execution_update": PluginSource._tool_update,
    "tool_execution_end": PluginSource._tool_end,
    "agent_end": PluginSource._agent_end,
    "agent_settled": PluginSource._agent_settled,
    "bye": PluginSource._bye,
}
