"""The browser side of lvmh (Transport 3): who is subscribed to what, and batched fan-out.

Events of a session are gathered during one event-loop tick and leave as one
``events`` frame per session (split past ``FRAME_EVENTS`` events), encoded
once and queued into the outbox of every subscribed browser. ``after`` is the
seq of the event this stream sent before the frame's first one, so a browser
can tell a gap (and refetch it over REST). ``session_list`` and
``spawn_status`` frames are coalesced: a newer list replaces an unsent older
one in a browser's outbox.

Activity in a session (an event that moves its ``lastEventAt``, its status, its
preview or its waiting decisions) sends every browser that one entry, not the
whole list: ``{"type": "session_entry", "change": "changed", "session": {...}}``,
at most one per session and tick, coalesced per session in each outbox
(docs/web-ui.md, "The live session list").
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable, Optional

from aiohttp import web

from bridge_core.kit.outbox import Outbox

from . import codec

FRAME_EVENTS = 500
FRAME_CHARS = 1024 * 1024

_ids = itertools.count(1)


class BrowserConn:
    __slots__ = ("ws", "outbox", "subscription", "id")

    def __init__(self, ws: web.WebSocketResponse, outbox: Outbox):
        self.ws = ws
        self.outbox = outbox
        self.subscription: Optional[str] = None
        self.id = next(_ids)


class EventStream:
    def __init__(self, session_list: Callable[[], list], spawn_jobs: Callable[[], Optional[list]],
                 session_entry: Callable[[str], Optional[dict]] = lambda sid: None):
        self.browsers: set[BrowserConn] = set()
        self.subs: dict[str, set[BrowserConn]] = {}
        self.last: dict[str, int] = {}  # sid -> seq of the last event pushed on the stream
        self._pending: dict[str, list] = {}  # sid -> [after, [(seq, raw), ...]]
        self._scheduled = False
        self._list_dirty = False
        self._spawn_dirty = False
        self._entries_dirty: set[str] = set()  # sessions whose entry changed since the last flush
        self._session_list = session_list
        self._session_entry = session_entry
        self.list_version = 0  # bumped on every change; lets a reader cache the encoded list
        self._spawn_jobs = spawn_jobs

    # --- subscriptions -------------------------------------------------------------------------

    def add(self, conn: BrowserConn) -> None:
        self.browsers.add(conn)

    def remove(self, conn: BrowserConn) -> None:
        self.browsers.discard(conn)
        self.unsubscribe(conn)

    def subscribe(self, conn: BrowserConn, sid: str) -> None:
        if conn.subscription == sid:
            return
        self.unsubscribe(conn)
        conn.subscription = sid
        self.subs.setdefault(sid, set()).add(conn)

    def unsubscribe(self, conn: BrowserConn, sid: Optional[str] = None) -> None:
        cur = conn.subscription
        if cur is None or (sid is not None and sid != cur):
            return
        conn.subscription = None
        subs = self.subs.get(cur)
        if subs is not None:
            subs.discard(conn)
            if not subs:
                del self.subs[cur]

    def subscribed(self, sid: str) -> bool:
        return sid in self.subs

    # --- fan-out ---------------------------------------------------------------------------------

    def push(self, sid: str, seq: int, raw: str) -> None:
        """An event of ``sid`` (persisted kind or live ``message_update``) for its subscribers."""
        before = self.last.get(sid, 0)
        self.last[sid] = seq
        if sid not in self.subs:
            return
        pend = self._pending.get(sid)
        if pend is None:
            self._pending[sid] = [before, [(seq, raw)]]
        else:
            pend[1].append((seq, raw))
        self._schedule()

    def forget(self, sid: str) -> None:
        self.last.pop(sid, None)
        self._pending.pop(sid, None)

    def list_changed(self) -> None:
        self.list_version += 1
        self._list_dirty = True
        self._schedule()

    def entry_changed(self, sid: str) -> None:
        """Activity in ``sid``: its entry goes to every browser (``session_entry``) at the end of the tick."""
        self.list_version += 1  # a browser connecting now gets the list with it
        self._entries_dirty.add(sid)
        self._schedule()

    def spawn_changed(self) -> None:
        self._spawn_dirty = True
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self._scheduled = False
        if self._pending:
            pending, self._pending = self._pending, {}
            for sid, (after, items) in pending.items():
                subs = self.subs.get(sid)
                if not subs:
                    continue
                frames = list(_frames(sid, after, items))
                for conn in tuple(subs):
                    for frame in frames:
                        if not conn.outbox.put(frame):
                            break
        if self._list_dirty:  # the whole list holds every entry that changed meanwhile
            self._list_dirty = False
            self._entries_dirty.clear()
            self.broadcast(codec.session_list_frame(self._session_list()), key="session_list")
        elif self._entries_dirty:
            dirty, self._entries_dirty = self._entries_dirty, set()
            for sid in dirty:
                entry = self._session_entry(sid)
                if entry is not None:  # a session gone meanwhile: the list that follows its removal says so
                    self.broadcast(codec.session_entry_frame("changed", entry), key=("session_entry", sid))
        if self._spawn_dirty:
            self._spawn_dirty = False
            jobs = self._spawn_jobs()
            if jobs is not None:
                self.broadcast(codec.spawn_status_frame(jobs), key="spawn_status")

    def broadcast(self, frame: Any, key: Optional[str] = None) -> None:
        for conn in tuple(self.browsers):
            conn.outbox.put(frame, key=key)


def _frames(sid: str, after: int, items: list):
    start = 0
    n = len(items)
    while start < n:
        end = start
        chars = 0
        while end < n and end - start < FRAME_EVENTS and (chars < FRAME_CHARS or end == start):
            chars += len(items[end][1])
            end += 1
        yield codec.events_frame(sid, after, (raw for _, raw in items[start:end]))
        after = items[end - 1][0]
        start = end
