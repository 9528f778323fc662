"""Transcripts in memory: the conversations in use, loaded from the store when something needs them.

At start the bridge reads the list of conversations (``Bridge._load``: each one's row and
the preview of its last message), not their messages. A conversation's transcript (its last
``HISTORY_KEEP`` messages, ``model/state.py``) is read from the store the first time
something asks for it (``ConversationState.messages``: a snapshot, a history page, a run
appending to it, a front end's lookup) and kept while it is in use.

How many are kept is bounded twice, whichever is reached first (least recently used first
out): ``HOT_CONVERSATIONS`` transcripts, and ``HOT_BYTES``, counted as each message's text
length plus ``MESSAGE_OVERHEAD`` (what a message costs in memory beyond its text, measured
with tracemalloc). Opening many conversations, one after another, therefore never makes the
process hold more than the bound (plus the one transcript in use, if alone it is larger).

A transcript is dropped only when the store can give it back as it is in memory:

- its conversation has no active run (whose streaming draft the store holds as a message
  row: ``drafts.py``; the load leaves an active run's unfinished message out, as
  ``_load_running`` does at start);
- every write queued since its last message was added has been committed (reads go through
  the read connection, which sees committed rows only);
- nobody replaced it from outside (``Transcript.held``: Hermes adopts its own transcripts;
  such a one is no longer counted).

The oldest transcript is looked at first; one whose writes are still queued stops the pass
(the next use tries again, a millisecond or so later for the writer), so the bound can be
passed for as long as the store takes to commit what was just said.

**One order.** A conversation's messages are in the order of their ``ts`` (the event's time at its
origin; equal times as they came): a transcript read from the store is put in that order
(``in_order``), and a message added or completed in memory takes its place by it (``place``). The
store's row order is its writers' commit order: with several nodes a node's write of a run's
completion can commit after another node's write of the user's next message (its writer held by a
PostgreSQL restart, a stop, a starved CPU), and a completion written late (``persist.py``
``restore_message``) or again replaces its row at the end; every node folding the stream has it in
stream order. So a node that reads the transcript from the store (restarted, or its copy dropped by
the bound) kept another order than the others for good (chaos seed 2004, ``nodes_disagree``).
"""

from __future__ import annotations

import collections
from typing import Any, Optional

from ..model import events as ev
from ..model.ids import draft_message_id
from ..model.state import HISTORY_KEEP, ConversationState, Transcript

HOT_CONVERSATIONS = 256  # transcripts kept in memory at most
HOT_BYTES = 64 * 1024 * 1024  # and their size at most (text length + MESSAGE_OVERHEAD per message)
MESSAGE_OVERHEAD = 300  # bytes: a Message (attrs, slots), its id and role strings, its float, its deque slot


class _Hot:
    """A transcript in memory: its conversation, its size, and the writes it waits for before it can go."""

    __slots__ = ("conv", "size", "dirty", "mark")

    def __init__(self, conv: ConversationState, size: int):
        self.conv = conv
        self.size = size
        self.dirty = True  # a message was added since ``mark`` was taken
        self.mark = 0  # the store's write count when it was last found clean


def cost(message: ev.Message) -> int:
    return len(message.text) + MESSAGE_OVERHEAD


def in_order(rows: list) -> list:
    """Rows ``(message_id, role, text, ts)`` as the store read them (oldest written first) in the one order:
    by ``ts``, equal ones as read; a row without one keeps its place after the row before it."""
    keys, last = [], float("-inf")
    for i, r in enumerate(rows):
        if r[3] is not None:
            last = r[3]
        keys.append((last, i))
    keys.sort()
    return [rows[i] for _, i in keys]


def unfinished_out(rows: list, drafts: set) -> list:
    """``rows`` (in order) less the saved drafts ``drafts`` of runs still running (their message unfinished),
    unless a user's message came after one: then its run has ended (one run per conversation) and this state
    is behind; that row is kept where it is, and the completion, folded later, replaces its text (scale/seen.py)."""
    users = [i for i, r in enumerate(rows) if r[1] == "user"]
    last_user = users[-1] if users else -1
    return [r for i, r in enumerate(rows) if r[0] not in drafts or i < last_user]


def unfinished(conv: ConversationState) -> set:
    """The message of ``conv``'s active run while unfinished (its streaming draft: the snapshot's run; the store's
    row of it is the saved draft), which a transcript read from the store leaves out (``unfinished_out``)."""
    run = conv.run
    return {run.message_id} if run is not None and not run.completed else set()


def draft_out(conv: ConversationState, message_id: str) -> None:
    """A run's start folded after its conversation's transcript was read (a node behind in the stream: chaos
    seed 2010): the store's saved draft of the run's message, read then as a message, leaves the transcript, as
    a load with the run known leaves it out (``unfinished_out``: unless a user's message came after it); while
    the run streams its message is its draft (the snapshot's run), and its completion adds it at its place."""
    t = conv.transcript
    if t is None or t.held:
        return
    at = next((i for i in range(len(t) - 1, -1, -1) if t[i].message_id == message_id), None)
    if at is None or any(m.role == "user" for m in list(t)[at + 1:]):
        return
    old = t[at]
    del t[at]
    keeper = conv.keeper
    if isinstance(keeper, Transcripts):
        keeper.shrank(conv, old)


def place(t: Transcript, message: ev.Message) -> None:
    """``message`` (in ``t``, looked for from the newest) moved to its place by ``ts`` (the one order):
    usually it is the newest and already there, and this costs a comparison."""
    ts = message.ts
    if ts is None or t.held or len(t) < 2:
        return
    last = len(t) - 1
    at = last if t[last] is message else next((i for i in range(last - 1, -1, -1) if t[i] is message), None)
    if at is None:
        return
    to = at
    while to > 0 and t[to - 1].ts is not None and t[to - 1].ts > ts:
        to -= 1
    if to == at:
        while to < last and t[to + 1].ts is not None and t[to + 1].ts < ts:
            to += 1
    if to != at:
        del t[at]
        t.insert(to, message)


class Transcripts:
    """The bridge's transcript keeper (``model/state.py`` ``TranscriptKeeper``): an LRU over the store."""

    def __init__(self, store: Any, *, max_conversations: int = HOT_CONVERSATIONS, max_bytes: int = HOT_BYTES):
        self.store = store
        self.max_conversations = max(1, max_conversations)
        self.max_bytes = max_bytes
        self._hot: "collections.OrderedDict[str, _Hot]" = collections.OrderedDict()
        self.bytes = 0
        self.loads = 0  # transcripts read from the store (metrics, tests)
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._hot)

    def __contains__(self, conversation_id: str) -> bool:
        return conversation_id in self._hot

    def new(self, conv: ConversationState) -> None:
        """A conversation created here and now (or on another node, the bus says): its transcript is
        empty, nothing to read (what it was given meanwhile, if anything, is kept)."""
        conv.keeper = self
        t = conv.transcript
        if t is None:
            t = conv.transcript = Transcript()
        self._keep(conv, sum(map(cost, t)))

    def cold(self, conv: ConversationState) -> None:
        """A conversation the store holds: its transcript is read when first needed."""
        conv.keeper = self
        conv.transcript = None

    # --- TranscriptKeeper -----------------------------------------------------------

    def load(self, conv: ConversationState) -> Transcript:
        """The transcript as the store has it, in the one order (``in_order``), less the active run's
        unfinished message (its row is the saved draft), unless a user's message came after it: then the
        run has ended, one run per conversation, and this state is behind (a node behind in the stream).
        That row is kept where it is, and the completion, folded later, replaces its text (scale/seen.py)."""
        rows = unfinished_out(in_order(self.store.transcript(conv.conversation_id, HISTORY_KEEP)), unfinished(conv))
        t = Transcript(ev.Message(message_id=mid, role=role, text=text, ts=ts) for mid, role, text, ts in rows)
        self.loads += 1
        conv.transcript = t
        self._keep(conv, sum(map(cost, t)))
        return t

    def touch(self, conv: ConversationState) -> None:
        hot = self._hot.get(conv.conversation_id)
        if hot is None:
            t = conv.transcript
            if t is not None and not t.held:  # made before this keeper had it (a state given one later)
                self._keep(conv, sum(map(cost, t)))
            return
        self._hot.move_to_end(conv.conversation_id)
        if len(self._hot) > self.max_conversations or self.bytes > self.max_bytes:
            self._trim(conv.conversation_id)  # (one left over: its writes were not committed when another came in)

    def grew(self, conv: ConversationState, message: ev.Message, dropped: Optional[ev.Message] = None) -> None:
        if conv.transcript is not None:
            place(conv.transcript, message)
        hot = self._hot.get(conv.conversation_id)
        if hot is None:
            self.touch(conv)
            return
        delta = cost(message) - (cost(dropped) if dropped is not None else 0)
        hot.size += delta
        self.bytes += delta
        hot.dirty = True
        self._hot.move_to_end(conv.conversation_id)
        if len(self._hot) > self.max_conversations or self.bytes > self.max_bytes:
            self._trim(conv.conversation_id)

    def shrank(self, conv: ConversationState, message: ev.Message) -> None:
        """``message`` left ``conv``'s transcript (``draft_out``)."""
        hot = self._hot.get(conv.conversation_id)
        if hot is not None:
            hot.size -= cost(message)
            self.bytes -= cost(message)

    def refresh(self, conversation_id: Optional[str] = None) -> int:
        """Messages the store has that a transcript in memory lacks, added in the one order (several nodes: the
        stream lost events this node's state may lack, bridge_core/scale/gone.py; call it once this node's own
        writes are committed). Nothing in memory goes (another node's event folded here may not be committed
        yet); one replaced from outside is left as it is. A conversation with a run active is read back too,
        less that run's unfinished message, as ``load`` leaves it out: skipped, it lacked for good what the gap
        held before that run (chaos seed 2024, ``nodes_disagree``: an earlier run's completion and close notice,
        the read-back's last pass falling in a later run). Every transcript in memory, or ``conversation_id``'s
        (one not in memory is read whole when it is next wanted). Returns how many messages were added."""
        added = 0
        if conversation_id is None:
            hots = list(self._hot.items())
        else:
            one = self._hot.get(conversation_id)
            hots = [(conversation_id, one)] if one is not None else []
        for cid, hot in hots:
            conv, t = hot.conv, hot.conv.transcript
            if t is None or t.held:
                continue
            have = {m.message_id for m in t}
            # a run the store has open (its start lost to this node, it may not know of it): its draft row is
            # no message yet (chaos seed 2003: ``conversation.open`` showed a streaming run's first words)
            streaming = unfinished(conv) | {draft_message_id(r) for (r,) in self.store.query(
                "SELECT run_id FROM runs WHERE conversation_id=? AND finished_at IS NULL", (cid,))}  # fmt: skip
            for mid, role, text, ts in unfinished_out(in_order(self.store.transcript(cid, HISTORY_KEEP)), streaming):
                if mid not in have:
                    m = ev.Message(message_id=mid, role=role, text=text, ts=ts)
                    t.append(m)
                    place(t, m)
                    hot.size += cost(m)
                    self.bytes += cost(m)
                    added += 1
        return added

    # --- the bound ----------------------------------------------------------------------

    def forget(self, conversation_id: str) -> None:
        """The conversation is gone (deleted)."""
        hot = self._hot.pop(conversation_id, None)
        if hot is not None:
            self.bytes -= hot.size

    def _keep(self, conv: ConversationState, size: int) -> None:
        self.forget(conv.conversation_id)
        self._hot[conv.conversation_id] = _Hot(conv, size)
        self.bytes += size
        self._trim(conv.conversation_id)

    def _trim(self, using: str) -> None:
        """Drop least recently used transcripts while over either bound, never ``using`` (the one in use).

        The oldest is looked at first: a transcript whose store writes are still queued stops the
        pass (the newer ones wait for theirs too; the next use tries again); one with an active run
        counts as just used; one replaced from outside is no longer counted (it cannot go).
        """
        hot_ = self._hot
        steps = len(hot_)  # each one looked at once at most
        while (len(hot_) > self.max_conversations or self.bytes > self.max_bytes) and steps > 0:
            steps -= 1
            cid, hot = next(iter(hot_.items()))
            if cid == using:
                hot_.move_to_end(cid)
                continue
            t = hot.conv.transcript
            if t is None or t.held:
                del hot_[cid]
                self.bytes -= hot.size
                continue
            if hot.conv.run is not None:
                hot_.move_to_end(cid)
                continue
            if hot.dirty:  # its writes are queued by now (a state is folded before its event is persisted)
                hot.mark = self.store.submitted
                hot.dirty = False
            if self.store.processed < hot.mark:
                return
            del hot_[cid]
            self.bytes -= hot.size
            hot.conv.transcript = None
            self.dropped += 1


class Conversations(dict):
    """The bridge's conversations by id. A state put in without a keeper gets ``keeper``'s, as a new
    conversation: the one the cluster makes when another node created a conversation
    (``bridge_core/scale/cluster.py``) is then bounded like the others. Reads are a dict's."""

    __slots__ = ("keeper",)

    def __init__(self, keeper: Transcripts):
        super().__init__()
        self.keeper = keeper

    def __setitem__(self, conversation_id: str, conv: ConversationState) -> None:
        if conv.keeper is None:
            self.keeper.new(conv)
        dict.__setitem__(self, conversation_id, conv)
