"""A wrong copy of a real secret, for the tests that must be refused.

A random secret can end in whatever a test appends (``secret[:-2] + "AA"`` is the
same credential once in 4,096 pairings), so the copy changes the first character
to one it is certain to differ from, and keeps the length and alphabet.
"""

from __future__ import annotations


def forged(secret: str) -> str:
    """``secret`` with its first character changed: never equal to it, same length."""
    return ("B" if secret[0] == "A" else "A") + secret[1:]
