"""What a node's state already holds of an event it folds from the bus (bridge_core/scale/cluster.py,
"Joining"): a joining node loads the store and gets the last ``JOIN_BACK`` seconds of the stream, whose
events may or may not have been in the store when it read it; a node behind in the stream reads
transcripts the store has moved past its state (docs/scale-out.md)."""

from __future__ import annotations

from typing import Any

from ..bridge.transcripts import draft_out
from ..model import events as ev
from ..model.state import ConversationState


def seen(conv: ConversationState, e: Any) -> bool:
    """Is ``e`` already in ``conv`` (loaded from the store)? Only a transcript entry or a run's
    start could be folded twice (a start older than the active run's counts as held: it ended before);
    folding any other event again changes nothing."""
    t = type(e)
    if t is ev.UserMessageSent or t is ev.Notification or t is ev.MessageCompleted:
        mid, msgs = e.message_id, conv.messages
        at = next((i for i in range(len(msgs) - 1, -1, -1) if msgs[i].message_id == mid), None)
        if at is None:
            return False
        if t is ev.MessageCompleted and msgs[at].text != e.text:
            completes(conv, at, e)
        run = conv.run
        if t is ev.MessageCompleted and run is not None and e.run_id == run.run_id and e.message_id == run.message_id:
            run.draft = ev.Draft(e.text)
            run.completed = True
        return True
    if t is ev.RunStarted:
        run = conv.run
        if run is not None and (run.run_id == e.run_id or e.ts < run.started_at):
            # this run, or one that ended before it began (one run per conversation): a joining node folds the
            # stream's last seconds again, and an older start taking the active run's place, its end then
            # clearing it, left a run the load put back unclosed for good (chaos seed 2015)
            return True
        draft_out(conv, e.message_id)  # its saved draft, read as a message before this start (seed 2010)
        return False
    return False


def completes(conv: ConversationState, at: int, e: ev.MessageCompleted) -> None:
    """A completion whose message the transcript holds with another text: the run's saved draft (its
    message's row, drafts.py), read from the store by a node that had not folded the run's start (behind
    in the stream: chaos seeds 2001, 2003). The completion replaces it, as it replaces the row there."""
    msgs = conv.messages
    old = msgs[at]
    msgs[at] = ev.Message(message_id=old.message_id, role=old.role, text=e.text, ts=e.ts)
    if conv.keeper is not None:
        conv.keeper.grew(conv, msgs[at], old)
    if at == len(msgs) - 1 and e.text:
        conv.preview = e.text[:200]
