"""The text of each session's open assistant message, for a browser that subscribes mid-stream (pure).

The spec persists only ``message_end``: a page opened or reloaded while a message
streams would show nothing of it until the next delta. The daemon keeps the open
message's text here and hands it to a browser right after its ``subscribe``, as one
extension frame spec clients ignore (unknown types are ignored)::

    {"type": "inflight", "sessionId": "...", "seq": 57,
     "message": {"role": "assistant", "id": "..." | null}, "text": "the text so far"}

``seq`` is the seq of the last ``message_update`` folded into ``text`` (or the last
seq the session had then): a client skips the deltas of that message up to it, which
may still reach it in the stream's next batch. See docs/web-ui.md ("No lost text").
"""

from __future__ import annotations

from typing import Any, Optional

import orjson

MAX_TEXT = 4 * 1024 * 1024  # characters kept per open message; beyond it the frame is not sent
CLOSING = frozenset({"agent_end", "agent_settled", "bye"})  # and the open message's own message_end


class _Open:
    __slots__ = ("id", "parts", "length", "seq")

    def __init__(self, mid: Optional[str], seq: int):
        self.id = mid
        self.parts: list[str] = []
        self.length = 0
        self.seq = seq


class InFlight:
    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}

    def feed(self, sid: str, etype: str, seq: int, payload: dict) -> None:
        """An event of ``sid`` as it goes out on the stream (envelope type, seq, payload fields)."""
        if etype == "message_update":
            delta = payload.get("delta")
            if isinstance(delta, str):
                self.append(sid, delta, seq)
            return
        if etype == "message_start":
            msg = payload.get("message")
            if isinstance(msg, dict) and msg.get("role") == "assistant":
                mid = msg.get("id")
                self._open[sid] = _Open(mid if isinstance(mid, str) else None, seq)
            return
        if etype == "message_end":
            msg = payload.get("message")
            cur = self._open.get(sid)
            if cur is not None and isinstance(msg, dict) and (msg.get("role") == "assistant" or msg.get("id") == cur.id):
                del self._open[sid]  # a user or tool result message ending meanwhile leaves it open
            return
        if etype in CLOSING:
            self._open.pop(sid, None)

    def append(self, sid: str, delta: str, seq: int) -> None:
        """A text delta of the open message (a message opened by its first delta has no id yet)."""
        cur = self._open.get(sid)
        if cur is None:
            cur = self._open[sid] = _Open(None, seq)
        if cur.length <= MAX_TEXT:
            cur.parts.append(delta)
            cur.length += len(delta)
        if seq > cur.seq:
            cur.seq = seq

    def forget(self, sid: str) -> None:
        self._open.pop(sid, None)

    def text(self, sid: str) -> Optional[str]:
        cur = self._open.get(sid)
        if cur is None:
            return None
        if len(cur.parts) > 1:
            cur.parts = ["".join(cur.parts)]
        return cur.parts[0] if cur.parts else ""

    def shown(self, sid: str, mid: Optional[str]) -> Optional[str]:
        """The whole text the deltas of open message ``mid`` of ``sid`` made (None: another message open,
        none, or a text longer than is kept)."""
        cur = self._open.get(sid)
        if cur is None or cur.id != mid or cur.length > MAX_TEXT:
            return None
        return self.text(sid)

    def frame(self, sid: str) -> Optional[bytes]:
        """The ``inflight`` frame for a browser subscribing to ``sid``, or None when no text streams."""
        cur = self._open.get(sid)
        if cur is None or cur.length == 0 or cur.length > MAX_TEXT:
            return None  # nothing said yet (the first delta opens the bubble) or too long to resend
        text = self.text(sid) or ""
        obj: dict[str, Any] = {
            "type": "inflight",
            "sessionId": sid,
            "seq": cur.seq,
            "message": {"role": "assistant", "id": cur.id},
            "text": text,
        }
        return orjson.dumps(obj)
