"""Attachment storage: copies under opaque 32-hex ids, served only by id.

Files the agent produces are copied into ``<data-dir>/attachments/<id>``;
the original is never touched. Copies expire after ``retention_days``
(0 = keep forever) and an hourly cleanup deletes them.

Serving is one rule for every front end (docs/security.md): ``AttachmentStore.get``
finds a file (known id, not expired, a regular file directly in the attachments
directory, never a link) and ``file_response`` sends it with ``download_headers``
(its type, ``nosniff``, ``private, no-store``, a sandboxing CSP and a
content-disposition whose file name cannot break the header). Each front end
only authenticates the request and answers "not found" in its own shape.
``attachment_fields`` is the attachment's JSON form the Pheby and Loomi frames share.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import shutil
import time
import urllib.parse
from typing import Callable, Optional

from aiohttp import web

from .events import Attachment
from .ids import is_hex32, new_id
from .store import Store

log = logging.getLogger("agent_bridge.attachments")

DAY = 86400.0


def kind_for(mime_type: str) -> str:
    major = mime_type.split("/", 1)[0]
    if major == "image":
        return "image"
    if major == "video":
        return "video"
    if major == "audio":
        return "voice" if "ogg" in mime_type or "opus" in mime_type else "audio"
    return "document"


INLINE_IMAGE_TYPES = {"image/png", "image/jpeg", "image/gif", "image/webp"}
ATTACHMENT_CSP = "default-src 'none'; sandbox"


# --- serving: one rule for every front end ----------------------------------------------------


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


def file_response(att: Attachment, path: str) -> web.FileResponse:
    """The download of what ``AttachmentStore.get`` found (the caller has authenticated)."""
    return web.FileResponse(path, headers=download_headers(att))


def attachment_fields(
    a: Attachment,
    *,
    stamp: Callable[[Optional[float]], object] = lambda t: t,
    with_conversation: bool = True,
    path_key: str = "download_path",
) -> dict:
    """An attachment as a JSON object, in one key order: ``stamp`` renders the two times
    (epoch seconds as they are, or ISO-8601), ``path_key`` names the download path."""
    out: dict = {
        "attachment_id": a.attachment_id,
        "filename": a.filename,
        "mime_type": a.mime_type,
        "size": a.size,
        "kind": a.kind,
        "inline_image": a.inline_image,
    }
    if with_conversation:
        out["conversation_id"] = a.conversation_id
    out["message_id"] = a.message_id
    out["created_at"] = stamp(a.created_at)
    out["expires_at"] = stamp(a.expires_at)
    out[path_key] = a.download_path
    return out


class AttachmentStore:
    def __init__(self, directory: str, store: Store, retention_days: float = 7.0):
        self.directory = os.path.realpath(directory)
        self.store = store
        self.retention_days = retention_days
        os.makedirs(self.directory, mode=0o700, exist_ok=True)

    def _path(self, attachment_id: str) -> str:
        return os.path.join(self.directory, attachment_id)

    async def add_bytes(
        self,
        data: bytes,
        *,
        filename: str,
        conversation_id: str,
        message_id: Optional[str],
        mime_type: Optional[str] = None,
    ) -> Attachment:
        attachment_id = new_id()
        tmp = self._path(attachment_id) + ".part"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self._path(attachment_id))
        return await self._register(attachment_id, filename, len(data), conversation_id, message_id, mime_type)

    async def add_file(
        self,
        path: str,
        *,
        conversation_id: str,
        message_id: Optional[str],
        filename: Optional[str] = None,
        mime_type: Optional[str] = None,
    ) -> Attachment:
        attachment_id = new_id()
        tmp = self._path(attachment_id) + ".part"
        shutil.copyfile(path, tmp)
        os.replace(tmp, self._path(attachment_id))
        size = os.path.getsize(self._path(attachment_id))
        name = filename or os.path.basename(path)
        return await self._register(attachment_id, name, size, conversation_id, message_id, mime_type)

    async def _register(
        self,
        attachment_id: str,
        filename: str,
        size: int,
        conversation_id: str,
        message_id: Optional[str],
        mime_type: Optional[str],
    ) -> Attachment:
        mime = mime_type or mimetypes.guess_type(filename)[0] or "application/octet-stream"
        created = time.time()
        expires = created + self.retention_days * DAY if self.retention_days > 0 else None
        att = Attachment(
            attachment_id=attachment_id,
            filename=os.path.basename(filename) or "file",
            mime_type=mime,
            size=size,
            kind=kind_for(mime),
            inline_image=mime in INLINE_IMAGE_TYPES,
            conversation_id=conversation_id,
            message_id=message_id,
            created_at=created,
            expires_at=expires,
        )
        await self.store.write(
            lambda c: c.execute(
                "INSERT INTO attachments(id, conversation_id, filename, mime_type, size, kind, inline_image,"
                " message_id, created_at, expires_at) VALUES(?,?,?,?,?,?,?,?,?,?)",
                (
                    att.attachment_id,
                    att.conversation_id,
                    att.filename,
                    att.mime_type,
                    att.size,
                    att.kind,
                    int(att.inline_image),
                    att.message_id,
                    att.created_at,
                    att.expires_at,
                ),
            )
        )
        return att

    def get(self, attachment_id: object, at: Optional[float] = None) -> Optional[tuple[Attachment, str]]:
        """The attachment and its file path, or None (unknown, expired, malformed)."""
        if not is_hex32(attachment_id):
            return None
        row = self.store.query_one(
            "SELECT id, conversation_id, filename, mime_type, size, kind, inline_image, message_id,"
            " created_at, expires_at FROM attachments WHERE id=?",
            (attachment_id,),
        )
        if row is None:
            return None
        att = _row_to_attachment(row)
        now = time.time() if at is None else at
        if att.expires_at is not None and att.expires_at <= now:
            return None
        path = self._path(att.attachment_id)
        # never follow a link planted in the data directory
        if os.path.islink(path) or not os.path.isfile(path):
            return None
        if os.path.dirname(os.path.realpath(path)) != self.directory:
            return None
        return att, path

    def load_all(self) -> list[Attachment]:
        rows = self.store.query(
            "SELECT id, conversation_id, filename, mime_type, size, kind, inline_image, message_id,"
            " created_at, expires_at FROM attachments ORDER BY created_at"
        )
        return [_row_to_attachment(r) for r in rows]

    async def cleanup(self, at: Optional[float] = None) -> int:
        now = time.time() if at is None else at
        rows = self.store.query(
            "SELECT id FROM attachments WHERE expires_at IS NOT NULL AND expires_at <= ?", (now,)
        )
        ids = [r[0] for r in rows]
        for attachment_id in ids:
            try:
                os.unlink(self._path(attachment_id))
            except FileNotFoundError:
                pass
            except OSError as exc:
                log.warning("could not delete expired attachment %s: %s", attachment_id, exc)
        if ids:
            await self.store.write(
                lambda c: c.executemany("DELETE FROM attachments WHERE id=?", [(i,) for i in ids])
            )
        return len(ids)


def _row_to_attachment(row: tuple) -> Attachment:
    return Attachment(
        attachment_id=row[0],
        conversation_id=row[1],
        filename=row[2],
        mime_type=row[3],
        size=row[4],
        kind=row[5],
        inline_image=bool(row[6]),
        message_id=row[7],
        created_at=row[8],
        expires_at=row[9],
    )
