"""The replay rows' journal: a file mapped into memory, written on the event loop before a frame is queued.

A Loomi frame may leave only once what a reconnecting device would need to
replay it is durable (docs/loomi.md, "Seq across restarts"). Committing
every event's rows in SQLite before its frame leaves costs a commit in the
store's writer thread and a wake of the event loop per event at an LLM's
pace. Instead each event's rows are copied into this file's shared mapping
on the loop: no system call, and durable against a crash of the process
from then on (the pages are the kernel's), as a commit is with SQLite's
``synchronous=NORMAL``. They reach SQLite in batches a few times a second,
behind no frame (``Store.submit(barrier=False)``). The file's blocks are
allocated when it is created (``posix_fallocate``), so a full disk is an
error there, never a fault in a later write.

Two files in the data directory: ``loomi-journal`` takes the records; once
past half its ``FILE_BYTES`` it becomes ``loomi-journal.old`` at a batch's
submission, and that file is deleted once the batch (which holds, with the
batches before it, every row of the old file) has committed. At start, the
registry applies both files' rows to SQLite (they are idempotent:
``INSERT OR REPLACE`` by key) before it reads the window, then deletes them.
A record the file has no room for (the old file still waits, or a huge
event) is committed before its frame leaves instead, as without a journal.

A record: ``crc32 (4 bytes) | length (4) | payload``, the payload written
before the header (a crash in between leaves a zero header: the end); the
payload is two counts, the event rows ``n (8) | body length (4) | body``,
then the segment rows ``device id length (2) | device id | from_n (8) |
offset (8)``. A zero length or a record cut short or garbled ends the
file's reading.
"""

from __future__ import annotations

import logging
import mmap
import os
import struct
import zlib
from typing import Optional

log = logging.getLogger("agent_bridge.loomi.journal")

NAME = "loomi-journal"
FILE_BYTES = 4 * 1024 * 1024

_HEAD = struct.Struct("<II")  # crc32, payload length
_COUNTS = struct.Struct("<II")  # events, segments
_EVENT = struct.Struct("<qI")  # n, body length
_ONE = struct.Struct("<IIqI")  # the counts and one event's row: the common record
_SEGMENT = struct.Struct("<qq")  # from_n, seq offset (after the device id and its length)


def payload_of(events: list[tuple[int, bytes]], segments: list[tuple[str, int, int]]) -> bytes:
    """A record's payload: the rows of ``Registry.record`` (events ``(n, body)``, segments ``(device, from_n, offset)``)."""
    if len(events) == 1 and not segments:
        n, body = events[0]
        return _ONE.pack(1, 0, n, len(body)) + body
    parts = [_COUNTS.pack(len(events), len(segments))]
    pack = _EVENT.pack
    for n, body in events:
        parts.append(pack(n, len(body)))
        parts.append(body)
    for did, from_n, off in segments:
        raw = did.encode()
        parts.append(struct.pack("<H", len(raw)))
        parts.append(raw)
        parts.append(_SEGMENT.pack(from_n, off))
    return b"".join(parts)


def encode(events: list[tuple[int, bytes]], segments: list[tuple[str, int, int]]) -> bytes:
    """One whole record."""
    payload = payload_of(events, segments)
    return _HEAD.pack(zlib.crc32(payload), len(payload)) + payload


def decode(data: bytes) -> tuple[list[tuple[int, bytes]], list[tuple[str, int, int]], int]:
    """Every whole record of a file's bytes: its event rows, segment rows, and the bytes they take."""
    events: list[tuple[int, bytes]] = []
    segments: list[tuple[str, int, int]] = []
    pos = 0
    end = len(data)
    while pos + _HEAD.size <= end:
        crc, size = _HEAD.unpack_from(data, pos)
        if size == 0:
            break  # the end of what was written (the rest of the file is zeros)
        start = pos + _HEAD.size
        payload = data[start:start + size]
        if len(payload) < size or zlib.crc32(payload) != crc:
            break  # cut short or garbled: nothing after it counts
        try:
            ne, ns = _COUNTS.unpack_from(payload, 0)
            p = _COUNTS.size
            for _ in range(ne):
                n, length = _EVENT.unpack_from(payload, p)
                p += _EVENT.size
                events.append((n, bytes(payload[p:p + length])))
                p += length
            for _ in range(ns):
                (length,) = struct.unpack_from("<H", payload, p)
                p += 2
                did = bytes(payload[p:p + length]).decode()
                p += length
                from_n, off = _SEGMENT.unpack_from(payload, p)
                p += _SEGMENT.size
                segments.append((did, from_n, off))
        except (struct.error, UnicodeDecodeError):
            break
        pos = start + size
    return events, segments, pos


class Journal:
    """The two files in ``directory``; ``append`` and ``rotate`` on the loop thread, ``drop_old`` from any."""

    def __init__(self, directory: str, size: int = FILE_BYTES):
        self.path = os.path.join(directory, NAME)
        self.old_path = self.path + ".old"
        self.file_bytes = size
        self._map: Optional[mmap.mmap] = None
        self.pos = 0  # where the next record goes
        self.old_pending = False  # the old file waits for its batch to commit
        self.broken = False  # the journal could not be set up: every row is committed before its frame

    def recover(self) -> tuple[list[tuple[int, bytes]], list[tuple[str, int, int]]]:
        """The rows both files hold (the old file's first), for the store before the window is read."""
        events: list[tuple[int, bytes]] = []
        segments: list[tuple[str, int, int]] = []
        for path in (self.old_path, self.path):
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except FileNotFoundError:
                continue
            e, s, used = decode(data)
            if any(data[used:used + _HEAD.size]):
                log.warning("%s: what follows the last whole record (%d bytes in) is ignored: cut short by a "
                            "crash or garbled", os.path.basename(path), used)
            events += e
            segments += s
        return events, segments

    def open(self) -> bool:
        """Start empty (after ``recover``'s rows were committed); False if the file cannot be set up."""
        self.remove()
        try:
            self._map = self._create(self.path)
        except OSError as exc:
            log.error("loomi journal %s: %s; replay rows are committed before their frames", self.path, exc)
            self.broken = True
            return False
        self.pos = 0
        self.broken = False
        return True

    def _create(self, path: str) -> mmap.mmap:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            try:
                os.posix_fallocate(fd, 0, self.file_bytes)  # blocks now: a full disk never faults a write later
            except OSError:
                os.unlink(path)
                raise
            return mmap.mmap(fd, self.file_bytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)

    def append(self, events: list[tuple[int, bytes]], segments: list[tuple[str, int, int]]) -> bool:
        """Copy one record into the file; False if it has no room (then the caller commits before sending)."""
        m = self._map
        if m is None:
            return False
        payload = payload_of(events, segments)
        pos = self.pos
        start = pos + 8
        end = start + len(payload)
        if end + 8 > self.file_bytes:  # room for the zero header that ends the file's reading, too
            return False
        m[start:end] = payload  # the payload first, then its header: a crash in between leaves a zero header
        m[pos:start] = _HEAD.pack(zlib.crc32(payload), len(payload))
        self.pos = end
        return True

    def rotate(self) -> bool:
        """At a batch's submission: start a new file if this one is half full and the old one is gone.
        True if it rotated (drop the old file once that batch has committed)."""
        if self._map is None or self.pos < self.file_bytes // 2 or self.old_pending:
            return False
        try:
            os.replace(self.path, self.old_path)
            new = self._create(self.path)
        except OSError as exc:  # the records go on into this file (the old one, if the rename was done)
            log.warning("loomi journal not rotated: %s", exc)
            return False
        self._map.close()
        self._map = new
        self.pos = 0
        self.old_pending = True
        return True

    def drop_old(self) -> None:
        try:
            os.unlink(self.old_path)
        except FileNotFoundError:
            pass
        self.old_pending = False

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None

    def remove(self) -> None:
        """Delete both files (their rows are committed)."""
        self.close()
        for path in (self.old_path, self.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        self.old_pending = False
