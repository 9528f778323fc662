"""Secrets kept out of what leaves the process: secret-looking keys redacted recursively, a URL's
passwords masked, a secret shown as a fingerprint."""

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


def redact_tool_args(args: Any) -> Any:
    """A tool call's arguments as they may leave an agent source: a dict or a list with every
    secret-looking key's value redacted (``redact``); anything else is no arguments, ``{}``. The one
    rule for every source's ``ToolStarted`` (``RunContext.tool_started``, Hermes's hooks, a pi
    plugin's events) and for the pi frames lvmh stores."""
    return redact(args) if isinstance(args, (dict, list)) else {}


def fingerprint(secret: str | bytes | None) -> str:
    """A short, non-reversible tag for logs: the first 8 hex of the SHA-256."""
    if not secret:
        return "<none>"
    if isinstance(secret, str):
        secret = secret.encode()
    return hashlib.sha256(secret).hexdigest()[:8]


# A URL's user:password@ (the password runs to the last "@" of the authority, as the PostgreSQL and
# Redis clients read it), and every password=... pair: a URL's query (?password=, &sslpassword=) or
# libpq's key=value form (password=x, password = 'a b'), quoted or not.
_URL_PASSWORD = re.compile(r"(?<=://)([^:/?#\s]*):[^/?#\s]*@")
_PASSWORD_PAIR = re.compile(r"(?i)((?:^|(?<=[\s?&;,(]))[\w.-]*password\s*=\s*)"  # the key, then its value:
                            r"""('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s&#;,)]*)""")  # quoted or up to a separator


def mask_url(text: str) -> str:
    """``text`` (a store or bus URL, or a message quoting one) with every password shown as ``***``:
    ``user:***@``, ``password=***`` (docs/security.md, "Secrets"). The one rule for printing one."""
    return _PASSWORD_PAIR.sub(r"\1***", _URL_PASSWORD.sub(r"\1:***@", text))
