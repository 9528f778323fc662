"""What the store keeps of each event: the bridge's durable writes, queued, never one per delta.

``Persister.persist`` is called for every event this node publishes, in the log's order: as
the hub's first subscriber on one node (``sequencing.LocalSequencing``), from the cluster's
publish with several (each node persists its own events, ``bridge_core/scale/cluster.py``).
It queues the writes on the store's writer thread (``store.BaseStore.execute_later``): a
conversation's rows, messages, runs, the decisions pending across a restart
(``decisions.DecisionLedger.record``). Text deltas are never written one by one: the
streaming draft is saved now and then (``drafts.DraftSaver``).
"""

from __future__ import annotations

from typing import Any, Mapping

from ..model import events as ev
from ..model.state import ConversationState
from .decisions import EVENTS as DECISION_EVENTS
from .decisions import DecisionLedger
from .drafts import LAST_ACTIVE_SQL, MESSAGE_SQL, DraftSaver
from .store import BaseStore


class Persister:
    def __init__(self, store: BaseStore, conversations: Mapping[str, ConversationState], drafts: DraftSaver):
        self.store = store
        self.conversations = conversations
        self.drafts = drafts

    def persist(self, seq: int, e: Any) -> None:
        t = type(e)
        s = self.store
        if t is ev.TextDelta:
            if e.kind == "text":
                self.drafts.changed(e)
            return
        if t is ev.ConversationCreated:
            conv = self.conversations.get(e.conversation_id)
            s.execute_later(
                "INSERT OR IGNORE INTO conversations(id, name, source, created_at, updated_at) VALUES(?,?,?,?,?)",
                (e.conversation_id, e.name, e.source, e.ts, e.ts),
            )
            if conv is not None and conv.session_id:
                s.execute_later("UPDATE conversations SET session_id=? WHERE id=?", (conv.session_id, e.conversation_id))
        elif t is ev.ConversationRenamed or t is ev.ConversationUpdated:
            s.execute_later("UPDATE conversations SET name=?, updated_at=? WHERE id=?", (e.name, e.ts, e.conversation_id))
        elif t is ev.ConversationDeleted:
            cid = e.conversation_id
            s.write_later(
                lambda c: (
                    c.execute("DELETE FROM messages WHERE conversation_id=?", (cid,)),
                    c.execute("DELETE FROM runs WHERE conversation_id=?", (cid,)),
                    c.execute("DELETE FROM conversations WHERE id=?", (cid,)),
                )
            )
        elif t is ev.UserMessageSent:
            self.write_message(e.conversation_id, e.message_id, "user", e.text, e.ts)
        elif t is ev.MessageCompleted:
            self.drafts.done(e.message_id)
            self.write_message(e.conversation_id, e.message_id, "assistant", e.text, e.ts)
        elif t is ev.Notification:
            if e.conversation_id is not None:
                self.write_message(e.conversation_id, e.message_id, "assistant", e.text, e.ts)
        elif t is ev.RunStarted:
            s.execute_later(
                "INSERT OR REPLACE INTO runs(run_id, conversation_id, status, started_at) VALUES(?,?,?,?)",
                (e.run_id, e.conversation_id, "running", e.ts),
            )
        elif t is ev.RunFinished:
            s.execute_later(
                "UPDATE runs SET status=?, finished_at=?, error=? WHERE run_id=?", (e.status, e.ts, e.error, e.run_id)
            )
        elif t in DECISION_EVENTS:
            DecisionLedger.record(s, e)

    def write_message(self, cid: str, mid: str, role: str, text: str, ts: float) -> None:
        self.store.execute_later(MESSAGE_SQL, (cid, mid, role, text, ts))
        self.store.execute_later(LAST_ACTIVE_SQL, (ts, cid))

    def restore_message(self, cid: str, mid: str, text: str, ts: float) -> None:
        """A completion written late (published by a node's previous life, which died before its store had
        it: bridge_core/scale/cluster.py ``_restore``): its row's text updated where the row is, else the
        row added; never moved after the messages stored since (a transcript is read in row order)."""
        self.drafts.done(mid)

        def write(c: Any) -> None:
            if c.execute("UPDATE messages SET text=? WHERE conversation_id=? AND message_id=?",
                         (text, cid, mid)).rowcount == 0:  # fmt: skip
                c.execute(MESSAGE_SQL, (cid, mid, "assistant", text, ts))

        self.store.write_later(write)
