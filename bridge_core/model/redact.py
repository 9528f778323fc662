"""Recursive redaction of secret-looking keys, before anything leaves the process."""

from __future__ import annotations

import hashlib
import re
from typing import Any

REDACTED = "<redacted>"

_SECRET_KEY = re.compile(
    r"(token|secret|passw(or)?d|passwd|api[_-]?key|apikey|authori[sz]ation|credential|"
    r"private[_-]?key|access[_-]?key|session[_-]?key|cookie|bearer|pat$|^pwd$|^auth$)",
    re.IGNORECASE,
)


def is_secret_key(key: object) -> bool:
    return isinstance(key, str) and bool(_SECRET_KEY.search(key))


def redact(value: Any, _depth: int = 0) -> Any:
    """Copy ``value`` with every secret-looking key's value replaced by ``<redacted>``."""
    if _depth > 64:
        return REDACTED
    if isinstance(value, dict):
        return {
            k: (REDACTED if is_secret_key(k) else redact(v, _depth + 1)) for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact(v, _depth + 1) for v in value]
    return value


def fingerprint(secret: str | bytes | None) -> str:
    """A short, non-reversible tag for logs: the first 8 hex of the SHA-256."""
    if not secret:
        return "<none>"
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.sha256(secret).hexdigest()[:8]
