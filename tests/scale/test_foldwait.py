"""The rule of bridge_core/scale/foldwait.py on its own (the deliveries of a node, over real PostgreSQL and Redis:
tests/scale/test_fold_waits_for_store.py): a delivery whose fold cannot read the store waits, everything after
it waits behind it, they go in order once the store answers; a fan-out's failure is not delivered again; the
retry is the owner's task, gone when it closes; a gap the bus refetches meanwhile waits behind the held one."""

from __future__ import annotations

from bridge_core.bridge.tasks import TaskSet
from bridge_core.model.errors import Unavailable
from bridge_core.scale.foldwait import FoldWait
from tests.scale.gates import Gate
from tests.scale.test_bus import Node as TNode
from tests.scale.test_bus import redis_bus
from tests.waiting import until


class Node:
    """Cluster._deliver's shape: a fold that may need the store, then the fan-out (``shown``)."""

    def __init__(self):
        self.tasks = TaskSet("test")
        self.waits = FoldWait(self.deliver, self.tasks)
        self.store_up = True
        self.needs_store: set = set()  # numbers whose fold reads the store
        self.fan_out_fails: set = set()
        self.folds: list = []
        self.shown: list = []
        self.bus = None

    async def start_bus(self, bus) -> None:
        self.bus = bus
        await bus.start(self.deliver, lambda node, data: None)

    def deliver(self, n: int, node: str, data: dict) -> None:
        if self.waits.holds(n, node, data):
            return
        self.folds.append(n)
        if n in self.needs_store and not self.store_up:
            return self.waits.wait(n, node, data)
        if n in self.fan_out_fails:
            raise RuntimeError("a front end failed")
        self.shown.append(n)


async def test_held_from_the_fold_that_waits_on_then_in_order_once_the_store_answers():
    node = Node()
    node.needs_store, node.store_up = {2, 4}, False
    for n in range(1, 7):
        node.deliver(n, "a" if n % 2 else "b", {"n": n})
    assert node.shown == [1] and [h[0] for h in node.waits.held] == [2, 3, 4, 5, 6]
    await until(lambda: node.folds.count(2) >= 3, what="a few retries")  # each one fails: nothing moves
    assert node.shown == [1] and len(node.waits.held) == 5 and len(node.tasks) == 1
    node.store_up = True
    await until(lambda: not node.waits.held, what="the held deliveries")
    assert node.shown == [1, 2, 3, 4, 5, 6] and node.waits.waited == 5
    await until(lambda: len(node.tasks) == 0, what="the retry's end")
    node.deliver(7, "a", {})  # nothing held: delivered at once
    assert node.shown[-1] == 7


async def test_a_fan_out_failing_after_the_fold_is_not_delivered_again_and_nothing_after_it_is_lost(caplog):
    node = Node()
    node.needs_store, node.store_up, node.fan_out_fails = {1}, False, {2}
    for n in (1, 2, 3):
        node.deliver(n, "a", {})
    node.store_up = True
    await until(lambda: not node.waits.held, what="the held deliveries")
    assert node.shown == [1, 3] and node.folds.count(2) == 1
    assert any("delivering event 2 failed" in r.getMessage() for r in caplog.records)


async def test_closing_the_owner_cancels_the_retry():
    node = Node()
    node.needs_store, node.store_up = {1}, False
    node.deliver(1, "a", {})
    assert len(node.tasks) == 1
    await node.tasks.close()
    assert len(node.tasks) == 0


async def test_a_gap_refetched_while_a_fold_waits_queues_behind_it_and_is_no_second_gap(redis_server, redis_url):
    """The bus counts a held event as delivered (``_last_n``): it was read, in order, so no gap. Entries the stream
    lost, refetched from their writer (redisbus ``_gap_over``), come through the same ``deliver`` and wait behind
    the held one; nothing is refetched twice, nothing said gone, and all goes out in number order."""
    a = await TNode(redis_bus(redis_url, "a")).start()
    b = Node()
    await b.start_bus(redis_bus(redis_url, "b"))
    try:
        for bus in (a.bus, b.bus):
            bus.floor = 5000
        a.bus.publish({"i": 0})
        await until(lambda: b.shown == [1], what="the first event on b")
        b.needs_store, b.store_up = {2}, False
        gate = Gate(b.bus)
        gate.close()
        a.bus.publish({"i": 1})  # b reads this one (its fold waits), not the next ones
        await until(lambda: len(b.waits.held) == 1, what="the second event held on b")
        for i in range(2, 6):
            a.bus.publish({"i": i})
            await a.bus.flush()
        await until(lambda: len(a.events) == 6, what="every event on a")
        redis_server.flush()  # b never read 3 to 6: gone from the stream
        gate.open.set()
        a.bus.publish({"i": 6})
        await until(lambda: [h[0] for h in b.waits.held] == [2, 3, 4, 5, 6, 5001], what="the refetched ones held")
        assert b.shown == [1] and b.bus.refetched == 4 and b.bus.gone == 0 and b.bus._last_n == 5001
        b.store_up = True
        await until(lambda: not b.waits.held, what="the held deliveries")
        assert b.shown == [1, 2, 3, 4, 5, 6, 5001] and b.bus.refetched == 4 and len(b.bus.jumps) == 1
    finally:
        await a.bus.stop()
        await b.bus.stop()
        await b.tasks.close()
