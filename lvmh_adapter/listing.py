"""The session list: every session's entry, the spec's full list, and the list in pages (docs/lvmh.md).

The spec's ``GET /api/sessions`` and ``session_list`` frame carry every session. With thousands of
conversations that is hundreds of kilobytes per answer, and the web UI shows a screenful. So:

``GET /api/sessions?limit=N&cursor=C&q=text`` (any of the three makes it a page)
    ``{"sessions": [...], "total": T, "next": C'|null}``: the sessions in the web UI's order
    (online first, then the latest activity, then the id), ``q`` kept to those whose name, repo,
    working directory or id contains it (case-insensitive); ``next`` continues after the last one.
``GET /api/sessions/:id``
    one session's entry.
A browser socket opened with ``ext=list-deltas`` (stream.py) gets the first page as its first
``session_list`` (with ``total``, ``next`` and ``attention``: the sessions beyond the page where a
decision waits) and then one ``session_entry`` per change instead of the whole list.

Ordering and search use what each session already holds in memory (its record, its conversation);
the entries themselves (``view``: the spec's fields and ``activity.fields``) are built only for the
page answered.

The whole list (a spec client's ``session_list``, ``GET /api/sessions`` without a page) is built one
entry at a time into runs of encoded entries (``encoded``), never a dict per session at once; the
socket's frame is one join of them, shared by every spec client for at most a second and then let
go; the REST answer is written run by run. Both are the bytes one ``orjson.dumps`` of every entry
would give (tests/lvmh/test_whole_list.py).
"""

from __future__ import annotations

import asyncio
import bisect
import re
from typing import TYPE_CHECKING, Any, Optional

from bridge_core.model.errors import BadRequest

from . import activity, codec, heap
from .book import SOURCE_NAME

if TYPE_CHECKING:
    from .book import SessionBook


PAGE_DEFAULT = 50
CACHE_SECONDS = 1.0  # an encoded first frame serves every browser this long at most (lastEventAt moves)
TRIM_AFTER_SECONDS = 1.5  # a whole list built: the heap trimmed this much later (its copies let go by then)
PAGE_MAX = 200
MAX_QUERY = 200  # characters of ``q``
EXT_LIST_DELTAS = "list-deltas"  # the /ws extension: a first page, then one entry per change
_CURSOR = re.compile(r"^([01]):(-?[0-9]{1,18}):(.{1,200})$", re.S)


def matches(fields: tuple, needle: str) -> bool:
    """Whether one of a session's name, repo, cwd or id contains ``needle`` (already case-folded)."""
    return any(isinstance(v, str) and needle in v.casefold() for v in fields)


def needle_of(q: str) -> str:
    if len(q) > MAX_QUERY:
        raise BadRequest(f"q longer than {MAX_QUERY} characters")
    return q.strip().casefold()


def encode_cursor(key: tuple) -> str:
    return f"{key[0]}:{-key[1]}:{key[2]}"


def decode_cursor(text: str) -> tuple:
    m = _CURSOR.match(text)
    if m is None:
        raise BadRequest("cursor is not one this daemon gave")
    return int(m.group(1)), -int(m.group(2)), m.group(3)


def wants_page(query: Any) -> bool:
    return any(query.get(k) is not None for k in ("limit", "cursor", "q"))


class Listing:
    """Entries of the sessions the front end lists: pi plugin sessions and the bridge's own conversations."""

    def __init__(self, book: "SessionBook"):
        self.book = book
        self._full_cache: Optional[tuple[int, float, bytes]] = None
        self._page_cache: Optional[tuple[int, float, bytes]] = None
        self._keys_cache: Optional[tuple[tuple, list]] = None
        self._trim_handle: Optional[asyncio.TimerHandle] = None

    # --- one session ---------------------------------------------------------------------------

    def _state(self, sid: str) -> Optional[tuple]:
        """``(record, conversation, online, lastEventAt, startedAt)`` of a listed session, None otherwise."""
        fe = self.book
        rec = fe.records.get(sid)
        conv = fe.bridge.conversations.get(sid)
        if rec is not None and rec.source == "plugin":
            return rec, conv, fe.link.is_online(rec), rec.last_event_at, rec.info.get("startedAt")
        if conv is None or conv.source == SOURCE_NAME:
            return None
        try:
            online = bool(fe.bridge.source_for(conv).is_online(conv))
        except Exception:
            online = False
        return rec, conv, online, rec.last_event_at if rec is not None else None, int(conv.created_at * 1000)

    def view(self, sid: str) -> Optional[dict]:
        """A session's entry: the spec's fields, then what it is doing (``activity.fields``)."""
        state = self._state(sid)
        if state is None:
            return None
        rec, conv, online, last_event_at, _ = state
        out = dict(rec.info) if rec is not None and rec.source == "plugin" else self.book.bridge_info(sid)
        out["online"] = online
        out["lastEventAt"] = last_event_at
        if conv is not None:
            out.update(activity.fields(conv, self.book.bridge.source_for(conv)))
        return out

    def _fields(self, sid: str, rec: Any, conv: Any) -> tuple:
        if rec is not None and rec.source == "plugin":
            info = rec.info
            return info.get("name"), info.get("repo"), info.get("cwd"), sid
        return conv.name, None, "", sid

    # --- every session -------------------------------------------------------------------------

    def ids(self) -> list[str]:
        fe = self.book
        out = [sid for sid, r in fe.records.items() if r.source == "plugin"]
        seen = set(out)
        out += [cid for cid, c in fe.bridge.conversations.items() if c.source != SOURCE_NAME and cid not in seen]
        return out

    def spec_order(self, needle: str = "") -> list[str]:
        """The listed sessions' ids in the spec list's order: the latest ``lastEventAt`` (else ``startedAt``) first,
        ties as ``ids()`` gives them; ``needle`` keeps those whose name, repo, cwd or id contains it."""
        rows = []
        for sid in self.ids():
            state = self._state(sid)
            if state is None:
                continue
            rec, conv, _, last, started = state
            if needle and not matches(self._fields(sid, rec, conv), needle):
                continue
            rows.append((last or started or 0, sid))
        rows.sort(key=lambda row: row[0], reverse=True)
        return [sid for _, sid in rows]

    def encoded(self, needle: str = "") -> list[bytes]:
        """The spec's list encoded (``codec.entry_runs``), one entry's dict alive at a time: building the whole
        frame peaks at about twice its size (traced, 2,000 sessions), where every dict at once and one
        ``orjson.dumps`` of them peaked at 3.9 times."""
        self._trim_later()
        return codec.entry_runs(v for v in (self.view(sid) for sid in self.spec_order(needle)) if v is not None)

    def _trim_later(self) -> None:
        """Once this whole list has left (its frame let go, its REST answer written): the heap trimmed (heap.py)."""
        if self._trim_handle is None:
            self._trim_handle = asyncio.get_running_loop().call_later(TRIM_AFTER_SECONDS, self._trim)

    def _trim(self) -> None:
        self._trim_handle = None
        heap.trim()

    def total(self) -> int:
        return len(self.ids())

    def keys(self, needle: str = "") -> list[tuple]:
        """Every listed session's order key ``(0 online | 1 not, -(lastEventAt or startedAt), id)``, sorted;
        kept until the list changes (a sidebar read page after page sorts once)."""
        version = (self.book.browsers.list_version, needle)
        if self._keys_cache is not None and self._keys_cache[0] == version:
            return self._keys_cache[1]
        out = self._sorted_keys(needle)
        self._keys_cache = (version, out)
        return out

    def _sorted_keys(self, needle: str) -> list[tuple]:
        out = []
        for sid in self.ids():
            state = self._state(sid)
            if state is None:
                continue
            rec, conv, online, last, started = state
            if needle and not matches(self._fields(sid, rec, conv), needle):
                continue
            ts = last or started or 0
            out.append((0 if online else 1, -int(ts) if isinstance(ts, (int, float)) else 0, sid))
        out.sort()
        return out

    def page(self, limit: int = PAGE_DEFAULT, cursor: Optional[str] = None, q: str = "") -> dict:
        keys = self.keys(needle_of(q))
        start = bisect.bisect_right(keys, decode_cursor(cursor)) if cursor else 0
        chosen = keys[start:start + limit]
        more = start + limit < len(keys)
        views = [v for v in (self.view(k[2]) for k in chosen) if v is not None]
        return {"sessions": views, "total": len(keys), "next": encode_cursor(chosen[-1]) if more and chosen else None}

    def attention(self, shown: set) -> list:
        """Entries of sessions where a decision waits, beyond ``shown``: a page's reader sees them from anywhere."""
        out = []
        for cid, conv in self.book.bridge.conversations.items():
            if (conv.approvals or conv.clarifications) and cid not in shown:
                view = self.view(cid)
                if view is not None:
                    out.append(view)
        return out

    # --- the first frame of a browser socket ---------------------------------------------------

    def first_frame(self, paged: bool) -> bytes:
        """The encoded ``session_list`` a browser gets first: rebuilt when the list changed (or after a
        second, for lastEventAt), not once per connection, so a reconnect storm costs one encoding."""
        return self._cached("_page_cache", self.page_frame) if paged else self.spec_frame()

    def spec_frame(self) -> bytes:
        """The spec's whole ``session_list``, encoded once for every spec client (their first frame, a change of
        the list: stream.py) until the list changes or a second passes; then let go, not held at rest."""
        return self._cached("_full_cache", lambda: codec.session_list_joined(self.encoded()))

    def _cached(self, slot: str, build: Any) -> bytes:
        loop = asyncio.get_running_loop()
        now = loop.time()
        version = self.book.browsers.list_version
        cached = getattr(self, slot)
        if cached is None or cached[0] != version or now - cached[1] > CACHE_SECONDS:
            cached = (version, now, build())
            setattr(self, slot, cached)
            if slot == "_full_cache":
                loop.call_later(CACHE_SECONDS, self._let_go, cached)
        return cached[2]

    def _let_go(self, cached: tuple) -> None:
        if self._full_cache is cached:
            self._full_cache = None

    def page_frame(self) -> bytes:
        page = self.page()
        page["attention"] = self.attention({s["id"] for s in page["sessions"]})
        return codec.session_list_frame(page.pop("sessions"), **page)


__all__ = ["EXT_LIST_DELTAS", "Listing", "PAGE_DEFAULT", "PAGE_MAX", "matches", "needle_of", "wants_page"]
