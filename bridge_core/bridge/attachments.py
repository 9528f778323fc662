"""Attachment storage: copies under opaque 32-hex ids, served only by id.

Files the agent produces are copied into ``<data-dir>/attachments/<id>``;
the original is never touched. Copies expire after ``retention_days``
(0 = keep forever) and an hourly cleanup deletes them.

On a shared store (PostgreSQL, several nodes: docs/scale-out.md "Attachments") the copy
goes into the store instead, in ``CHUNK``-sized rows of ``attachment_bytes``, so every
node serves it, whichever node made it and whether that node is still alive. A file
over ``SHARED_MAX`` stays in the data dir of the node that made it (only that node
serves it). Chunks are written one transaction each (a large file never holds the
store's writer for long), the attachment's record last: a node that sees the record
finds every chunk. A download streams them one at a time (bounded memory).

Serving is one rule for every front end (docs/security.md): ``AttachmentStore.get``
finds a file (known id, not expired, a regular file directly in the attachments
directory, never a link: the bytes in the store or on disk) and the socket kit's
``file_response`` sends it (``bridge_core/kit/downloads.py``). ``attachment_fields``
(``bridge_core/model/wire.py``) is the attachment's JSON form the Pheby and Loomi frames
share.
"""

from __future__ import annotations

import logging
import mimetypes
import os
import shutil
import time
from typing import Any, Iterator, Optional, Union

import attrs

from ..model.events import Attachment
from ..model.ids import is_hex32, new_id
from .private import open_private, private_dir
from .store import BaseStore

log = logging.getLogger("agent_bridge.attachments")

DAY = 86400.0
CHUNK = 256 * 1024  # one row of attachment_bytes (and one read of a download from the store)
SHARED_MAX = 64 * 1024 * 1024  # larger files stay on the disk of the node that made them
ORPHAN_AGE = 3600.0  # chunks whose record never came (a crash mid-copy) are deleted after this long

# only on a shared store (the embedded default's schema is unchanged)
SHARED_MIGRATIONS = [
    """
    CREATE TABLE attachment_bytes(
        id TEXT NOT NULL,
        n INTEGER NOT NULL,
        data BLOB NOT NULL,
        written_at REAL NOT NULL,
        PRIMARY KEY(id, n)
    ) WITHOUT ROWID;
    """,
]


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
@attrs.frozen
class StoredBytes:
    """An attachment's bytes in the shared store: ``chunks`` rows of ``attachment_bytes``."""

    store: BaseStore
    attachment_id: str
    chunks: int

    def chunk(self, n: int) -> bytes:
        row = self.store.query_one("SELECT data FROM attachment_bytes WHERE id=? AND n=?", (self.attachment_id, n))
        if row is None:  # deleted under the download (it expired meanwhile): the response is cut short
            raise ConnectionResetError(f"attachment {self.attachment_id} is gone")
        return bytes(row[0])


Found = Union[str, StoredBytes]  # where an attachment's bytes are: its file's path, or in the shared store


class AttachmentStore:
    def __init__(self, directory: str, store: BaseStore, retention_days: float = 7.0):
        self.directory = os.path.realpath(directory)
        self.store = store
        self.retention_days = retention_days
        self.shared = store.shared  # the bytes in the store (every node serves them), not on this disk
        private_dir(self.directory, files=True)  # 0700, its files 0600, whatever an earlier run left

    async def start(self) -> None:
        if self.shared:
            await self.store.amigrate("attachment_bytes", SHARED_MIGRATIONS)

    def _path(self, attachment_id: str) -> str:
        return os.path.join(self.directory, attachment_id)

    def _in_store(self, attachment_id: str, size: int) -> bool:
        """Do these bytes go into the shared store (rather than this node's disk)?"""
        if not self.shared:
            return False
        if size > SHARED_MAX:
            log.warning("attachment %s is over %d bytes: kept on this node only", attachment_id, SHARED_MAX)
            return False
        return True

    async def _put_chunks(self, attachment_id: str, chunks: Iterator[bytes]) -> int:
        """The bytes into the shared store, one chunk per transaction (at least one, even empty); their size."""
        n = size = 0
        try:
            for data in chunks:
                row = (attachment_id, n, data, time.time())
                await self.store.write(lambda c, row=row: c.execute(
                    "INSERT INTO attachment_bytes(id, n, data, written_at) VALUES(?,?,?,?)", row))  # fmt: skip
                n += 1
                size += len(data)
        except BaseException:
            self.store.execute_later("DELETE FROM attachment_bytes WHERE id=?", (attachment_id,))
            raise
        return size

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
        if self._in_store(attachment_id, len(data)):
            view = memoryview(data)
            size = await self._put_chunks(attachment_id, (bytes(view[i:i + CHUNK])
                                                          for i in range(0, max(1, len(data)), CHUNK)))  # fmt: skip
            return await self._register(attachment_id, filename, size, conversation_id, message_id, mime_type)
        tmp = self._path(attachment_id) + ".part"
        with os.fdopen(open_private(tmp), "wb") as f:
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
        name = filename or os.path.basename(path)
        if self._in_store(attachment_id, os.path.getsize(path)):
            with open(path, "rb") as f:
                size = await self._put_chunks(attachment_id, _chunks_of(f))
            return await self._register(attachment_id, name, size, conversation_id, message_id, mime_type)
        tmp = self._path(attachment_id) + ".part"
        with open(path, "rb") as src, os.fdopen(open_private(tmp), "wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
        os.replace(tmp, self._path(attachment_id))
        size = os.path.getsize(self._path(attachment_id))
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

    def get(self, attachment_id: object, at: Optional[float] = None) -> Optional[tuple[Attachment, Found]]:
        """The attachment and where its bytes are (its file's path, or ``StoredBytes`` in the
        shared store), or None (unknown, expired, malformed, bytes missing)."""
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
        if self.shared:
            chunks, size = self.store.query_one(
                "SELECT COUNT(*), SUM(LENGTH(data)) FROM attachment_bytes WHERE id=?", (att.attachment_id,)
            ) or (0, None)
            if chunks and (size or 0) == att.size:
                return att, StoredBytes(self.store, att.attachment_id, int(chunks))
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
        if self.shared:
            await self.store.write(lambda c: _drop_bytes(c, ids, now - ORPHAN_AGE))
        return len(ids)


def _drop_bytes(c: Any, ids: list[str], orphaned_before: float) -> None:
    """The stored bytes of expired attachments, and of copies a crash cut short (no record, long ago)."""
    for attachment_id in ids:
        c.execute("DELETE FROM attachment_bytes WHERE id=?", (attachment_id,))
    c.execute("DELETE FROM attachment_bytes WHERE written_at < ? AND id NOT IN (SELECT id FROM attachments)",
              (orphaned_before,))  # fmt: skip


def _chunks_of(f: Any) -> Iterator[bytes]:
    """A file's bytes in ``CHUNK``s; one empty chunk for an empty file (a stored copy has one at least)."""
    data = f.read(CHUNK)
    yield data
    while data:
        data = f.read(CHUNK)
        if data:
            yield data


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
