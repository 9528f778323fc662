"""The checker's loss bound is judged from when a text was first sent, not from a later showing of it
(chaos seed 2003, `transcript_shorter_than_sent`: "a `conversation.open` showed more than the store
kept, with no kill after it").

What the history of that run showed: a run on n3 streamed "w1 ... w10" to every client by 27.42 s; the
draft was last saved at "w1 ... w6" (27.02 s, the one timer of every run's drafts); n3 was killed at
27.50 s, 0.36 s after "w7" was first sent: within the stated bound (``LOSS_BOUND``: the 1 s save interval
and its write). n2, which had folded the deltas, showed the run's text again in `conversation.open` at
44.89 s, 17 s after the kill: the checker judged the bound from that showing and found no kill near it.
"""

from __future__ import annotations

from tests.nemesis.checker import LOSS_BOUND
from tests.nemesis.history import Fault, Received
from tests.nemesis.test_checker import C, clean, kinds


def _resent(kill_at: float | None, first_sent: float = 6.2) -> object:
    """clean(), plus a run r3 whose "w1 w2 w3" a Pheby client got live at ``first_sent`` and again in a
    snapshot at 20 s, the store keeping "w1 w2"; a kill -9 of the run's node at ``kill_at``."""
    h = clean()
    live = [(6.0, {"type": "run.accepted", "conversation_id": C, "run_id": "r3"}),
            (6.0, {"type": "message.start", "conversation_id": C, "run_id": "r3", "message_id": "draft-r3"}),
            (6.0, {"type": "message.delta", "conversation_id": C, "message_id": "draft-r3", "text": "w1 w2"}),
            (first_sent, {"type": "message.delta", "conversation_id": C, "message_id": "draft-r3",
                          "text": "w1 w2 w3"})]
    for t, f in live:
        h.frames.append(Received("pheby-1", "pheby", 1, "n1", t, f))
    later = [(20.0, {"type": "conversation.history", "conversation_id": C, "messages": [],
                     "run": {"run_id": "r3", "message_id": "draft-r3", "text": "w1 w2 w3"}}),
             (21.0, {"type": "message.complete", "conversation_id": C, "message_id": "draft-r3", "text": "w1 w2"}),
             (21.0, {"type": "run.finished", "conversation_id": C, "run_id": "r3", "status": "failed"})]
    for t, f in later:
        h.frames.append(Received("pheby-1", "pheby", 2, "n2", t, f))
    for node in h.final.transcripts.values():
        node[C].append({"message_id": "draft-r3", "role": "assistant", "text": "w1 w2"})
    if kill_at is not None:
        h.faults.append(Fault("kill9", "n1", kill_at, kill_at + 3))
    return h


def test_a_text_shown_again_long_after_it_was_sent_is_judged_from_its_sending():
    assert kinds(_resent(kill_at=6.3)) == set()  # the snapshot at 20 s shows what was sent at 6.2 s


def test_a_text_sent_with_no_kill_within_the_bound_is_still_an_anomaly():
    assert kinds(_resent(kill_at=None)) == {"transcript_shorter_than_sent"}
    assert kinds(_resent(kill_at=6.2 + LOSS_BOUND + 1)) == {"transcript_shorter_than_sent"}


def test_a_snapshot_showing_text_never_sent_before_is_judged_from_itself():
    h = _resent(kill_at=6.3)
    h.frames = [r for r in h.frames if not (r.frame.get("type") == "message.delta" and r.frame.get("text") ==
                                            "w1 w2 w3")]
    assert kinds(h) == {"transcript_shorter_than_sent"}  # first shown at 20 s, 13.7 s after the kill


# --- a phone's deltas past an interrupted close: the stated bound, where no durable record held more --------

R = "r4"


def _interrupted(topology: str = "cluster", redis_at: float | None = 10.0, closed_at: float = 12.0,
                 kill_at: float = 6.3) -> object:
    """clean(), plus a run r4 whose deltas "w1 w2" (6.0 s) and " w3" (6.2 s) phone-1 got live; its node
    killed at ``kill_at``, Redis restarted at ``redis_at``, the run closed as interrupted with "w1 w2"
    (the draft) at ``closed_at``; the store keeping "w1 w2"."""
    from tests.nemesis.test_checker import lf

    h = clean()
    h.topology = topology
    for t, f in [(5.9, lf(14, "run.started", R)), (6.0, lf(15, "run.delta", R, text="w1 w2", kind="text")),
                 (6.2, lf(16, "run.delta", R, text=" w3", kind="text")),
                 (closed_at, lf(17, "run.completed", R, text="w1 w2", status="failed", error="interrupted by a restart",
                                finished=False))]:
        h.frames.append(Received("phone-1", "loomi", 1, "n3", t, f))
    h.frames.sort(key=lambda r: r.t)
    for node in h.final.transcripts.values():
        node[C].append({"message_id": f"draft-{R}", "role": "assistant", "text": "w1 w2"})
    h.faults.append(Fault("kill9", "n1", kill_at, kill_at + 3))
    if redis_at is not None:
        h.faults.append(Fault("redis_restart", "redis", redis_at, redis_at + 0.1))
    return h


def test_deltas_past_an_interrupted_close_the_stream_had_lost_are_within_the_bound():
    assert kinds(_interrupted()) == set()
    assert kinds(_interrupted(redis_at=None, closed_at=6.2 + 16.5)) == set()  # closed past what the stream keeps


def test_deltas_past_an_interrupted_close_a_durable_record_held_are_an_anomaly():
    both = {"deltas_incomplete", "transcript_contradicts_client"}
    assert kinds(_interrupted(redis_at=None)) == both  # the stream's last delta held " w3" at the close
    assert kinds(_interrupted(topology="embedded")) == both  # Loomi's journal holds every delta a phone got
    assert kinds(_interrupted(kill_at=6.2 + LOSS_BOUND + 1)) == both  # sent long before the kill: a saved draft
