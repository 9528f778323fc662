"""Where a starting node joins the bus's streams, and the number its delivery goes on from
(redisbus.py; docs/scale-out.md "Joining").

A node reads each stream from ``LEARN_BACK`` seconds before the point it delivers from (its end, or
``back`` seconds before it): what comes before that point is read for its senders' counters only
(busauth.py, replays). Entry ids are the Redis server's milliseconds: no clock of ours is involved.

Its gaps are told from the start (``number_at``): the number of the last event before the point it
delivers from is where delivery goes on, as if it had delivered it. Before, a node told gaps only from
its first delivery, so what Redis lost before that (a node restarted 0.86 s before Redis lost its
keys, still reading its join's counters-only part) vanished without a refetch or a hole (chaos seed 2003).
"""

from __future__ import annotations

from typing import Any, Optional

from . import catchup
from .busauth import LEARN_BACK, entry_order, genuine

PEEK = 16  # entries looked at for the number a join starts from (the first genuine one counts)


async def join(r: Any, key: str, back: float = 0.0) -> tuple[str, Optional[tuple[int, int]], tuple[int, int]]:
    """Where to read ``key`` from, the point delivering starts after (an entry id as (ms, seq); None: no
    stream, everything is delivered): its last entry or (``back`` > 0) ``back`` seconds before it, and
    the stream's end as read ((0, 0): none)."""
    last = await r.xrevrange(key, count=1)
    if not last:
        return "0-0", None, (0, 0)
    end = entry_order(last[0][0])
    start = end if back <= 0 else (max(0, end[0] - int(back * 1000)), 0)
    return f"{max(0, start[0] - int(LEARN_BACK * 1000))}-0", start, end


def learning(learn: dict, key: str, entry_id: bytes) -> bool:
    """Whether ``entry_id`` of ``key`` is before the point it delivers from (``learn``: the stream's point, while
    it is read for its senders' counters only; dropped once passed)."""
    if key not in learn:
        return False
    if entry_order(entry_id) <= learn[key]:
        return True
    del learn[key]
    return False


def passed(fields: dict, entry_id: bytes, join_end: tuple[int, int], last_n: int,
           last_ts: Optional[float]) -> tuple[int, Optional[float]]:
    """The number (and time) delivery goes on from once an entry not delivered (its sender not live) is passed
    over before the node's first delivery: its last event's, when it is in the join's window (at or before
    ``join_end``, the stream's end at the join) and follows ``last_n`` with no gap; else unmoved. After a first
    delivery such entries are a gap said as a hole of this life, as ever (test_life_holes.py). The join's
    window overlaps the store the node loads next, which has what such a node (a previous life of this one,
    a node gone) committed: passed over in silence as before gaps were told from the join (nothing this life
    numbered crosses it), not asked for as a gap no node can answer (its writer is gone), said as a hole,
    and every phone of the node closed."""
    ends = catchup.ends(fields)
    if entry_order(entry_id) > join_end or ends is None or ends[1] < ends[0] or ends[0] > last_n + 1 or \
            ends[1] <= last_n:  # fmt: skip
        return last_n, last_ts
    ts = ends[2] if ends[2] is not None and (last_ts is None or ends[2] > last_ts) else last_ts
    return ends[1], ts


async def number_at(r: Any, key: str, counter_key: str, auth_key: bytes, start: Optional[tuple[int, int]],
                    counter: int) -> tuple[int, Optional[float]]:
    """The number gaps are told from before a node's first delivery, and its event's time: the last one
    at or before ``start`` (what the join does not deliver never counts as a gap), else one below the
    stream's first (all of it is delivered), else (no stream) ``counter``, read at start. A genuine entry
    only, and never above the counter read now: ``n`` is not under the MAC, so a copy of an entry put
    back with a higher one would have the node drop what follows as renumbered."""
    if start is None:
        return counter, None
    before = await r.xrevrange(key, max=f"{start[0]}-{start[1]}", count=PEEK)
    entries = before or await r.xrange(key, count=PEEK)
    cap = max(counter, int(await r.get(counter_key) or counter))
    for entry_id, fields in entries:
        ends = catchup.ends(fields) if genuine(auth_key, key, entry_id, fields) else None
        if ends is not None:
            return (min(ends[1], cap), ends[2]) if before else (min(ends[0] - 1, cap), None)
    return counter, None
