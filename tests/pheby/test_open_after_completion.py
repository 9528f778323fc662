"""A conversation opened after its run's message completed, before the run ended: the message completes once.

A ``conversation.open`` snapshot carries the run until it ends, whether or not its message completed
(``ActiveRun.completed``); a client that had the ``message.complete`` (or a snapshot showing the message
complete) must not get it again at the run's end (pheby_adapter/protocol.py ``Turns``). Over real sockets,
with the spec-built client (tests/conformance/pheby_client.py); the agent holds the run's end after its
message completed until the test lets it go, so the window is there every time.
"""

from __future__ import annotations

import asyncio

from bridge_core.bridge.agent import RunContext
from bridge_core.bridge.demo import DemoAgent
from tests.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp, count


class HeldEnd(DemoAgent):
    """Streams "Done." and completes its message; the run ends when ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def run(self, ctx: RunContext, text: str) -> None:
        ctx.delta("Done.")
        ctx.complete()
        await self.release.wait()


async def test_opening_a_conversation_after_its_message_completed_gets_no_second_completion(service_factory):
    agent = HeldEnd()
    svc = await service_factory(adapters=("pheby",), source=agent)
    url = f"ws://127.0.0.1:{svc.ports['pheby']}/ws"
    watcher, late = PhebyApp(url, PHEBY_SECRET), PhebyApp(url, PHEBY_SECRET)
    try:
        await watcher.connect()
        cid = await watcher.create("Held")
        run_id = (await watcher.chat(cid, "hi"))["run_id"]
        done = await watcher.wait_frame(lambda f: f["type"] == "message.complete")
        mid = done["message_id"]
        await late.connect()
        for app in (watcher, late):  # both open it while the run still runs, its message completed
            snap = await app.open(cid)
            assert snap["run"]["run_id"] == run_id and snap["run"]["message_id"] == mid, snap
        agent.release.set()
        for app in (watcher, late):
            await app.wait_until(lambda app=app: run_id in app.view(cid).finished)
            assert app.violations == []
        assert count(watcher.frames, type="message.complete", message_id=mid) == 1  # the one it streamed
        assert count(late.frames, type="message.complete", message_id=mid) == 0  # its snapshot had it complete
        assert [m["text"] for m in late.view(cid).messages.values() if m["role"] == "assistant"] == ["Done."]
    finally:
        await watcher.close()
        await late.close()
