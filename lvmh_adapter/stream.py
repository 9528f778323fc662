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

A change of the list itself (a session added, renamed, online or offline, removed)
sends a spec client the whole ``session_list``, as the spec says. A browser that
opened the socket with ``ext=list-deltas`` (the web UI; ``listing.py``) gets that one
entry instead, ``added``, ``changed`` or ``removed``, with the list's ``total``; a
change of every entry at once (the default model) sends it the first page again.
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
    __slots__ = ("ws", "outbox", "subscription", "id", "deltas")

    def __init__(self, ws: web.WebSocketResponse, outbox: Outbox, deltas: bool = False):
        self.ws = ws
        self.outbox = outbox
        self.subscription: Optional[str] = None
        self.id = next(_ids)
        self.deltas = deltas  # opened with ext=list-deltas: list changes as entries (module docstring)


def merge_change(before: Optional[str], change: str) -> str:
    """Two changes of one entry within a tick as one: an entry added then changed is still new to a browser."""
    if before == "added" and change == "changed":
        return "added"
    return change


class EventStream:
    def __init__(self, listing: Any, spawn_jobs: Callable[[], Optional[list]]):
        self.browsers: set[BrowserConn] = set()
        self.subs: dict[str, set[BrowserConn]] = {}
        self.last: dict[str, int] = {}  # sid -> seq of the last event pushed on the stream
        self._pending: dict[str, list] = {}  # sid -> [after, [(seq, raw), ...]]
        self._scheduled = False
        self._list_dirty = False  # every entry may have changed (no one session said)
        self._list_changes: dict[str, str] = {}  # sid -> added | changed | removed, since the last flush
        self._spawn_dirty = False
        self._entries_dirty: set[str] = set()  # sessions whose entry changed since the last flush
        self.listing = listing  # listing.Listing: entries, the full list, the first page
        self.list_version = 0  # bumped on every change; lets a reader cache the encoded list
        self.spawn_jobs = spawn_jobs
        # durable before shown: ``durable(sid, fn, a, b, c)`` runs ``fn(a, b, c)`` once what was queued for the
        # store so far committed (persistence.EventLog.later; set at prepare, relay.attach); None: at once
        self.durable: Optional[Callable[..., None]] = None
        self._show = self.show  # bound once: an event deferred makes no method object of its own

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
        """An event of ``sid`` (persisted kind or live ``message_update``) for its subscribers, once it
        is stored (durable before shown: a browser never sees an event a crash can take back, and its
        ``after=seq`` refetch and REST history agree with what it saw); in order, deltas included."""
        durable = self.durable
        if durable is None:
            self.show(sid, seq, raw)
        else:
            durable(sid, self._show, sid, seq, raw)

    def show(self, sid: str, seq: int, raw: str) -> None:
        """An event stored already (``push`` deferred, a plugin's event once its batch committed, a pi
        session's frame another node stored and relayed): shown at once."""
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

    def list_changed(self, sid: Optional[str] = None, change: str = "changed") -> None:
        """The list changed: ``sid``'s entry (``added``, ``changed``, ``removed``), or every entry (None)."""
        self.list_version += 1
        if sid is None:
            self._list_dirty = True
        else:
            self._list_changes[sid] = merge_change(self._list_changes.get(sid), change)
        self._schedule()

    def entry_changed(self, sid: str) -> None:
        """Activity in ``sid``: its entry goes to every browser (``session_entry``) at the end of the tick."""
        self.list_version += 1  # a browser connecting now gets the list with it
        self._entries_dirty.add(sid)
        if not self._scheduled:  # (once per event of every session: no call when a flush is scheduled)
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
        if self._list_dirty or self._list_changes:
            self._flush_list()
        elif self._entries_dirty:
            dirty, self._entries_dirty = self._entries_dirty, set()
            self._send_entries(dirty, tuple(self.browsers))
        if self._spawn_dirty:
            self._spawn_dirty = False
            jobs = self.spawn_jobs()
            if jobs is not None:
                self.broadcast(codec.spawn_status_frame(jobs), key="spawn_status")

    def _flush_list(self) -> None:
        refresh, changes, dirty = self._list_dirty, self._list_changes, self._entries_dirty
        self._list_dirty, self._list_changes, self._entries_dirty = False, {}, set()
        spec = [c for c in self.browsers if not c.deltas]
        deltas = [c for c in self.browsers if c.deltas]
        if spec:  # the whole list holds every entry that changed meanwhile
            frame = self.listing.spec_frame()
            for conn in spec:
                conn.outbox.put(frame, key="session_list")
        if not deltas:
            return
        if refresh:  # after what is queued (no key: an entry behind an older list must not win over it)
            frame = self.listing.page_frame()
            for conn in deltas:
                conn.outbox.put(frame)
            return
        total = self.listing.total()
        for sid, change in changes.items():
            entry = self.listing.view(sid) if change != "removed" else None
            if entry is None:
                change, entry = "removed", {"id": sid}
            frame = codec.session_entry_frame(change, entry, total=total)
            # an "added" is never replaced by a later "changed" of the same entry still queued (that one has no
            # total: the browser's count missed the new entry under load); a later change goes out after it
            key = ("session_entry", sid, "added") if change == "added" else ("session_entry", sid)
            for conn in deltas:
                conn.outbox.put(frame, key=key)
        self._send_entries(dirty - changes.keys(), deltas)

    def _send_entries(self, sids: Any, conns: Any) -> None:
        for sid in sids:
            entry = self.listing.view(sid)
            if entry is None:  # a session gone meanwhile: its removal says so
                continue
            frame = codec.session_entry_frame("changed", entry)
            for conn in conns:
                conn.outbox.put(frame, key=("session_entry", sid))

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
