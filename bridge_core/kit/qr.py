"""QR codes in the terminal, for what a user scans with a phone (the Loomi pairing payload, the
Pheby connect payload): one renderer for every front end's command line."""

from __future__ import annotations

import io
from typing import Any


def render_qr(data: str) -> str:
    import qrcode

    qr = qrcode.QRCode(border=2, error_correction=qrcode.constants.ERROR_CORRECT_L)
    qr.add_data(data)
    qr.make(fit=True)
    buf = io.StringIO()
    qr.print_ascii(out=buf, invert=True)
    return buf.getvalue()


def write_qr(text: str, out: Any) -> None:
    try:
        out.write(text)
    except UnicodeEncodeError:  # a terminal without UTF-8: full blocks as '#'
        table = {ord("█"): "##", ord("▀"): "\"\"", ord("▄"): "..", ord(" "): "  "}
        out.write(text.translate(table))
