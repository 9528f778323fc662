"""A batch of the bus's writer as signed entries (bridge_core/scale/redisbus.py ``_writer``). Pure.

Each run of events and relays is one stream entry (``"e"``: its header, MAC, body and the number of
events in it); a command to an inbox goes between them where it was sent. A batch is signed once: when
Redis took it and its answer was lost (the connection went, Redis restarted), the writer sends the same
entries again, so a node that read the first copy drops the second as replayed (busauth.py) instead of
delivering its events twice; a node that never got the first copy (Redis lost it unread) gets the second.
"""

from __future__ import annotations

from typing import Any, Callable

RESIGN_AFTER = 5.0  # s a batch sent again keeps its entries' signatures (busauth WINDOW_MS: 10 s, then stale)


def signed_entries(sign: Callable[[str, bytes], tuple], events_key: str, batch: list) -> list[tuple]:
    """``batch`` ((kind, payload): kind "e", "r" or an inbox key) as (key, header, MAC, body, events)."""
    out: list[tuple[Any, ...]] = []
    items: list[bytes] = []
    events = 0
    for kind, payload in [*batch, (None, b"")]:
        if kind == "e" or kind == "r":
            items.append(payload)
            events += kind == "e"
            continue
        if items:
            body = b"[" + b",".join(items) + b"]"
            out.append((events_key, *sign(events_key, body), body, events))
            items, events = [], 0
        if kind is not None:
            out.append((kind, *sign(kind, payload), payload, 0))
    return out
