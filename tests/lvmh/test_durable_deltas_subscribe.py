"""A browser subscribing while a message's start waits for its commit gets that message's deltas
(issue 41; durable before shown, lvmh_adapter/book.py ``on_event``).

A bridge conversation's text delta is only rendered for a browser that watches; one nobody watches
goes into the ``inflight`` text. With durable before shown the message's ``message_start`` reaches the
stream only once its batch commits: a browser that subscribes in between sees that ``message_start``
after its subscribe, then the ``message_end``, and the deltas between were never rendered. A spec
client (which ignores ``inflight``) then holds a message whose deltas do not make its text. Over a
real socket, the store's writer held while the message streams.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

from bridge_core.model import commands as cmd
from tests.waiting import until


class _Held:
    """The log's store, the commit of its batches told only once ``release`` is set (the writer thread
    free meanwhile: the core's own writes go on)."""

    def __init__(self, store, release: threading.Event):
        self._store, self._release = store, release

    def submit(self, op):
        told: concurrent.futures.Future = concurrent.futures.Future()

        def later(done):
            self._release.wait(30)
            told.set_result(done.result())

        self._store.submit(op).add_done_callback(lambda f: threading.Thread(target=later, args=(f,)).start())
        return told

    def __getattr__(self, name):
        return getattr(self._store, name)


async def test_a_browser_subscribing_before_the_start_is_shown_gets_the_deltas_after_it(lvmh, browsers):
    log = lvmh.frontends["lvmh"].book.log
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="durable deltas"), cmd.LOCAL)
    cid = conv.conversation_id
    await log.aflush()
    release = threading.Event()
    log.store = _Held(log.store, release)  # lvmh's batches wait (the core's writes go on): nothing is shown
    try:
        sending = asyncio.ensure_future(
            lvmh.bridge.execute(cmd.SendMessage(text="/slow 1", conversation_id=cid), cmd.LOCAL))
        # streamed with nobody watching, its message_start still waiting for its commit
        await until(lambda: len((conv.run.text if conv.run else "").split()) >= 3, what="three words streamed")
        b = await browsers()
        await b.subscribe(cid)
    finally:
        release.set()
    events = await b.events_until(
        cid, lambda e: e["type"] == "message_end" and e["message"]["role"] == "assistant", timeout=30)
    await sending
    types = [e["type"] for e in events]
    start = max(i for i, t in enumerate(types) if t == "message_start")
    assert events[start]["message"]["role"] == "assistant"  # the browser saw the message open after subscribing
    deltas = "".join(e["delta"] for e in events[start:] if e["type"] == "message_update")
    assert deltas == events[-1]["message"]["text"]  # so every delta of it, as the spec's client adds them
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(seqs)
