"""Streaming drafts kept in the store: every run's in one write, at most every DRAFT_SAVE_INTERVAL.

A run's message is written when it completes. While it streams, its draft is
saved now and then, so that a crash loses at most the last interval of what
was said: at the next start the interrupted message is completed with the
saved draft (``Bridge.close_run``). The draft's row is the message's own row,
which its completion replaces (docs/architecture.md, "One event, agent to
sockets").

A message's first words (its first delta) are saved at once (at the loop's next turn: a
crash right after them keeps them). After that a delta only marks its
message as changed (a dict store: this runs per delta), and one timer saves
every changed draft, as it is by then, in one write, whatever number of runs
stream. The write holds no frame
(``barrier=False``): a snapshot that may lag what was sent, by design.

A front end may keep more than the draft, durably: Loomi commits (or maps into its journal) every
frame before it leaves, so after a crash its rows may hold a run's deltas up to the last one a phone
got, a second past the draft. Such a front end offers that text through ``DurableText`` (registered
with ``Bridge.add_durable_text`` before the interrupted runs are closed), and the interrupted message
is completed with the longest text any of them, or the draft, holds (``longest_text``): the
transcript, every front end's closing frames and a phone's replay then agree (docs/architecture.md,
"After a crash"). The core imports no front end: the interface is this callable.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Iterable, NamedTuple, Optional

log = logging.getLogger("agent_bridge.drafts")

# run id -> the text of its message as a front end's durable record holds it (None: not all of it, or
# nothing): Loomi's replay rows (loomi_adapter/journal.py ``stored_run_text``)
DurableText = Callable[[str], Optional[str]]



class RunEnd(NamedTuple):
    """A run's end as a front end's durable record holds it (its closing frame): what a phone may have got;
    an interrupted end (error ``RUN_INTERRUPTED``) with its notice's text and time where the record holds it."""

    status: str
    error: Optional[str]
    text: str
    ts: float
    notice: Optional[tuple[str, float]] = None


# the notice that says why a run was closed as interrupted (``Bridge.interrupt``): one per run, whoever closes it
# and however often (a redo of a close, an end restored from a durable record, ``Bridge.restore_end``), so every
# store and surface holds it once (a row written once, ``seen`` on a bus: bridge_core/scale/seen.py)
NOTICE_TITLE = "Run interrupted"


def notice_id(run_id: str) -> str:
    """The message id of ``run_id``'s interrupt notice (a run id is 32 hex: the form of any other notice's id)."""
    return f"n-{run_id}"


# run id -> its end, where a front end's durable record holds one (None: none there): Loomi's journaled replay
# rows (loomi_adapter/journal.py ``stored_run_end``), durable on the loop before the core's writer commits the
# run's end; a start writes that end rather than closing the run again (``Bridge.restore_end``)
DurableEnd = Callable[[str], Optional[RunEnd]]

# the core's events behind the store's rows as a front end's durable record holds them, in their order:
# Loomi's journaled replay rows (loomi_adapter/journal.py ``stored_rows``), durable at once while the core's
# rows are written a writer's batch later (a kill -9 in between leaves a whole exchange there and none of it in
# the store). A start writes back the rows the store lacks (``Persister.restore_rows``, before the store is
# loaded); ``MessageCompleted`` stands for a run's message as its end holds it (where the end came).
DurableRows = Callable[[], list]

DRAFT_SAVE_INTERVAL = 1.0  # seconds between saves of a streaming draft (what a crash can lose)

# a message's row (a draft's, a completion's: the completion replaces the draft) and its conversation's
# last activity: persist.Persister.write_message writes the same two
MESSAGE_SQL = "INSERT OR REPLACE INTO messages(conversation_id, message_id, role, text, ts) VALUES(?,?,?,?,?)"
LAST_ACTIVE_SQL = "UPDATE conversations SET last_active=? WHERE id=?"


class DraftSaver:
    def __init__(self, store: Any, exists: Callable[[str], bool], interval: float = DRAFT_SAVE_INTERVAL):
        self.store = store
        self.exists = exists  # is the conversation still there (a deleted one gets no row back)
        self.interval = interval
        self._changed: dict[str, Any] = {}  # message id -> its newest TextDelta (its draft grows in place)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._soon = False  # the timer is for the loop's next turn (a message's first words)

    def changed(self, e: Any) -> None:
        """A text delta of a streaming message (the hot path)."""
        self._changed[e.message_id] = e
        if e.draft.length > len(e.delta):  # not its first words
            if self._timer is None:
                self._timer = asyncio.get_running_loop().call_later(self.interval, self.save)
        elif not self._soon:  # its first words: saved at the next turn, with whatever else changed
            if self._timer is not None:
                self._timer.cancel()
            self._timer = asyncio.get_running_loop().call_later(0, self.save)
            self._soon = True

    def done(self, message_id: str) -> None:
        """The message completed (its own row replaces the draft's): no draft of it is saved after that."""
        self._changed.pop(message_id, None)

    def save(self) -> None:
        """Write every changed draft now, in one write (the timer; ``close``)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._soon = False
        changed, self._changed = self._changed, {}
        rows = [(e.conversation_id, e.message_id, "assistant", e.text, e.ts)
                for e in changed.values() if self.exists(e.conversation_id)]
        if not rows:
            return
        active = [(ts, cid) for cid, _, _, _, ts in rows]

        def write(c: Any) -> None:
            c.executemany(MESSAGE_SQL, rows)
            c.executemany(LAST_ACTIVE_SQL, active)

        self.store.write_later(write, barrier=False)

    def close(self) -> None:
        """Stopping: what changed since the last save is saved now."""
        self.save()


def longest_text(draft: str, run_id: str, sources: Iterable[DurableText]) -> str:
    """What an interrupted run's message is completed with: the longest of its saved ``draft`` and the
    texts durable records offer, each only where it goes on from the draft (the same message further on:
    an unrelated text never replaces it). Every node closing the run asks the same records (the shared
    store's rows with several nodes), so it closes with one text."""
    best = draft
    for source in sources:
        try:
            text = source(run_id)
        except Exception:  # a record that cannot be read now: the others, or the draft, still count
            log.exception("reading the durable text of run %s failed", run_id)
            continue
        if text is not None and len(text) > len(best) and text.startswith(draft):
            best = text
    return best


def durable_end(run_id: str, sources: Iterable[DurableEnd]) -> Optional[RunEnd]:
    """The end of ``run_id`` the first durable record holding one offers (a record that cannot be read
    now counts as holding none: the run is then closed as interrupted, as without it)."""
    for source in sources:
        try:
            end = source(run_id)
        except Exception:
            log.exception("reading the durable end of run %s failed", run_id)
            continue
        if end is not None:
            return end
    return None


def durable_rows(sources: Iterable[DurableRows]) -> list:
    """Every durable record's events (``DurableRows``), one record after another (a record that cannot be
    read now offers none: the store is loaded as it is, as without it)."""
    out: list = []
    for source in sources:
        try:
            out += source()
        except Exception:
            log.exception("reading a durable record's rows failed")
    return out
