"""The bridge's event loop (bridge_core/kit/looping.py): hooks at the end of a turn, and the outboxes on it.

The suite's loops are made by ``looping.Policy`` (tests/conftest.py), as
``agent-bridge serve``'s are by ``looping.new_event_loop``. A hook runs when
the turn's callbacks are done, before the loop waits; what a hook makes
ready runs without the loop blocking first. An ``Outbox`` on such a loop
writes what was put during a turn at the end of that turn, in one write;
on any other loop (a host's own), at the next turn.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import selectors
import types

from bridge_core.kit import looping
from bridge_core.kit.outbox import Outbox
from tests.core.test_outbox_flush import SyncSender
from tests.waiting import turns


async def test_the_suite_runs_on_the_bridges_loop():
    assert looping.end_of_turn(asyncio.get_running_loop()) is not None


async def test_a_hook_runs_when_the_turn_is_done_before_the_next_turn():
    loop = asyncio.get_running_loop()
    selector = looping.end_of_turn(loop)
    order: list[str] = []
    next_turn = loop.create_future()
    selector.at_end(lambda: order.append("end of turn"))
    loop.call_soon(lambda: (order.append("next turn"), next_turn.set_result(None)))
    order.append("this turn")
    await next_turn
    assert order == ["this turn", "end of turn", "next turn"]


def test_a_hook_that_makes_work_ready_turns_the_wait_into_a_poll():
    """The selector waits as the loop asked, unless a hook made a callback ready or registered another
    hook: then it only polls (timeout 0), so they run without the loop sleeping until I/O or a timer."""

    class _Recorded(selectors.DefaultSelector):
        def select(self, timeout=None):
            self.timeouts.append(timeout)
            return super().select(0)

    class Probe(looping.TurnSelector, _Recorded):
        pass

    selector = Probe()
    selector.timeouts = []
    loop_like = types.SimpleNamespace(_ready=collections.deque())
    try:
        assert selector.bind(loop_like)
        selector.at_end(lambda: None)
        selector.select(None)
        assert selector.timeouts[-1] is None  # nothing made ready: the wait the loop asked for
        selector.at_end(lambda: loop_like._ready.append("a woken task"))
        selector.select(None)
        assert selector.timeouts[-1] == 0
        loop_like._ready.clear()
        ran = []
        selector.at_end(lambda: selector.at_end(lambda: ran.append("second hook")))
        selector.select(5.0)
        assert selector.timeouts[-1] == 0 and ran == []
        selector.select(5.0)  # the next turn's select runs it, then waits as asked
        assert ran == ["second hook"] and selector.timeouts[-1] == 5.0
    finally:
        selector.close()


async def test_what_a_hook_makes_ready_runs_on_the_running_loop():
    loop = asyncio.get_running_loop()
    selector = looping.end_of_turn(loop)
    woken = asyncio.Event()
    selector.at_end(woken.set)
    await asyncio.wait_for(woken.wait(), 30)
    again = loop.create_future()
    selector.at_end(lambda: selector.at_end(lambda: again.set_result("second hook")))
    assert await asyncio.wait_for(again, 30) == "second hook"


async def test_a_failing_hook_is_logged_and_the_others_still_run(caplog):
    loop = asyncio.get_running_loop()
    selector = looping.end_of_turn(loop)
    ran = loop.create_future()

    def broken():
        raise RuntimeError("hook broke")

    with caplog.at_level(logging.ERROR, logger="agent_bridge.loop"):
        selector.at_end(broken)
        selector.at_end(lambda: ran.set_result(True))
        assert await asyncio.wait_for(ran, 30)
    assert "end-of-turn callback" in caplog.text and "hook broke" in caplog.text


async def test_frames_put_in_a_turn_leave_at_its_end_in_one_write():
    loop = asyncio.get_running_loop()
    writes: list = []
    box = Outbox(SyncSender(None, writes))
    seen_next_turn = loop.create_future()
    for i in range(3):
        assert box.put(b"frame %d" % i)
    assert writes == []  # never from put
    loop.call_soon(lambda: seen_next_turn.set_result(list(writes)))
    assert await seen_next_turn == [[b"frame 0", b"frame 1", b"frame 2"]]  # written before the next turn
    assert box.writes == 1 and box.sent_frames == 3


def test_on_a_hosts_own_loop_frames_leave_at_the_next_turn():
    """A plain asyncio loop (the Hermes gateway's, say) has no end-of-turn hook: the flush is a
    ``call_soon``, so the frames leave at the next turn, together."""
    loop = asyncio.SelectorEventLoop()
    try:
        assert looping.end_of_turn(loop) is None

        async def scenario():
            writes: list = []
            box = Outbox(SyncSender(None, writes))
            box.put(b"a")
            box.put(b"b")
            assert writes == []
            await turns(1)  # one turn: the flush scheduled with call_soon ran before this step
            return writes

        assert loop.run_until_complete(scenario()) == [[b"a", b"b"]]
    finally:
        loop.close()
