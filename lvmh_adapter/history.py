"""A session's history in pages, newest first, and find-in-conversation (docs/lvmh.md, "History in pages").

The spec reads a session's stored events forward (``?after=<seq>``). A client that opens a long
conversation at its newest message reads it backward, one page at a time, as its reader scrolls up:

``GET /api/sessions/:id/events?before=<seq>&limit=N``
    the newest ``N`` stored events with ``seq < before``, seq ascending (as every events answer);
    ``before=latest`` is the newest page. The answer's ``X-Lvmh-Older`` header says whether more
    are stored below its first event (``true``/``false``).

``GET /api/sessions/:id/search?q=text&before=<seq>&limit=N``
    ``{"hits": [{seq, type, kind, id, snippet, match}], "next": seq|null}``: stored events whose
    text contains ``q`` (case-insensitive), newest first. ``kind``/``id`` say what the event is
    about (``message`` and its id, ``tool`` and its call id, ``approval``, ``clarify``,
    ``attachment``, ``notice`` and the event's seq), ``snippet`` the text around the first match,
    ``match`` where the match is in it. One request reads at most ``SCAN_BUDGET`` events; ``next``
    (when not null) is the ``before`` that continues the search below what was read.

Both read a range of the ``events`` table's primary key ``(sessionId, seq)``, the same index on
SQLite (a ``WITHOUT ROWID`` table is its key's B-tree) and on PostgreSQL: a page costs the same
at 100 or 100,000 events (tests/lvmh/test_history.py reads the query plans on both engines). The
bridge's own conversations are stored in that table too (book.py renders their shared events
into lvmh events as they happen), so their history pages the same way. Search reads in chunks of
``CHUNK`` rows, the event loop turning between chunks.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any, Optional

import attrs
import orjson

from bridge_core.model.errors import BadRequest

from . import codec

LATEST = codec.MAX_SEQ + 1  # ``before=latest``: above every seq a session can have
PAGE_SQL = "SELECT payload FROM events WHERE sessionId=? AND seq<? ORDER BY seq DESC LIMIT ?"
SEARCH_TYPES = ("message_end", "tool_execution_start", "tool_execution_end", "approval_request", "clarify_request",
                "notification", "attachment_added")
SCAN_SQL = ("SELECT seq, type, payload FROM events WHERE sessionId=? AND seq<? AND type IN ("
            + ",".join("?" * len(SEARCH_TYPES)) + ") ORDER BY seq DESC LIMIT ?")
CHUNK = 1000  # rows read per query of a search
SCAN_BUDGET = 20_000  # rows one search request reads at most (``next`` continues)
MAX_QUERY = 200  # characters of ``q``
HITS_DEFAULT = 50
HITS_MAX = 200
SNIPPET_BEFORE = 40
SNIPPET_AFTER = 100


@attrs.frozen
class PageQuery:
    """``after`` (the spec's forward read) or ``before`` (a backward page); never both."""

    limit: int
    after: int = 0
    before: Optional[int] = None


def _before(query: Any, name: str = "before") -> Optional[int]:
    raw = query.get(name)
    if raw is None or raw == "":
        return None
    if raw.strip() == "latest":
        return LATEST
    return codec.query_int(query, name, LATEST, 1, LATEST, clamp_high=True)


def page_query(query: Any) -> PageQuery:
    """The events route's query: ``after``/``limit`` as the spec says, or ``before``/``limit``."""
    after, limit = codec.events_query(query)
    before = _before(query)
    if before is None:
        return PageQuery(limit=limit, after=after)
    if query.get("after") not in (None, ""):
        raise BadRequest("after and before cannot be used together")
    return PageQuery(limit=limit, before=before)


def read_before(store: Any, sid: str, before: int, limit: int) -> tuple[list[str], bool]:
    """The newest ``limit`` stored events of ``sid`` below ``before`` (seq ascending), and whether older ones exist."""
    rows = store.query(PAGE_SQL, (sid, before, limit + 1))
    older = len(rows) > limit
    raws = [r[0] for r in rows[:limit]]
    raws.reverse()
    return raws, older


# --- search ------------------------------------------------------------------------------------------


@attrs.frozen
class SearchQuery:
    needle: str
    before: int
    limit: int


def search_query(query: Any) -> SearchQuery:
    q = query.get("q", "")
    if len(q) > MAX_QUERY:
        raise BadRequest(f"q longer than {MAX_QUERY} characters")
    needle = " ".join(q.split())
    if not needle:
        raise BadRequest("q must say what to find")
    before = _before(query)
    limit = codec.query_int(query, "limit", HITS_DEFAULT, 1, HITS_MAX, clamp_high=True)
    return SearchQuery(needle=needle, before=LATEST if before is None else before, limit=limit)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return str(value)


def _dig(obj: dict, *path: str) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)  # type: ignore[assignment]
    return obj


def searchable(obj: dict, seq: int) -> Optional[tuple[str, str, list[str]]]:
    """``(kind, id, texts)`` of a stored event: what it is about, and the texts a reader sees of it."""
    etype = obj.get("type")
    if etype == "message_end":
        msg = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        if msg.get("role") == "toolResult" and msg.get("toolCallId"):
            return "tool", _text(msg.get("toolCallId")), [_text(msg.get("text"))]
        return "message", _text(msg.get("id")), [_text(msg.get("text")), _text(msg.get("thinking"))]
    if etype in ("tool_execution_start", "tool_execution_end"):
        texts = [_text(obj.get("toolName")), _text(obj.get("args"))] if etype == "tool_execution_start" else \
            [_text(obj.get("resultPreview")), _text(obj.get("error"))]
        return "tool", _text(obj.get("toolCallId")), texts
    if etype == "approval_request":
        return "approval", _text(obj.get("approvalId")), [_text(obj.get("command")), _text(obj.get("description"))]
    if etype == "clarify_request":
        return "clarify", _text(obj.get("clarifyId")), [_text(obj.get("question"))]
    if etype == "notification":
        return "notice", str(seq), [_text(obj.get("title")), _text(obj.get("text"))]
    if etype == "attachment_added":
        return "attachment", _text(_dig(obj, "attachment", "id")), [_text(_dig(obj, "attachment", "filename"))]
    return None


def snippet(text: str, at: int, length: int) -> tuple[str, list[int]]:
    """The text around ``text[at:at+length]`` on one line, and where the match is in it."""
    start = max(0, at - SNIPPET_BEFORE)
    end = min(len(text), at + length + SNIPPET_AFTER)
    head = "…" if start > 0 else ""
    tail = "…" if end < len(text) else ""
    before = re.sub(r"\s+", " ", text[start:at])
    match = re.sub(r"\s+", " ", text[at:at + length])
    after = re.sub(r"\s+", " ", text[at + length:end])
    out = head + before + match + after + tail
    return out, [len(head) + len(before), len(head) + len(before) + len(match)]


def match_event(raw: str, seq: int, etype: str, needle: str) -> Optional[dict]:
    """The hit for one stored event, or None. ``needle`` is lower-case."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    found = searchable(obj, seq)
    if found is None:
        return None
    kind, ref, texts = found
    for text in texts:
        at = text.lower().find(needle) if text else -1
        if at >= 0:
            shown, span = snippet(text, at, len(needle))
            return {"seq": seq, "type": etype, "kind": kind, "id": ref, "snippet": shown, "match": span}
    return None


def _raw_prefilter(needle: str) -> bool:
    """Whether a stored event's JSON text can be judged by a substring test before it is parsed: the
    needle is printable ASCII with nothing JSON escapes (a quote, a backslash)."""
    return needle.isascii() and needle.isprintable() and '"' not in needle and "\\" not in needle


async def search(store: Any, sid: str, q: SearchQuery) -> dict:
    """Hits of ``q`` in ``sid``'s stored events, newest first (module docstring)."""
    needle = q.needle.lower()
    quick = _raw_prefilter(needle)
    hits: list[dict] = []
    cursor: Optional[int] = q.before
    scanned = 0
    while True:
        if scanned >= SCAN_BUDGET:
            break  # ``next`` continues below the last event read
        rows = store.query(SCAN_SQL, (sid, cursor, *SEARCH_TYPES, CHUNK))
        scanned += len(rows)
        for seq, etype, raw in rows:
            cursor = seq
            if quick and needle not in raw.lower():
                continue
            hit = match_event(raw, seq, etype, needle)
            if hit is not None:
                hits.append(hit)
                if len(hits) >= q.limit:
                    return {"hits": hits, "next": cursor}
        if len(rows) < CHUNK:
            cursor = None  # read down to the session's first event
            break
        await asyncio.sleep(0)  # a long conversation is read in chunks: the loop serves others between them
    return {"hits": hits, "next": cursor}


__all__ = ["LATEST", "PAGE_SQL", "SCAN_SQL", "PageQuery", "page_query", "read_before", "search", "search_query"]
