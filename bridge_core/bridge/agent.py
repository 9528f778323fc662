"""The agent-source interface, and the managed-run machinery built-in agents use.

An agent source turns what its agent does into shared events (through
``bridge.publish``) and carries out shared commands. Sources whose runs the
bridge drives (the demo agent) subclass ``ManagedAgentSource`` and write one
coroutine per run against a ``RunContext``; sources that drive their own
lifecycle (Hermes, lvmh plugin sessions) publish events themselves.

A source reaches the bridge it is attached to only through ``AgentBridge``, what it
may use of it (``Bridge`` is one): this module does not import the bridge.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Optional, Protocol

import attrs

from ..model import events as ev
from ..model.errors import BadRequest, BridgeError, NotFound, NotImplementedByAgent
from ..model.ids import draft_message_id, new_id, short_id
from ..model.redact import redact_tool_args

if TYPE_CHECKING:
    from ..model.state import ConversationState
    from .attachments import AttachmentStore
    from .store import BaseStore
    from .tasks import TaskSet

log = logging.getLogger("agent_bridge.agent")


class AgentBridge(Protocol):
    """What an agent source uses of the bridge it is attached to (``bridge.Bridge`` is one)."""

    conversations: "dict[str, ConversationState]"  # every conversation's state, by id
    store: "BaseStore"  # the settings table (``StoredSettings``)
    tasks: "TaskSet"  # where a managed run's coroutine runs
    attachments: "AttachmentStore"

    def publish(self, event: Any) -> int: ...  # a shared event, into the one ordered log
    def call_soon(self, fn: Callable[[], Any]) -> None: ...
    def conversation(self, conversation_id: Optional[str]) -> "ConversationState": ...  # or ConversationNotFound
    def active_draft_id(self, conversation_id: str) -> Optional[str]: ...  # the running message's id
    def approval_timed_out(self, approval_id: str, decided_by: str = "timeout") -> None: ...  # the agent decided


@attrs.frozen
class Provider:
    slug: str
    name: str
    models: tuple[str, ...]
    is_current: bool = False
    total_models: Optional[int] = None


@attrs.frozen
class ModelsSnapshot:
    providers: tuple[Provider, ...]
    current_model: Optional[str]
    current_provider: Optional[str]
    supported_reasoning_efforts: tuple[str, ...]
    scope: str = "global"


@attrs.frozen
class ModelCurrent:
    model: Optional[str]
    provider: Optional[str]
    scope: str
    conversation_id: Optional[str]


@attrs.frozen
class ReasoningSnapshot:
    effort: Optional[str]
    enabled: bool
    scope: str
    conversation_id: Optional[str]
    supported_efforts: tuple[str, ...] = ev.REASONING_EFFORTS


@attrs.frozen
class AgentCommand:
    """A command a user can type to an agent, as front ends that list them show it (the web UI's empty state)."""

    command: str  # "/approve"
    usage: str  # "/approve <command>"
    description: str


@attrs.frozen
class YoloSnapshot:
    enabled: bool
    scope: str
    conversation_id: Optional[str]


class AgentSource:
    """Base class: every method a front end can reach, with safe defaults."""

    name = "agent"
    label = "Agent"
    uses_reasoning = True  # False: its runs ignore the reasoning effort (front ends need not offer it)

    def __init__(self) -> None:
        self.bridge: AgentBridge = None  # type: ignore[assignment]

    def commands(self) -> tuple[AgentCommand, ...]:
        """What a user can type besides plain text, for front ends that list it; none by default."""
        return ()

    def attach(self, bridge: AgentBridge) -> None:
        self.bridge = bridge

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    def is_online(self, conv: "ConversationState") -> bool:
        return True

    def session_key(self, conv_id: str, surface: str = "pheby") -> str:
        return f"agent:main:{surface}:dm:{conv_id}"

    # --- commands ------------------------------------------------------------

    async def send_message(
        self, conv: "ConversationState", text: str, run_id: str, request_id: Optional[str]
    ) -> Optional[str]:
        raise NotImplementedByAgent()

    async def cancel(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        raise NotImplementedByAgent()

    async def pause(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        await self.cancel(conv, run_id, request_id)

    async def resolve_approval(self, approval: ev.ApprovalRequested, choice: str, reason: Optional[str]) -> None:
        raise NotImplementedByAgent()

    async def answer_clarify(self, clarify: ev.ClarifyRequested, response: str) -> None:
        raise NotImplementedByAgent()

    async def conversation_deleted(self, conv: "ConversationState") -> None:
        pass

    def run_moved(self, conv: "ConversationState", run_id: str) -> None:
        """Several nodes: another node took ``run_id`` over (its agent reaches that node now,
        ``Cluster.move_run``). A source that ran it here lets it go without ending it."""

    # --- settings (conversation or global scope) -----------------------------

    def models(self, conversation_id: Optional[str]) -> ModelsSnapshot:
        raise NotImplementedByAgent()

    def current_model(self, conversation_id: Optional[str]) -> ModelCurrent:
        raise NotImplementedByAgent()

    async def set_model(self, model: str, provider: Optional[str], conversation_id: Optional[str]) -> ModelCurrent:
        raise NotImplementedByAgent()

    def reasoning(self, conversation_id: Optional[str]) -> ReasoningSnapshot:
        raise NotImplementedByAgent()

    async def set_reasoning(self, effort: str, conversation_id: Optional[str]) -> ReasoningSnapshot:
        raise NotImplementedByAgent()

    def yolo(self, conversation_id: Optional[str]) -> YoloSnapshot:
        raise NotImplementedByAgent()

    async def set_yolo(self, enabled: bool, conversation_id: Optional[str]) -> YoloSnapshot:
        raise NotImplementedByAgent()


class AgentFailure(Exception):
    """Raised inside a managed run: the run fails with this message."""


class RunContext:
    """What a managed run's coroutine uses to stream, call tools and ask people."""

    def __init__(self, bridge: AgentBridge, source: "ManagedAgentSource", conversation_id: str, run_id: str):
        self.bridge = bridge
        self.source = source
        self.conversation_id = conversation_id
        self.run_id = run_id
        self.message_id = draft_message_id(run_id)
        self._draft = ev.Draft()
        self._reasoning = ev.Draft()
        self.completed = False
        self.finished = False
        self._tool_index = 0

    @property
    def text(self) -> str:
        return self._draft.text()

    @text.setter
    def text(self, value: str) -> None:
        self._draft = ev.Draft(value)

    def delta(self, piece: str, kind: str = "text", iteration: int = 0) -> None:
        draft = self._draft if kind == "text" else self._reasoning
        draft.append(piece)
        # the hot path, once per streamed delta: the event made by position (ev.streamed_delta)
        self.bridge.publish(ev.streamed_delta(self.conversation_id, self.run_id, self.message_id, piece, draft,
                                              kind, iteration))  # type: ignore[arg-type]

    def tool_started(self, tool_name: str, args: Any, call_id: Optional[str] = None, preview: str = "") -> str:
        call_id = call_id or f"t-{short_id()}"
        self._tool_index += 1
        self.bridge.publish(
            ev.ToolStarted(
                conversation_id=self.conversation_id,
                run_id=self.run_id,
                call_id=call_id,
                tool_name=tool_name,
                args=redact_tool_args(args),
                preview=preview,
                index=self._tool_index,
            )
        )
        return call_id

    def tool_finished(
        self,
        call_id: str,
        tool_name: str,
        status: str = "completed",
        duration_ms: Optional[int] = None,
        error: Optional[str] = None,
        result_preview: str = "",
    ) -> None:
        self.bridge.publish(
            ev.ToolFinished(
                conversation_id=self.conversation_id,
                run_id=self.run_id,
                call_id=call_id,
                tool_name=tool_name,
                status=status,  # type: ignore[arg-type]
                duration_ms=duration_ms,
                error=error,
                result_preview=result_preview[:2048],
                index=self._tool_index,
            )
        )

    async def approval(
        self, command: str, description: str, *, timeout: Optional[float] = None, choices=ev.APPROVAL_CHOICES
    ) -> str:
        """Ask for a decision; returns the choice (``timeout`` when nobody answered in time)."""
        approval_id = short_id()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.source._decisions[approval_id] = fut
        deadline = time.time() + timeout if timeout else None
        self.bridge.publish(
            ev.ApprovalRequested(
                conversation_id=self.conversation_id,
                run_id=self.run_id,
                approval_id=approval_id,
                session_key=self.source.session_key(self.conversation_id),
                command=command,
                description=description,
                choices=tuple(choices),
                deadline_ts=deadline,
            )
        )
        try:
            if timeout:
                try:
                    return await asyncio.wait_for(asyncio.shield(fut), timeout)
                except asyncio.TimeoutError:
                    self.bridge.approval_timed_out(approval_id)
                    return "timeout"
            return await fut
        finally:
            self.source._decisions.pop(approval_id, None)

    async def clarify(self, question: str, choices: Optional[list[str]], allow_free_text: bool = True) -> str:
        clarify_id = short_id()
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self.source._decisions[clarify_id] = fut
        self.bridge.publish(
            ev.ClarifyRequested(
                conversation_id=self.conversation_id,
                run_id=self.run_id,
                clarify_id=clarify_id,
                session_key=self.source.session_key(self.conversation_id),
                question=question,
                choices=tuple(choices) if choices is not None else None,
                allow_free_text=allow_free_text,
            )
        )
        try:
            return await fut
        finally:
            self.source._decisions.pop(clarify_id, None)

    async def attach_bytes(self, data: bytes, filename: str, mime_type: Optional[str] = None) -> ev.Attachment:
        att = await self.bridge.attachments.add_bytes(
            data,
            filename=filename,
            conversation_id=self.conversation_id,
            message_id=self.bridge.active_draft_id(self.conversation_id),
            mime_type=mime_type,
        )
        self.bridge.publish(ev.AttachmentAdded(conversation_id=self.conversation_id, attachment=att, run_id=self.run_id))
        return att

    def complete(self, text: Optional[str] = None) -> None:
        if text is not None:
            self.text = text
        self.completed = True
        self.bridge.publish(
            ev.MessageCompleted(
                conversation_id=self.conversation_id, message_id=self.message_id, text=self.text, run_id=self.run_id
            )
        )


class ManagedAgentSource(AgentSource):
    """A source whose runs are coroutines the bridge starts, cancels and finishes."""

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[str, asyncio.Task] = {}
        self._cancelling: dict[str, Optional[str]] = {}
        self._decisions: dict[str, asyncio.Future] = {}

    async def run(self, ctx: RunContext, text: str) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    async def send_message(
        self, conv: "ConversationState", text: str, run_id: str, request_id: Optional[str]
    ) -> Optional[str]:
        bridge = self.bridge
        # read before anything is published: with several nodes it reads the shared store, which may fail (a
        # PostgreSQL restart); a failure after the message went out left it on every node's screen and in no
        # run, nor in the store of a node killed next (chaos seed 2412, nodes_disagree)
        current = self.current_model(conv.conversation_id)
        bridge.publish(
            ev.UserMessageSent(conversation_id=conv.conversation_id, message_id=f"u-{new_id()}", text=text, run_id=run_id)
        )
        bridge.publish(
            ev.RunStarted(
                conversation_id=conv.conversation_id,
                run_id=run_id,
                message_id=draft_message_id(run_id),
                model=current.model,
                provider=current.provider,
                title=conv.name,
                request_id=request_id,
            )
        )
        ctx = RunContext(bridge, self, conv.conversation_id, run_id)
        task = bridge.tasks.spawn(self._drive(ctx, text), name=f"run-{run_id}")
        # a task cancelled before its first step never enters _drive: finish the run anyway
        task.add_done_callback(lambda t: self._finish(ctx, "cancelled", None))
        self._runs[run_id] = task
        return run_id

    async def _drive(self, ctx: RunContext, text: str) -> None:
        status, error = "completed", None
        try:
            await self.run(ctx, text)
            if not ctx.completed:
                ctx.complete()
        except asyncio.CancelledError:
            status = "cancelled"
        except AgentFailure as exc:
            status, error = "failed", str(exc)
        except BridgeError as exc:
            status, error = "failed", exc.message
        except Exception:
            log.exception("run %s failed", ctx.run_id)
            status, error = "failed", "agent error"
        finally:
            self._finish(ctx, status, error)

    def _finish(self, ctx: RunContext, status: str, error: Optional[str]) -> None:
        """Publish the run's end exactly once."""
        if ctx.finished:
            return
        ctx.finished = True
        self._runs.pop(ctx.run_id, None)
        request_id = self._cancelling.pop(ctx.run_id, None)
        # the bridge closes what the run left open (its message, pending decisions): Bridge.close_run
        self.bridge.publish(
            ev.RunFinished(
                conversation_id=ctx.conversation_id,
                run_id=ctx.run_id,
                status=status,  # type: ignore[arg-type]
                error=error,
                text=ctx.text,
                request_id=request_id if status == "cancelled" else None,
            )
        )

    async def cancel(self, conv: "ConversationState", run_id: str, request_id: Optional[str]) -> None:
        task = self._runs.get(run_id)
        if task is None or run_id in self._cancelling or task.done():
            raise NotFound("Run not found or no longer cancellable")
        self._cancelling[run_id] = request_id
        task.cancel()
        await asyncio.wait([task], timeout=10)

    async def resolve_approval(self, approval: ev.ApprovalRequested, choice: str, reason: Optional[str]) -> None:
        fut = self._decisions.get(approval.approval_id)
        if fut is not None and not fut.done():
            fut.set_result(choice)

    async def answer_clarify(self, clarify: ev.ClarifyRequested, response: str) -> None:
        fut = self._decisions.get(clarify.clarify_id)
        if fut is not None and not fut.done():
            fut.set_result(response)

    async def stop(self) -> None:
        for task in list(self._runs.values()):
            task.cancel()
        if self._runs:
            await asyncio.wait(list(self._runs.values()), timeout=5)


class StoredSettings:
    """Model / reasoning / yolo kept in the store's settings table, global or per conversation."""

    def __init__(self, bridge: AgentBridge, providers: tuple[Provider, ...], default_model: str, default_provider: str):
        self.bridge = bridge
        self.providers = providers
        self.default_model = default_model
        self.default_provider = default_provider
        # Every agent.* setting, read once, when this process is the store's only writer of them (SQLite):
        # every run start reads three (one per conversation among them), and a read on the loop waited up
        # to 21 ms for the GIL behind a busy writer thread (docs/performance.md, "Team load"). A shared store (several
        # nodes) is read each time.
        self._cache: Optional[dict[str, Any]] = None

    def _get(self, key: str) -> Any:
        store = self.bridge.store
        if store.shared:
            raw = store.get_setting(key)
            return json.loads(raw) if raw is not None else None
        if self._cache is None:
            rows = store.query("SELECT key, value FROM settings WHERE key LIKE 'agent.%'")
            self._cache = {k: json.loads(v) for k, v in rows}
        return self._cache.get(key)

    async def _set(self, key: str, value: Any) -> None:
        await self.bridge.store.set_setting(key, json.dumps(value))
        if self._cache is not None:
            self._cache[key] = value

    def _scoped(self, name: str, conversation_id: Optional[str]) -> tuple[Any, str]:
        if conversation_id is not None:
            self.bridge.conversation(conversation_id)
            val = self._get(f"agent.{name}:{conversation_id}")
            if val is not None:
                return val, "conversation"
        return self._get(f"agent.{name}"), "global"

    def model(self, conversation_id: Optional[str]) -> ModelCurrent:
        val, scope = self._scoped("model", conversation_id)
        if val is None:
            val = {"model": self.default_model, "provider": self.default_provider}
        return ModelCurrent(model=val["model"], provider=val["provider"], scope=scope, conversation_id=conversation_id)

    async def set_model(self, model: str, provider: Optional[str], conversation_id: Optional[str]) -> ModelCurrent:
        match = [p for p in self.providers if model in p.models and (provider is None or p.slug == provider)]
        if not match:
            raise BadRequest(f"Unknown model {model!r}" + (f" for provider {provider!r}" if provider else ""))
        value = {"model": model, "provider": match[0].slug}
        if conversation_id is not None:
            self.bridge.conversation(conversation_id)
            await self._set(f"agent.model:{conversation_id}", value)
            return ModelCurrent(model=model, provider=match[0].slug, scope="conversation", conversation_id=conversation_id)
        await self._set("agent.model", value)
        return ModelCurrent(model=model, provider=match[0].slug, scope="global", conversation_id=None)

    def snapshot(self, conversation_id: Optional[str]) -> ModelsSnapshot:
        cur = self.model(conversation_id)
        providers = tuple(attrs.evolve(p, is_current=(p.slug == cur.provider)) for p in self.providers)
        return ModelsSnapshot(
            providers=providers,
            current_model=cur.model,
            current_provider=cur.provider,
            supported_reasoning_efforts=ev.REASONING_EFFORTS,
            scope=cur.scope,
        )

    def reasoning(self, conversation_id: Optional[str]) -> ReasoningSnapshot:
        val, scope = self._scoped("reasoning", conversation_id)
        effort = val if val is not None else "medium"
        return ReasoningSnapshot(
            effort=effort, enabled=effort != "none", scope=scope, conversation_id=conversation_id
        )

    async def set_reasoning(self, effort: str, conversation_id: Optional[str]) -> ReasoningSnapshot:
        if effort not in ev.REASONING_EFFORTS:
            raise BadRequest(f"Invalid reasoning effort {effort!r}; one of {', '.join(ev.REASONING_EFFORTS)}")
        if conversation_id is not None:
            self.bridge.conversation(conversation_id)
            await self._set(f"agent.reasoning:{conversation_id}", effort)
            scope = "conversation"
        else:
            await self._set("agent.reasoning", effort)
            scope = "global"
        return ReasoningSnapshot(effort=effort, enabled=effort != "none", scope=scope, conversation_id=conversation_id)

    def yolo(self, conversation_id: Optional[str]) -> YoloSnapshot:
        val, scope = self._scoped("yolo", conversation_id)
        return YoloSnapshot(enabled=bool(val), scope=scope, conversation_id=conversation_id)

    async def set_yolo(self, enabled: bool, conversation_id: Optional[str]) -> YoloSnapshot:
        if conversation_id is not None:
            self.bridge.conversation(conversation_id)
            await self._set(f"agent.yolo:{conversation_id}", bool(enabled))
            return YoloSnapshot(enabled=bool(enabled), scope="conversation", conversation_id=conversation_id)
        await self._set("agent.yolo", bool(enabled))
        return YoloSnapshot(enabled=bool(enabled), scope="global", conversation_id=None)

