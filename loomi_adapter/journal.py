"""The replay rows' journal: a file mapped into memory, written on the event loop before a frame is queued.

A Loomi frame may leave only once what a reconnecting device would need to
replay it is durable (docs/loomi.md, "Seq across restarts"). Committing
every event's rows in SQLite before its frame leaves costs a commit in the
store's writer thread and a wake of the event loop per event at an LLM's
pace. Instead each event's rows are copied into this file's shared mapping
on the loop: no system call, and durable against a crash of the process
from then on (the pages are the kernel's), as a commit is with SQLite's
``synchronous=NORMAL``. They reach SQLite when the file is half full and
the next one takes over (and at shutdown), in one batch behind no frame
(``Store.submit(barrier=False)``), and only the newest window + 1 events'
rows of it: what a restart reads back (``Registry._store_rows``). The file's blocks are
allocated when it is created (``posix_fallocate``), so a full disk is an
error there, never a fault in a later write.

Numbered files in the data directory, ``loomi-journal.<k>``: one takes the
records; once it is half full, the next one (prepared ahead in a thread of
its own: created, allocated and every page written once, so no write on the
loop faults a page in) takes over at the batch's submission, and the full one
is deleted once that batch (which holds, with the batches before it, every
row of the file still inside a replay window) has committed. At start, the registry applies every file's
rows to SQLite, oldest first (they are idempotent: ``INSERT OR REPLACE`` by
key), before it reads the window, then deletes them. A record the file has
no room for (the next file is not ready, or a huge event) is committed
before its frame leaves instead, as without a journal.

What the rows hold of a run also completes it after a crash (``stored_run_text``, offered to the
core as a ``DurableText``: bridge_core/bridge/drafts.py): a phone may have got its deltas up to the
crash, a second past the draft the core last saved, and replays them from these rows; the
interrupted message is completed with their text, so the transcript and the phone's closing
``run.completed`` hold what its deltas make (docs/loomi.md, "Seq across restarts"). The rows a move to the
next file keeps may no longer reach back to the draft: the drafts are saved just before each move, so a
restart takes the deltas from the oldest file's first event on (``Journal.drafts_from``, ``text_from``).

A record: ``crc32 (4 bytes) | length (4) | payload``, the payload written
before the header (a crash in between leaves a zero header: the end); the
payload is two counts, the event rows ``n (8) | body length (4) | body``,
then the segment rows ``device id length (2) | device id | from_n (8) |
offset (8)``. A zero length or a record cut short or garbled ends the
file's reading.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import errno
import glob
import logging
import mmap
import os
import struct
import time
import zlib
from typing import Any, Iterable, Iterator, Optional, Union

import orjson

from bridge_core.bridge.drafts import NOTICE_TITLE, RunEnd
from bridge_core.model import events as ev
from bridge_core.model.errors import BridgeError
from bridge_core.model.ids import draft_message_id
from bridge_core.bridge.private import open_private

log = logging.getLogger("agent_bridge.loomi.journal")

NAME = "loomi-journal"
RETRY_EVERY = 1.0  # seconds between two attempts at creating the next file after one failed
FILE_BYTES = 4 * 1024 * 1024
KEEP_FREE = 4  # a file is made only if that leaves this many times its size free (_check_room)
HALF = 2  # what append returns once the file is half full (truthy, not True): then ask ``due``

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


def head_of(payload: bytes) -> bytes:
    """A record's header: its payload's crc32 and length."""
    return _HEAD.pack(zlib.crc32(payload), len(payload))


def encode(events: list[tuple[int, bytes]], segments: list[tuple[str, int, int]]) -> bytes:
    """One whole record."""
    payload = payload_of(events, segments)
    return head_of(payload) + payload


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
    """The files in ``directory``; ``append`` and ``rotate`` on the loop thread, ``drop`` from any thread."""

    def __init__(self, directory: str, size: int = FILE_BYTES):
        self.prefix = os.path.join(directory, NAME)
        self.file_bytes = size
        self._map: Optional[mmap.mmap] = None
        self.number = 0  # the file taking records
        self.path = ""
        self.pos = 0  # where the next record goes
        self.broken = False  # the journal could not be set up: every row is committed before its frame
        self._spare: Optional[concurrent.futures.Future] = None  # the next file, being prepared
        self._worker: Optional[concurrent.futures.ThreadPoolExecutor] = None  # prepares it
        self._spare_failed = False
        self._retry_at = 0.0  # a next file that could not be created is tried again from then (monotonic)
        # after ``recover``: the first event of the oldest file when a move to it started it (numbered 2 or
        # more: the drafts were saved just before, ``Registry._submit_rows``, and committed, as the file
        # before it is gone), so the saved drafts hold every delta before it and the files every event from
        # it (``stored_run_text``); None otherwise
        self.drafts_from: Optional[int] = None

    def _name(self, number: int) -> str:
        return f"{self.prefix}.{number}"

    def files(self) -> list[tuple[int, str]]:
        """The journal's files, oldest first."""
        out = []
        for path in glob.glob(glob.escape(self.prefix) + ".*"):
            tail = path[len(self.prefix) + 1:]
            if tail.isdigit():
                out.append((int(tail), path))
        return sorted(out)

    def recover(self) -> tuple[list[tuple[int, bytes]], list[tuple[str, int, int]]]:
        """The rows every file holds (the oldest first), for the store before the window is read; sets
        ``drafts_from`` where the oldest file was started by a move (see there)."""
        events: list[tuple[int, bytes]] = []
        segments: list[tuple[str, int, int]] = []
        files = self.files()
        self.drafts_from = None
        for number, path in files:
            with open(path, "rb") as f:
                data = f.read()
            e, s, used = decode(data)
            if any(data[used:used + _HEAD.size]):
                log.warning("%s: what follows the last whole record (%d bytes in) is ignored: cut short by a "
                            "crash or garbled", os.path.basename(path), used)
            if number == files[0][0] and number > 1 and e:
                self.drafts_from = e[0][0]
            events += e
            segments += s
        return events, segments

    def open(self) -> bool:
        """Start empty (after ``recover``'s rows were committed); False if the file cannot be set up."""
        self.remove()
        try:
            self._map = _create(self._name(1), self.file_bytes)
        except OSError as exc:
            log.error("loomi journal %s: %s; replay rows are committed before their frames", self._name(1), exc)
            self.broken = True
            return False
        self.number = 1
        self.path = self._name(1)
        self.pos = 0
        self.broken = False
        self._prepare_next()
        return True

    def _prepare_next(self, retired: Optional[mmap.mmap] = None) -> None:
        """Create, allocate and fault in the next file on the journal's own thread (a file's pages cost the
        disk's time), which first unmaps the file the loop just left (``retired``). The move to the next
        file took the loop 2-4 ms at a hundred streaming runs while it unmapped the full file and started a
        thread per file (``Thread.start`` waits for the new thread, which must get the GIL from the busy
        loop); handed to one lasting thread, 0.1-0.3 ms."""
        if self._worker is None:
            self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agent-bridge-loomi-journal")
        self._spare = self._worker.submit(_next_file, self._name(self.number + 1), self.file_bytes, retired)

    def append(self, events: list[tuple[int, bytes]], segments: list[tuple[str, int, int]]) -> Union[bool, int]:
        """Copy one record into the file; False if it has no room (then the caller commits before sending),
        else True, or ``HALF`` once the file is half full (then ``due`` tells whether to move on)."""
        m = self._map
        if m is None:
            return False
        if len(events) == 1 and not segments:  # the common record, once per event: payload_of's first case
            n, body = events[0]
            payload = _ONE.pack(1, 0, n, len(body)) + body
        else:
            payload = payload_of(events, segments)
        pos = self.pos
        start = pos + _HEAD.size
        end = start + len(payload)
        if end + _HEAD.size > self.file_bytes:  # room for the zero header that ends the file's reading, too
            return False
        m[start:end] = payload  # the payload first, then its header: a crash in between leaves a zero header
        _HEAD.pack_into(m, pos, zlib.crc32(payload), len(payload))  # head_of, inlined (no header object between)
        self.pos = end
        return True if end < self.file_bytes // 2 else HALF  # due()'s first test, without its call per record

    def due(self) -> bool:
        """Is this file half full with the next one ready (``rotate`` would move)? Per record: cheap until half."""
        if self.pos < self.file_bytes // 2 or self._map is None:
            return False
        spare = self._spare
        if spare is None or not spare.done():
            return False
        # one whose creation failed (a full disk) is tried again at most every RETRY_EVERY, not at every record
        return spare.exception() is None or time.monotonic() >= self._retry_at

    def rotate(self) -> Optional[str]:
        """At a batch's submission: move to the next file if this one is half full and the next is ready.
        The full file's path (delete it with ``drop`` once that batch has committed), or None."""
        if not self.due():
            return None
        spare = self._spare
        self._spare = None
        try:
            new = spare.result()
        except OSError as exc:  # a full disk: the records go on into this file while it has room, then to the store
            (log.debug if self._spare_failed else log.warning)("loomi journal: next file not created: %s", exc)
            self._spare_failed = True  # said once: a disk that stays full would repeat it every batch
            self._retry_at = time.monotonic() + RETRY_EVERY
            self._prepare_next()
            return None
        old, self.path = self.path, self._name(self.number + 1)
        retired, self._map = self._map, new
        self.number += 1
        self.pos = 0
        self._prepare_next(retired)
        return old

    @staticmethod
    def drop(path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None
        spare, self._spare = self._spare, None
        if spare is not None and spare.exception() is None:
            spare.result().close()

    def remove(self) -> None:
        """Delete every file (their rows are committed)."""
        self.close()
        for _, path in self.files():
            self.drop(path)


def _check_room(directory: str, size: int) -> None:
    """OSError(ENOSPC) if a file of ``size`` bytes would leave the file system less than ``KEEP_FREE`` times
    that free: the database beside it comes first (on a small disk the rows are committed before their
    frames, as without a journal)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return  # not known here: fallocate still refuses a full disk
    free = st.f_bavail * st.f_frsize
    if free - size < KEEP_FREE * size:
        raise OSError(errno.ENOSPC, f"{free // 1024} KiB free: a journal file of {size // 1024} KiB would leave "
                                    f"less than {KEEP_FREE * size // 1024} KiB for the database")


def _next_file(path: str, size: int, retired: Optional[mmap.mmap]) -> mmap.mmap:
    """The journal thread's task: unmap the file the loop left, then create the next."""
    if retired is not None:
        retired.close()
    return _create(path, size)


def _create(path: str, size: int) -> mmap.mmap:
    """A file of ``size`` bytes, its blocks allocated (a full disk fails here, never a write later) and
    every page written once (a write to it faults no page in while the kernel keeps it dirty), mapped."""
    _check_room(os.path.dirname(path) or ".", size)
    fd = open_private(path, os.O_RDWR | os.O_TRUNC)  # event bodies: owner-only whatever the umask
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError:
            os.unlink(path)
            raise
        m = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    for i in range(0, size, mmap.PAGESIZE):
        m[i] = 0
    return m


def run_text(tails: Iterable[bytes], run_id: str) -> Optional[str]:
    """The text of ``run_id``'s message as frame bodies (without their ``{``, in order) hold it: its
    ``run.delta`` texts of kind text, joined; None unless its ``run.started`` is among them (older rows
    pruned: what they hold is not all of it) or it holds no delta."""
    needle = b'"run_id":' + orjson.dumps(run_id)
    parts: Optional[list[str]] = None
    for tail in tails:
        if needle not in tail:
            continue
        try:
            frame = orjson.loads(b"{" + tail)
        except orjson.JSONDecodeError:
            continue
        if frame.get("run_id") != run_id:
            continue
        kind = frame.get("type")
        if kind == "run.started":
            parts = []
        elif kind == "run.delta" and parts is not None:
            payload = frame.get("payload") or {}
            if payload.get("kind", "text") == "text" and isinstance(payload.get("text"), str):
                parts.append(payload["text"])
    return "".join(parts) if parts else None


def stored_run_text(store: Any, run_id: str, drafts_from: Optional[int] = None,
                    exact: Optional[tuple[str, str]] = None) -> Optional[str]:
    """``run_text`` over the replay rows in the store (``Bridge.add_durable_text``): one node's events
    (the journal's rows were committed at start, before the interrupted runs are closed), and with
    several nodes each source's frames, every frame committed before it left. Where the rows no longer
    hold the run's start (a run longer than what they keep), the run's saved draft and the deltas the rows
    hold past it (``text_after``), or, where they no longer hold the draft's own delta either, past the
    journal's ``drafts_from`` (``text_from``). The longest.

    ``exact`` (a message id and its completed text): only the text the rows show went out to the phones
    (runtexts.py, a node completing a message whose deltas it never rendered): past a source's mark of the
    message (``loomi_marks``: the text up to the delta of its time, as long as it says) where its rows hold
    that delta, or alone where they hold no delta of the run from its time on (pruned past it: runtexts.py
    ``marks``; chaos seed 3310), or the draft where they hold the draft's own delta, never past them (an
    origin killed holding its last deltas saved them in its draft, and no phone got them)."""
    where, args = ("", ()) if exact is None else run_filter(store, run_id)  # on the loop: only the run's rows
    events = [(n, bytes(b)) for n, b in store.query(f"SELECT n, body FROM loomi_events{where} ORDER BY n", args)]
    by_source = frames_by_source(store, where, args)
    marks = {} if exact is None else {s: (upto, float(ts)) for s, upto, ts in store.query(
        "SELECT source, upto, ts FROM loomi_marks WHERE message_id=? AND run_id=?", (exact[0], run_id))}
    for source in marks:  # (its rows pruned past the run: its mark alone)
        by_source.setdefault(source, [])
    rows, sources = [[b for _, b in events], *by_source.values()], [None, *by_source]
    draft = store.query_one("SELECT text, ts FROM messages WHERE message_id=?", (draft_message_id(run_id),))
    texts = []
    for k, tails in enumerate(rows):
        text = run_text(tails, run_id)
        if text is None and sources[k] in marks and exact is not None:
            upto, ts = marks[sources[k]]
            rest = text_after(tails, run_id, ts, True)
            later = [f for f, _ in _run_frames(tails, run_id, "run.delta") if float(f.get("ts") or 0) >= ts]
            rest = "" if rest is None and not later else rest  # (its rows pruned past the mark, of its last delta)
            text = None if rest is None or upto > len(exact[1]) else exact[1][:upto] + rest
        if text is None and draft is not None and draft[1] is not None:
            rest = text_after(tails, run_id, float(draft[1]), exact is not None)
            if rest is None and k == 0 and drafts_from is not None and exact is None:
                rest = text_from(events, run_id, drafts_from, float(draft[1]))
            text = None if rest is None else draft[0] + rest
        texts.append(text)
    return max((t for t in texts if t), key=len, default=None)


def sent_text(store: Any, e: ev.MessageCompleted) -> Optional[str]:
    """What went out of ``e``'s message (runtexts.py ``sent``); None if the store fails: no filler, not no end."""
    try:
        return stored_run_text(store, e.run_id, exact=(e.message_id, e.text))
    except (BridgeError, *store.errors) as exc:
        log.warning("no filler for run %s: the store failed: %s", e.run_id, type(exc).__name__)
        return None


def run_filter(store: Any, run_id: str) -> tuple[str, tuple]:
    """A WHERE of the bodies that hold ``run_id``'s needle (``run_text``'s), and its parameter: SQLite's
    ``instr`` (its LIKE matches no BLOB), PostgreSQL's ``position`` (the shared store's engine)."""
    op = "position(? IN body) > 0" if getattr(store, "shared", False) else "instr(body, ?) > 0"
    return " WHERE " + op, (b'"run_id":' + orjson.dumps(run_id),)


def frames_by_source(store: Any, where: str = "", args: tuple = ()) -> dict[str, list[bytes]]:
    """With several nodes, each source's stored frame bodies (``loomi_frames``, ``where``), in its order."""
    out: dict[str, list[bytes]] = {}
    for source, body in store.query(f"SELECT source, body FROM loomi_frames{where} ORDER BY source, m", args):
        out.setdefault(source, []).append(bytes(body))
    return out


def text_from(events: list[tuple[int, bytes]], run_id: str, start: int, ts: float) -> Optional[str]:
    """The text of ``run_id``'s deltas among one node's rows ``(n, body)`` from event ``start`` on, where the
    saved draft holds every delta of the run before ``start`` (``Journal.drafts_from``: saved as the journal moved
    to the file that starts there) and ends with a delta no later (``ts``); None unless the rows hold every
    event from ``start`` on and the first one is from ``ts`` or after."""
    tail = [(n, b) for n, b in events if n >= start]
    if not tail or tail[0][0] != start or tail[-1][0] - start + 1 != len(tail):
        return None
    try:
        first = float(orjson.loads(b"{" + tail[0][1]).get("ts") or 0)
    except orjson.JSONDecodeError:
        return None
    if first < ts:
        return None  # the draft goes past the boundary: its own delta should be here (text_after)
    parts = [payload["text"] for _, payload in _run_frames((b for _, b in tail), run_id, "run.delta")
             if payload.get("kind", "text") == "text" and isinstance(payload.get("text"), str)]
    return "".join(parts)


def _run_frames(tails: Iterable[bytes], run_id: str, type_: str) -> Iterator[tuple[dict, dict]]:
    """``(frame, payload)`` of each ``type_`` frame of ``run_id`` in frame bodies (no ``{``; one not parsing: none)."""
    needle, kind = b'"run_id":' + orjson.dumps(run_id), b'"' + type_.encode() + b'"'
    for tail in tails:
        if needle not in tail or kind not in tail:
            continue
        try:
            frame = orjson.loads(b"{" + tail)
        except orjson.JSONDecodeError:
            continue
        if frame.get("type") == type_ and frame.get("run_id") == run_id:
            yield frame, frame.get("payload") or {}


def text_after(tails: Iterable[bytes], run_id: str, ts: float, exact: bool = False) -> Optional[str]:
    """The text of ``run_id``'s deltas after the one of time ``ts`` (its draft's: ``DraftSaver`` saves a
    message's text as of its newest delta, with that delta's time, which its frame carries too), as frame
    bodies (without their ``{``, in order) hold them; None unless they hold a delta of the run from ``ts`` or
    before (then every one after it is there: rows are pruned oldest first). ``exact``: None unless they hold
    the draft's own delta, one of time ``ts`` (the draft does not go past them, and no other delta of that
    time leaves it unsure which)."""
    parts: Optional[list[str]] = None
    at = 0  # the deltas of time ``ts``
    for frame, payload in _run_frames(tails, run_id, "run.delta"):
        if payload.get("kind", "text") != "text":
            continue
        t = float(frame.get("ts") or 0)
        if t <= ts:
            parts = []  # up to the draft: what follows goes on from it
            at += t == ts
        elif parts is not None and isinstance(payload.get("text"), str):
            parts.append(payload["text"])
    if parts is None or (exact and at != 1):
        return None
    return "".join(parts)


def run_end(tails: Iterable[bytes], run_id: str) -> Optional[RunEnd]:
    """The end of ``run_id`` as frame bodies (without their ``{``, in order) hold it: its last
    ``run.completed`` (its status, error and text), or None. An interrupted end (``Bridge.interrupt``) with its
    notice (text, time): the first ``notification`` of the run's task after it titled ``NOTICE_TITLE`` (a
    notification frame names no run and no message: ``Bridge.restore_end`` writes it under the run's notice id)."""
    needle, title = b'"run_id":' + orjson.dumps(run_id), orjson.dumps(NOTICE_TITLE)
    end: Optional[RunEnd] = None
    task, notice = None, None
    for tail in tails:
        if needle in tail and b'"run.completed"' in tail:
            frame = _frame(tail)
            payload = frame.get("payload") or {}
            if frame.get("type") == "run.completed" and frame.get("run_id") == run_id and "status" in payload:
                ts = float(frame.get("ts") or 0)
                end = RunEnd(str(payload["status"]), payload.get("error"), payload.get("text") or "", ts)
                task, notice = frame.get("task_id"), None
        elif end is not None and notice is None and end.error == ev.RUN_INTERRUPTED and title in tail:
            frame = _frame(tail)
            payload = frame.get("payload") or {}
            if (frame.get("type") == "notification" and frame.get("task_id") == task
                    and payload.get("title") == NOTICE_TITLE and isinstance(payload.get("text"), str)):
                notice = (payload["text"], float(frame.get("ts") or 0))
    return None if end is None else end._replace(notice=notice)


def _frame(tail: bytes) -> dict:
    """A frame body (without its ``{``) parsed; {} where it does not parse."""
    try:
        frame = orjson.loads(b"{" + tail)
    except orjson.JSONDecodeError:
        return {}
    return frame if isinstance(frame, dict) else {}


def stored_run_end(store: Any, run_id: str) -> Optional[RunEnd]:
    """``run_end`` over the replay rows in the store (``Bridge.add_durable_end``): one node's events (committed at
    start, before the bridge loads the runs it left open), and each source's frames. A phone may have got this
    end though the core's store had not committed it when its node died, the stream losing it too (chaos seed
    2103, the run closed again). The first end any of them holds (a later one is a second close), with the
    interrupt notice that record holds after it (``run_end``)."""
    ends = [run_end((bytes(b) for (b,) in store.query("SELECT body FROM loomi_events ORDER BY n")), run_id)]
    ends += [run_end(tails, run_id) for tails in frames_by_source(store).values()]
    return min((e for e in ends if e is not None), key=lambda e: e.ts, default=None)


# the frames that stand for a row of the core's store (``row_events``), found in a body before it is parsed
_ROW_FRAMES = (b'"task.created"', b'"task.deleted"', b'"session.message"', b'"run.started"', b'"run.completed"',
               b'"approval.resolved"', b'"clarify.resolved"')


def row_events(tails: Iterable[bytes]) -> list[Any]:
    """The core's events behind the store's rows as frame bodies (without their ``{``, in order) hold them:
    a task's creation and deletion, a user's message, a run's start, and its message as its ``run.completed``
    holds it (a ``MessageCompleted`` where the end came: bridge_core/bridge/drafts.py ``DurableRows``), a
    decision's resolution."""
    out: list[Any] = []
    for tail in tails:
        if not any(kind in tail for kind in _ROW_FRAMES):
            continue
        try:
            frame = orjson.loads(b"{" + tail)
        except orjson.JSONDecodeError:
            continue
        e = _row_event(frame)
        if e is not None:
            out.append(e)
    return out


def _row_event(frame: dict) -> Any:
    kind, cid, run = frame.get("type"), frame.get("task_id"), frame.get("run_id")
    payload = frame.get("payload") or {}
    ts = float(frame.get("ts") or 0)
    if not isinstance(cid, str):
        return None
    if kind == "task.created":
        task = payload.get("task") or {}
        return ev.ConversationCreated(conversation_id=cid, name=str(task.get("title") or "New chat"),
                                      source=str(task.get("source") or "demo"), ts=float(task.get("created_at") or ts))
    if kind == "task.deleted":
        return ev.ConversationDeleted(conversation_id=cid, ts=ts)
    if kind == "session.message" and payload.get("role") == "user" and isinstance(payload.get("message_id"), str):
        return ev.UserMessageSent(conversation_id=cid, message_id=payload["message_id"],
                                  text=str(payload.get("text") or ""), run_id=run, ts=ts)
    if not isinstance(run, str):
        return None
    if kind == "run.started":
        return ev.RunStarted(conversation_id=cid, run_id=run, message_id=draft_message_id(run),
                             ts=float(payload.get("started_at") or ts))
    if kind == "run.completed" and "status" in payload:
        return ev.MessageCompleted(conversation_id=cid, message_id=draft_message_id(run),
                                   text=str(payload.get("text") or ""), run_id=run, ts=ts)
    return _resolution(kind, cid, run, payload, ts)


def _resolution(kind: str, cid: str, run: str, payload: dict, ts: float) -> Any:
    """A decision's resolution as its frame holds it (what a restart must not resolve again: its pending row
    dropped, ``Persister.restore_rows``), or None."""
    if kind == "approval.resolved" and isinstance(payload.get("approval_id"), str):
        return ev.ApprovalResolved(conversation_id=cid, run_id=run, approval_id=payload["approval_id"],
                                   choice=str(payload.get("choice") or ""), ts=ts)
    if kind == "clarify.resolved" and isinstance(payload.get("clarify_id"), str):
        return ev.ClarifyResolved(conversation_id=cid, run_id=run, clarify_id=payload["clarify_id"],
                                  response=str(payload.get("response") or ""), ts=ts)
    return None


def stored_rows(store: Any) -> list[Any]:
    """``row_events`` over one node's replay rows in the store (``Bridge.add_durable_rows``): the journal's rows
    were committed at start, before the bridge loads the store. A kill -9 can leave them holding a whole
    exchange the core's writer never committed (the journal is durable at once, the core's rows a batch
    later); a phone replays it, so the start writes it back (docs/loomi.md, "Seq and the window across restarts")."""
    return row_events(bytes(b) for (b,) in store.query("SELECT body FROM loomi_events ORDER BY n"))
