"""A delivery whose fold cannot read the store waits for it, and every later delivery waits behind it
(docs/scale-out.md "Several live nodes"; issue 41, chaos seeds 2018, 2022, 2104).

Folding another node's event that names a message asks whether the conversation's transcript holds it
already (seen.py); a cold transcript is read from the store then, and while PostgreSQL restarts that read
raises ``Unavailable``. Nothing is fanned out yet at that point. The bus reader used to log it ("delivering
event N failed") and go on: the event was lost for that node, never in its state nor on its front ends
(a Pheby message left open, an lvmh message closed twice, a phone's completion missing).

Now that delivery is held here, and so is every delivery after it (the node's own events included: the hub
publishes in stream order), and ``_retry`` delivers them again in order, with a bounded backoff, once the
fold reads the store again: the front ends see those events late, never never. The retry task is the
cluster's (its TaskSet: ``Cluster.stop`` cancels it).

- The bus counts a held event as delivered (``RedisBus._last_n``): it was read and handed over in order,
  so it is no gap; a refetch's entries and those the bus held behind a gap come through ``Cluster._deliver``
  in number order and queue here behind the held ones.
- The hold is in memory, not in the stream: a store outage longer than the stream's retention
  (``redisbus.MAXLEN``) loses nothing of it. It grows by what the cluster publishes during the outage
  (events published meanwhile, a few hundred bytes each) and is empty again once the store answers:
  bounded by the outage.
- Only the fold waits. An exception in ``Bridge.fan_out`` (after the fold) is logged and skipped as
  before: some front ends may have rendered the event already, and delivering it again would show it twice.
- Relays (``Cluster._relayed``) are not held: a device's revocation must not wait for the store.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Callable

from ..bridge.tasks import TaskSet

log = logging.getLogger("agent_bridge.cluster")

FIRST_WAIT = 0.1  # s before the first retry of a held fold; doubled after each failed one ...
MAX_WAIT = 2.0  # ... up to this (a store back from a restart is folded into within this long)


class FoldWait:
    def __init__(self, deliver: Callable[[int, str, Any], None], tasks: TaskSet):
        self._deliver = deliver  # Cluster._deliver: (n, node, data)
        self._tasks = tasks
        self.held: collections.deque = collections.deque()  # (n, node, data) not delivered yet, oldest first
        self._again = False  # the retry is delivering held[0]
        self._stuck = False  # ... and its fold could not read the store again
        self.waited = 0  # deliveries that were held here (tests, metrics)

    def holds(self, n: int, node: str, data: Any) -> bool:
        """Whether this delivery waits (queued behind one whose fold waits for the store)."""
        if self._again or not self.held:
            return False
        self.held.append((n, node, data))
        self.waited += 1
        return True

    def wait(self, n: int, node: str, data: Any) -> None:
        """The fold of this delivery could not read the store (nothing fanned out): it waits, and what follows."""
        self._stuck = True
        if self._again:
            return  # held[0] already
        log.warning("cluster: folding event %d needs the store, which does not answer: it and what follows "
                    "wait for it", n)  # fmt: skip
        self.held.append((n, node, data))
        self.waited += 1
        self._tasks.spawn(self._retry(), name="cluster-foldwait")

    async def _retry(self) -> None:
        since, delay = time.monotonic(), FIRST_WAIT
        count = len(self.held)
        while self.held:
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_WAIT)
            count = max(count, len(self.held))
            while self.held and self._once():
                pass
        log.warning("cluster: the store answers again: %d held deliveries folded, %.1f s late at most", count,
                    time.monotonic() - since)  # fmt: skip

    def _once(self) -> bool:
        """``held[0]`` delivered again: True when it is done (gone from the hold), False when it still waits."""
        n, node, data = self.held[0]
        self._again, self._stuck = True, False
        try:
            self._deliver(n, node, data)
        except Exception:  # its fan-out failed (or its fold, otherwise than the store): as the bus reader does
            log.exception("bus: delivering event %d failed", n)
        finally:
            self._again = False
        if self._stuck:
            return False
        self.held.popleft()
        return True
