"""The other figures: idle connections, reconnect with replay, conversation.open, lvmh ingest."""

from __future__ import annotations


async def run_all(quick: bool, rounds: int) -> bool:
    print("\n(extra figures: not yet measured)")
    return True
