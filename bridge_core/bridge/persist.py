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
from .decisions import DecisionLedger, settled
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
            s.write_later(lambda c: delete_conversation(c, cid))
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

    @staticmethod
    def restore_rows(c: Any, events: list) -> int:
        """A write (``store.write``): the rows of ``events`` (a front end's durable record of them, in their
        order: ``drafts.DurableRows``) the store lacks, each where it comes: a conversation, a user's message, a
        run's row (running: the start then ends it as the record holds, or closes it as interrupted) and its
        message as its end holds it, a deletion; a decision's resolution, its pending row dropped (else the start
        resolves it again, denied by restart: decision_not_once). A row the store has stays as it is (restored
        once, however often the record is read); nothing goes into a conversation the store does not hold. The
        rows added (or dropped)."""
        added = 0
        for e in events:
            t = type(e)
            if t is ev.ApprovalResolved or t is ev.ClarifyResolved:
                added += c.execute(*settled(e)).rowcount
                continue
            if t is ev.ConversationDeleted:
                delete_conversation(c, e.conversation_id)
                continue
            if t is ev.ConversationCreated:
                added += c.execute("INSERT OR IGNORE INTO conversations(id, name, source, created_at, updated_at) "
                                   "VALUES(?,?,?,?,?)", (e.conversation_id, e.name, e.source, e.ts, e.ts)).rowcount
                continue
            if c.execute("SELECT 1 FROM conversations WHERE id=?", (e.conversation_id,)).fetchone() is None:
                continue
            if t is ev.RunStarted:
                added += c.execute("INSERT OR IGNORE INTO runs(run_id, conversation_id, status, started_at) "
                                   "VALUES(?,?,?,?)", (e.run_id, e.conversation_id, "running", e.ts)).rowcount
            elif t is ev.UserMessageSent or t is ev.MessageCompleted:
                if c.execute("SELECT 1 FROM messages WHERE conversation_id=? AND message_id=?",
                             (e.conversation_id, e.message_id)).fetchone() is None:  # fmt: skip
                    role = "user" if t is ev.UserMessageSent else "assistant"
                    c.execute(MESSAGE_SQL, (e.conversation_id, e.message_id, role, e.text, e.ts))
                    c.execute(LAST_ACTIVE_SQL, (e.ts, e.conversation_id))
                    added += 1
        return added

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


def delete_conversation(c: Any, cid: str) -> None:
    """A write: a conversation's rows, its messages and runs."""
    c.execute("DELETE FROM messages WHERE conversation_id=?", (cid,))
    c.execute("DELETE FROM runs WHERE conversation_id=?", (cid,))
    c.execute("DELETE FROM conversations WHERE id=?", (cid,))
