"""The one token bucket: ``rate`` frames per second with bursts up to ``burst`` (pure: the caller
passes the time). Pheby and Loomi limit each socket's frames with it; docs/security.md."""

from __future__ import annotations

from typing import Optional


class TokenBucket:
    """Starts full. ``take(now)`` spends one token and says whether there was one; tokens come
    back at ``rate`` per second up to ``burst``. Without a start time the first ``take`` sets it."""

    __slots__ = ("rate", "burst", "tokens", "at")

    def __init__(self, rate: float, burst: float, now: Optional[float] = None):
        self.rate = rate
        self.burst = burst
        self.tokens = burst
        self.at = now

    def take(self, now: float) -> bool:
        if self.at is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
