"""The built-in deterministic demo agent (README.md, "The demo agent").

Every front end can be tried and tested with it, without an LLM.
"""

from __future__ import annotations

import asyncio
import struct
import time
import zlib
from typing import Optional

from ..model import events as ev
from ..model.ids import new_id
from .agent import (
    AgentBridge,
    AgentCommand,
    AgentFailure,
    ManagedAgentSource,
    ModelCurrent,
    ModelsSnapshot,
    Provider,
    ReasoningSnapshot,
    RunContext,
    StoredSettings,
    YoloSnapshot,
)


PROVIDERS = (Provider(slug="demo", name="Demo", models=("demo-small", "demo-large"), total_models=2),)

# The demo's commands (README.md, "The demo agent"): a message whose first word is one of them runs
# its handler (``_`` + the word without its slash); anything else is echoed. Front ends list them.
COMMANDS = (
    AgentCommand("/approve", "/approve <command>", "asks your approval to run <command>"),
    AgentCommand("/clarify", "/clarify <question>", "asks you a question: yes, no, or your own words"),
    AgentCommand("/tool", "/tool [name]", "calls a tool, then replies"),
    AgentCommand("/attach", "/attach", "sends a text file, demo.txt"),
    AgentCommand("/image", "/image", "sends a small picture, demo.png"),
    AgentCommand("/slow", "/slow [seconds]", "streams a word every 100 ms (30 s by default): try Stop"),
    AgentCommand("/fail", "/fail", "a run that fails, to see how a failure looks"),
    AgentCommand("/notify", "/notify <text>", "a notification, delivered after the run"),
    AgentCommand("/bench", "/bench <n>", "streams n small pieces as fast as it can"),
)
HANDLERS = {c.command: "_" + c.command[1:] for c in COMMANDS}

BENCH_PIECE = "tok "
BENCH_YIELD_EVERY = 32  # deltas between yields to the event loop


def demo_png() -> bytes:
    """A valid 8x8 PNG (a small blue square), made without any image library."""
    width = height = 8
    raw = b"".join(b"\x00" + b"\x20\x60\xc0" * width for _ in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


class DemoAgent(ManagedAgentSource):
    name = "demo"
    label = "Demo"
    uses_reasoning = False  # the efforts are accepted (the canonical set, README.md) but change nothing

    def commands(self) -> tuple[AgentCommand, ...]:
        return COMMANDS

    def __init__(self, approval_timeout: Optional[float] = 300.0, word_delay: float = 0.0):
        super().__init__()
        self.approval_timeout = approval_timeout
        self.word_delay = word_delay
        self.settings: StoredSettings = None  # type: ignore[assignment]

    def attach(self, bridge: AgentBridge) -> None:
        super().attach(bridge)
        self.settings = StoredSettings(bridge, PROVIDERS, "demo-small", "demo")

    # --- runs -------------------------------------------------------------

    async def run(self, ctx: RunContext, text: str) -> None:
        stripped = text.strip()
        word, _, rest = stripped.partition(" ")
        rest = rest.strip()
        method = HANDLERS.get(word)
        handler = getattr(self, method) if method is not None else None
        if handler is None:
            await self._stream_words(ctx, f"Echo: {text}")
        else:
            await handler(ctx, rest)

    async def _stream_words(self, ctx: RunContext, text: str, delay: Optional[float] = None) -> None:
        delay = self.word_delay if delay is None else delay
        words = text.split(" ")
        for i, w in enumerate(words):
            ctx.delta(w if i == 0 else " " + w)
            await asyncio.sleep(delay)
        ctx.complete()

    async def _tool(self, ctx: RunContext, rest: str) -> None:
        name = rest.split()[0] if rest else "demo_tool"
        started = time.monotonic()
        call_id = ctx.tool_started(name, {"input": "demo"}, preview=f"{name}(input=demo)")
        await asyncio.sleep(0.01)
        ctx.tool_finished(
            call_id, name, "completed", duration_ms=int((time.monotonic() - started) * 1000), result_preview="ok"
        )
        await self._stream_words(ctx, f"Tool {name} completed.")

    async def _approve(self, ctx: RunContext, command: str) -> None:
        command = command or "echo hello"
        if self.yolo(ctx.conversation_id).enabled:
            choice = "once"
        else:
            choice = await ctx.approval(command, "Demo approval for a shell command", timeout=self.approval_timeout)
        if choice in ("once", "session", "always"):
            started = time.monotonic()
            call_id = ctx.tool_started("terminal", {"command": command}, preview=command[:40])
            await asyncio.sleep(0.01)
            ctx.tool_finished(
                call_id,
                "terminal",
                "completed",
                duration_ms=int((time.monotonic() - started) * 1000),
                result_preview=f"ran {command}",
            )
            await self._stream_words(ctx, f"Ran: {command}")
        elif choice == "timeout":
            await self._stream_words(ctx, f"Approval timed out; did not run: {command}")
        else:
            await self._stream_words(ctx, f"Denied: {command}")

    async def _clarify(self, ctx: RunContext, question: str) -> None:
        answer = await ctx.clarify(question or "Continue?", ["yes", "no"], allow_free_text=True)
        await self._stream_words(ctx, f'You answered: "{answer}"')

    async def _attach(self, ctx: RunContext, rest: str) -> None:
        await ctx.attach_bytes(b"demo attachment\n", "demo.txt", "text/plain")
        await self._stream_words(ctx, "Attached demo.txt")

    async def _image(self, ctx: RunContext, rest: str) -> None:
        await ctx.attach_bytes(demo_png(), "demo.png", "image/png")
        await self._stream_words(ctx, "Attached demo.png")

    async def _fail(self, ctx: RunContext, rest: str) -> None:
        raise AgentFailure("demo failure")

    async def _slow(self, ctx: RunContext, rest: str) -> None:
        try:
            seconds = float(rest) if rest else 30.0
        except ValueError:
            seconds = 30.0
        seconds = max(0.0, min(seconds, 3600.0))
        n = max(1, int(round(seconds * 10)))
        for i in range(n):
            ctx.delta(("" if i == 0 else " ") + f"w{i + 1}")
            await asyncio.sleep(0.1)
        ctx.complete()

    async def _notify(self, ctx: RunContext, text: str) -> None:
        ctx.complete("Notification scheduled.")
        conv_id = ctx.conversation_id
        # delivered outside any run: after this run has finished
        self.bridge.call_soon(
            lambda: self.bridge.publish(
                ev.Notification(
                    conversation_id=conv_id if conv_id in self.bridge.conversations else None,
                    message_id=f"n-{new_id()}",
                    text=text or "Notification",
                    title="Demo notification",
                    source="demo",
                )
            )
        )

    async def _bench(self, ctx: RunContext, rest: str) -> None:
        """``/bench <n> [per_second]``: n deltas of "tok ", as fast as accepted or paced."""
        parts = rest.split()
        try:
            n = int(parts[0]) if parts else 1000
        except ValueError:
            n = 1000
        n = max(0, min(n, 10_000_000))
        try:
            rate = float(parts[1]) if len(parts) > 1 else 0.0
        except ValueError:
            rate = 0.0
        if rate > 0:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i in range(n):
                ctx.delta(BENCH_PIECE)
                wait = start + (i + 1) / rate - loop.time()
                if wait > 0.0005:
                    await asyncio.sleep(wait)
                elif i % BENCH_YIELD_EVERY == BENCH_YIELD_EVERY - 1:
                    await asyncio.sleep(0)
        else:
            for i in range(n):
                ctx.delta(BENCH_PIECE)
                if i % BENCH_YIELD_EVERY == BENCH_YIELD_EVERY - 1:
                    await asyncio.sleep(0)
        ctx.complete()

    # --- settings -----------------------------------------------------------

    def models(self, conversation_id: Optional[str]) -> ModelsSnapshot:
        return self.settings.snapshot(conversation_id)

    def current_model(self, conversation_id: Optional[str]) -> ModelCurrent:
        return self.settings.model(conversation_id)

    async def set_model(self, model: str, provider: Optional[str], conversation_id: Optional[str]) -> ModelCurrent:
        return await self.settings.set_model(model, provider, conversation_id)

    def reasoning(self, conversation_id: Optional[str]) -> ReasoningSnapshot:
        return self.settings.reasoning(conversation_id)

    async def set_reasoning(self, effort: str, conversation_id: Optional[str]) -> ReasoningSnapshot:
        return await self.settings.set_reasoning(effort, conversation_id)

    def yolo(self, conversation_id: Optional[str]) -> YoloSnapshot:
        return self.settings.yolo(conversation_id)

    async def set_yolo(self, enabled: bool, conversation_id: Optional[str]) -> YoloSnapshot:
        return await self.settings.set_yolo(enabled, conversation_id)


__all__ = ["DemoAgent", "PROVIDERS", "demo_png", "ev"]
