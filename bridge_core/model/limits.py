"""The limits the bridge and the front ends share, in one place (pure: no I/O).

The bridge enforces them on every command; a front end's codec may check them
while it decodes a frame (Pheby answers ``too_large`` before anything runs),
always through these names, never a copy of the number.
"""

from __future__ import annotations

from .errors import TooLarge

MAX_TEXT = 64_000  # characters of a message sent, or of a clarification's answer
HISTORY_CAP = 500  # messages a conversation's history gives at most


def check_text(text: str, what: str = "Text") -> None:
    """TooLarge when ``text`` is longer than ``MAX_TEXT`` characters (``what`` names it in the message)."""
    if len(text) > MAX_TEXT:
        raise TooLarge(f"{what} longer than {MAX_TEXT} characters")
