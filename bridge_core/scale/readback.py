"""Reading the bus's event stream back, applying nothing: the newest genuine event that matches
(bridge_core/scale/cluster.py: the text of a run a node closes as interrupted, docs/scale-out.md)."""

from __future__ import annotations

from typing import Any, Callable

import orjson

from .busauth import entry_order, genuine

BATCH = 512  # entries per read


async def newest(r: Any, events_key: str, key: bytes, needle: bytes, match: Callable[[Any], bool], back: float) -> Any:
    """The newest event of the stream's last ``back`` seconds whose entry holds ``needle`` and that
    ``match(data)`` takes, read backwards and applied nowhere (no counter noted); None if none. A
    genuine entry only (its MAC), whatever its epoch: what the nodes delivered when it was live."""
    last = await r.xrevrange(events_key, count=1) if r is not None else None
    if not last:
        return None
    low = f"{max(0, entry_order(last[0][0])[0] - int(back * 1000))}-0"
    high = "+"
    while True:
        entries = await r.xrevrange(events_key, max=high, min=low, count=BATCH)
        for entry_id, fields in entries:
            payload = fields.get(b"b")
            if type(payload) is not bytes or needle not in payload or not genuine(key, events_key, entry_id, fields):
                continue
            try:
                items = orjson.loads(payload)
            except ValueError:
                continue
            for item in reversed(items if type(items) is list else []):
                if type(item) is list and len(item) == 2 and item[0] == "e" and match(item[1]):
                    return item[1]
        if len(entries) < BATCH:
            return None
        high = "(" + (entries[-1][0].decode() if isinstance(entries[-1][0], bytes) else entries[-1][0])
