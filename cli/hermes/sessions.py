"""Hermes sessions <-> bridge conversations: the list at start, titles, deletion.

Hermes keeps its conversations in its session database (``state.db``, ``compat.HermesApi.session_db``)
and maps a chat's session key to its current session through the gateway's session store.
At start the sessions of our platforms become bridge conversations (title and transcript);
Hermes's auto-titles are picked up after a run; deleting a conversation deletes its session.
Database reads and writes run on a worker thread, never on the gateway's loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Optional

from bridge_core.model import events as ev
from bridge_core.model.ids import is_hex32

from .chats import SOURCE, Chats, session_key

if TYPE_CHECKING:
    from bridge_core.model.state import ConversationState

    from .runs import HermesRun

log = logging.getLogger("agent_bridge.hermes")

TITLE_DELAY = 2.0  # Hermes titles a session in the background after its first turn
LIST_LIMIT = 500


class Sessions:
    def __init__(self, chats: Chats):
        self.chats = chats

    async def load(self) -> None:
        """Adopt the Hermes sessions of our platforms (errors leave the list empty, logged)."""
        try:
            found = await asyncio.get_running_loop().run_in_executor(None, self._read_sessions)
        except Exception:
            log.warning("could not read Hermes's session database; conversation list starts empty", exc_info=True)
            return
        try:
            self._adopt(found)
        except Exception:
            log.exception("adopting Hermes's sessions as conversations failed")

    def _read_sessions(self) -> list[tuple[str, str, dict, list]]:
        """(platform, chat_id, session row, transcript) of every chat, its newest session only (worker thread)."""
        db = self.chats.api.session_db()
        found: list[tuple[str, str, dict, list]] = []
        for platform in self.chats.platforms:
            for row in db.list_sessions_rich(source=platform, limit=LIST_LIMIT, min_message_count=1):
                chat_id = row.get("chat_id")
                if not chat_id:
                    full = db.get_session(row["id"]) or {}
                    chat_id = full.get("chat_id")
                if not is_hex32(chat_id) or any(f[1] == chat_id for f in found):
                    continue  # newest session of a chat first; older ones are its past
                try:
                    history = db.get_messages_as_conversation(row["id"])
                except Exception:
                    history = []
                found.append((platform, chat_id, row, history))
        return found

    def _adopt(self, found: list) -> None:
        bridge = self.chats.bridge
        for platform, chat_id, row, history in found:
            self.chats.conv_platform[chat_id] = platform
            conv = bridge.conversations.get(chat_id)
            title = (row.get("title") or row.get("preview") or "Hermes chat").strip()[:200]
            if conv is None:
                conv = bridge.create_conversation(title, source=SOURCE, conversation_id=chat_id, session_id=row.get("id"))
            conv.session_id = row.get("id")
            messages = transcript(history, row)
            if messages:  # Hermes's transcript is the authority for history
                conv.messages.clear()
                conv.messages.extend(messages)
                conv.preview = messages[-1].text[:200]
            last = row.get("last_active") or row.get("started_at")
            if isinstance(last, (int, float)):
                conv.last_active = float(last)

    def session_id(self, platform: str, chat_id: str) -> Optional[str]:
        """The chat's current Hermes session: the gateway's session store, else the one adopted."""
        store = self.chats.session_store(platform)
        if store is not None and hasattr(store, "peek_session_id"):
            try:
                sid = store.peek_session_id(session_key(platform, chat_id))
                if sid:
                    return sid
            except Exception:
                pass
        conv = self.chats.bridge.conversations.get(chat_id)
        return conv.session_id if conv is not None else None

    async def delete(self, conv: "ConversationState") -> None:
        """The conversation was deleted: reset its chat in the gateway and delete its session."""
        cid = conv.conversation_id
        platform = self.chats.platform_of(cid)
        sid = self.session_id(platform, cid)
        store = self.chats.session_store(platform)
        if store is not None and hasattr(store, "reset_session"):
            try:
                store.reset_session(self.chats.session_key(cid))
            except Exception:
                log.debug("session_store.reset_session failed", exc_info=True)
        if sid:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self._delete_session, sid)
            except Exception:
                log.warning("deleting Hermes session %s failed", sid, exc_info=True)
        self.chats.conv_platform.pop(cid, None)

    def _delete_session(self, sid: str) -> None:
        self.chats.api.session_db().delete_session(sid)

    def retitle(self, run: "HermesRun") -> None:
        """Hermes auto-titles sessions; pick the title up when it appears."""
        bridge = self.chats.bridge
        conv = bridge.conversations.get(run.conversation_id)
        if conv is None or self.chats.loop is None:
            return
        sid = self.session_id(run.platform, run.conversation_id)
        if not sid:
            return
        conv.session_id = sid
        bridge.tasks.spawn(self._retitle(run.conversation_id, sid), name=f"hermes-title-{run.run_id}")

    async def _retitle(self, conversation_id: str, sid: str) -> None:
        await asyncio.sleep(TITLE_DELAY)
        title = await asyncio.get_running_loop().run_in_executor(None, self._read_title, sid)
        current = self.chats.bridge.conversations.get(conversation_id)
        if title and current is not None and title.strip() and title.strip()[:200] != current.name:
            self.chats.bridge.publish(ev.ConversationUpdated(conversation_id=current.conversation_id, name=title.strip()[:200]))

    def _read_title(self, sid: str) -> Optional[str]:
        try:
            return self.chats.api.session_db().get_session_title(sid)
        except Exception:
            return None


def transcript(history: list, row: dict) -> list:
    """A Hermes session's messages as the bridge's history: user and assistant text only."""
    out = []
    base = row.get("started_at") if isinstance(row.get("started_at"), (int, float)) else None
    for i, msg in enumerate(history or []):
        role = msg.get("role")
        content = msg.get("content")
        if role not in ("user", "assistant") or not isinstance(content, str) or not content.strip():
            continue
        ts = msg.get("timestamp") if isinstance(msg.get("timestamp"), (int, float)) else base
        out.append(ev.Message(message_id=f"hm-{row.get('id')}-{i}", role=role, text=content, ts=ts))
    return out
