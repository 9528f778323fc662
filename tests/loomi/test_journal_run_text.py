"""What Loomi's replay rows hold of a run's text, offered to the core after a crash
(loomi_adapter/journal.py ``run_text``; bridge_core/bridge/drafts.py ``DurableText``). The wire side
(phones replaying the rows after a kill -9, the transcript agreeing) is tests/nemesis's seed 4102."""

from __future__ import annotations

from bridge_core.model import events as ev
from loomi_adapter import codec
from loomi_adapter.journal import run_text


def _tails(*events) -> list[bytes]:
    """The rows' bodies, as the registry stores them (without their ``{``)."""
    codec.prepare()
    return [b[1:] for e in events for b in codec.RENDERERS[type(e)](e, codec.Extra())]


def _delta(run_id: str, piece: str, kind: str = "text") -> ev.TextDelta:
    return ev.TextDelta(conversation_id="c1", run_id=run_id, message_id=f"draft-{run_id}", delta=piece, kind=kind)


def test_a_runs_text_is_its_text_deltas_from_its_start():
    started = ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1")
    other = ev.RunStarted(conversation_id="c2", run_id="r2", message_id="draft-r2")
    tails = _tails(started, _delta("r1", "w1 "), other, _delta("r2", "x1 "), _delta("r1", "thinking", "reasoning"),
                   _delta("r1", "w2 \"quoted\" é"), _delta("r1", "w3"))
    assert run_text(tails, "r1") == 'w1 w2 "quoted" éw3'
    assert run_text(tails, "r2") == "x1 "
    assert run_text(tails, "r3") is None


def test_rows_without_the_runs_start_hold_not_all_of_it():
    """The oldest rows pruned (a window holds the newest events only): not offered, the draft counts."""
    started = ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1")
    tails = _tails(started, _delta("r1", "w1 "), _delta("r1", "w2"))
    assert run_text(tails[1:], "r1") is None
    assert run_text(tails[:1], "r1") is None  # started, nothing said yet
    assert run_text([b'"type":"run.delta", garbled'] + tails, "r1") == "w1 w2"
