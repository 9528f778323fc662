"""Strings a client chose, made safe for a terminal (docs/security.md, "Output").

A device name, a session or conversation title, a URL path: whatever a phone, a plugin or
any request chose can carry control characters, and a terminal obeys them (ANSI CSI and OSC
sequences move the cursor, rewrite rows, set the title, even write to the clipboard): a phone
named ``"\\x1b[2K\\r..."`` could forge rows in the admin's ``loomi devices``. ``printable`` is
the one rule: every C0 control, DEL and every C1 control (so every escape sequence loses its
introducer: ESC, CSI U+009B, OSC U+009D) is removed, as are the invisible bidirectional
overrides that reorder what a row shows; tabs, newlines and other line breaks become a space.
Everything else, accents and scripts included, prints unchanged.

``PrintableFormatter`` applies it to log lines (a request path or a reason in a log message);
a traceback keeps its newlines.
"""

from __future__ import annotations

import logging

_SPACE = "\t\n\v\f\r\x1c\x1d\x1e\x1f\x85\u2028\u2029"
_BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_TABLE = {c: None for c in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))}
_TABLE.update({ord(c): " " for c in _SPACE})
_TABLE.update({ord(c): None for c in _BIDI})
_KEEP_NEWLINES = {**_TABLE, ord("\n"): "\n"}


def printable(text: object) -> str:
    """``text`` (``str()`` of anything) without control characters, for a terminal."""
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case: nothing to remove (an O(n) scan in C, no copy)
        return s
    return s.translate(_TABLE)


def printable_lines(text: str) -> str:
    """``printable``, keeping newlines (a traceback's lines)."""
    return text if text.isprintable() else text.translate(_KEEP_NEWLINES)


class PrintableFormatter(logging.Formatter):
    """A formatter whose message part is ``printable`` (one line whatever it quotes) and whose
    traceback and stack keep only their newlines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))

    def formatException(self, ei) -> str:  # type: ignore[no-untyped-def]
        return printable_lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return printable_lines(super().formatStack(stack_info))


__all__ = ["PrintableFormatter", "printable", "printable_lines"]
