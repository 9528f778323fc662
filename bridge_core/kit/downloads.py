"""Attachment downloads: one rule for every front end (docs/security.md).

``AttachmentStore.get`` (``bridge_core/bridge/attachments.py``) finds a file: a known id, not
expired, a regular file directly in the attachments directory (never a link), or its chunks
in the shared store. ``file_response`` sends either with ``download_headers``: its type,
``nosniff``, ``private, no-store``, a sandboxing CSP and a content-disposition whose file
name cannot break the header. Each front end only authenticates the request and answers
"not found" in its own shape.
"""

from __future__ import annotations

import urllib.parse
from typing import Optional

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from ..bridge.attachments import Found, StoredBytes
from ..model.events import Attachment

ATTACHMENT_CSP = "default-src 'none'; sandbox"


def content_disposition(filename: str, inline: bool) -> str:
    """``inline`` or ``attachment`` with an ASCII fallback name (no quote, backslash, ``;`` or
    control character can end the header) and the exact name as RFC 5987 ``filename*``."""
    ascii_name = "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\;' else "_" for c in filename) or "file"
    quoted = urllib.parse.quote(filename, safe="")
    return f"{'inline' if inline else 'attachment'}; filename=\"{ascii_name}\"; filename*=UTF-8''{quoted}"


def download_headers(att: Attachment) -> dict:
    """The headers of every attachment download, whichever front end serves it."""
    return {
        "Content-Type": att.mime_type,
        "Content-Disposition": content_disposition(att.filename, att.inline_image),
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private, no-store",
        "Content-Security-Policy": ATTACHMENT_CSP,
    }


class StoredResponse(web.StreamResponse):
    """A download from the shared store: its chunks streamed one at a time."""

    def __init__(self, att: Attachment, source: StoredBytes):
        super().__init__(headers=download_headers(att))
        self.content_length = att.size
        self._source = source

    async def prepare(self, request: web.BaseRequest) -> Optional[AbstractStreamWriter]:
        writer = await super().prepare(request)
        if request.method != "HEAD":
            for n in range(self._source.chunks):
                await self.write(self._source.chunk(n))
        return writer


def file_response(att: Attachment, found: Found) -> web.StreamResponse:
    """The download of what ``AttachmentStore.get`` found (the caller has authenticated)."""
    if isinstance(found, StoredBytes):
        return StoredResponse(att, found)
    return web.FileResponse(found, headers=download_headers(att))
