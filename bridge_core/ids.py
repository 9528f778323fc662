"""Opaque identifiers."""

from __future__ import annotations

import re
import secrets

HEX32 = re.compile(r"^[0-9a-f]{32}$")


def new_id() -> str:
    """A 32-hex opaque id (conversations, runs, attachments)."""
    return secrets.token_hex(16)


def short_id() -> str:
    return secrets.token_hex(6)


def draft_message_id(run_id: str) -> str:
    return f"draft-{run_id}"


def is_hex32(value: object) -> bool:
    return isinstance(value, str) and bool(HEX32.match(value))
