"""A node that rendered none of a message's deltas counts what went out from the stored frames
(loomi_adapter/runtexts.py ``sent`` and ``marks``, journal.py ``stored_run_text`` exact; over processes:
tests/scale/test_loomi_closed_elsewhere.py)."""

from __future__ import annotations

import orjson

from bridge_core.model import events as ev
from loomi_adapter.journal import stored_run_text, text_after
from loomi_adapter.runtexts import RunTexts


def _delta(texts: RunTexts, message: str, draft: str, ts: float) -> None:
    texts.streamed(ev.TextDelta(conversation_id="c", run_id="r", message_id=message, delta=draft[-4:], draft=draft,
                                ts=ts))


def _done(text: str) -> ev.MessageCompleted:
    return ev.MessageCompleted(conversation_id="c", message_id="m", text=text, run_id="r")


def _tail(run: str, ts: float, text: str) -> bytes:
    payload = {"run_id": run, "text": text, "kind": "text"}
    return orjson.dumps({"v": 1, "ts": ts, "type": "run.delta", "task_id": "t", "run_id": run, "payload": payload})[1:]


def test_the_stored_frames_count_only_where_none_of_the_deltas_was_rendered_here():
    asked: list = []

    def sent(e):
        asked.append(e.message_id)
        return "tok tok "

    texts = RunTexts(sent=sent)
    (fill,) = texts.completed(_done("tok tok tok end"))
    assert orjson.loads(fill)["payload"] == {"run_id": "r", "text": "tok end", "kind": "text", "iteration": 0}
    _delta(texts, "m", "tok ", 1.0)
    assert len(texts.completed(_done("tok tok"))) == 1 and asked == ["m"]  # rendered here: no query
    for said in (None, "tok tok tok end", "x"):  # unknown, all of it, not a prefix
        assert RunTexts(sent=lambda e, s=said: s).completed(_done("tok tok tok end")) == [], said


def test_a_mark_is_stored_once_per_move_of_a_streaming_message():
    texts = RunTexts()
    assert texts.marks() == []
    _delta(texts, "m", "tok ", 1.0)
    _delta(texts, "m", "tok tok ", 2.0)
    _delta(texts, "k", "x ", 2.5)
    assert texts.marks() == [("m", "r", 8, 2.0), ("k", "r", 2, 2.5)]
    assert texts.marks() == []  # nothing moved
    _delta(texts, "m", "tok tok tok ", 3.0)
    texts.completed(ev.MessageCompleted(conversation_id="c", message_id="k", text="x ", run_id="r"))
    assert texts.marks() == [("m", "r", 12, 3.0)]


def test_a_moved_mark_is_given_again_only_when_the_next_prune_would_delete_the_one_given():
    texts = RunTexts()
    _delta(texts, "m", "tok ", 1.0)
    _delta(texts, "k", "x ", 1.5)
    assert texts.marks(due=0.5) == [("m", "r", 4, 1.0), ("k", "r", 2, 1.5)]  # none given yet: given
    _delta(texts, "m", "tok tok ", 2.0)
    _delta(texts, "k", "x x ", 2.5)
    assert texts.marks(due=1.2) == [("m", "r", 8, 2.0)]  # k's mark (1.5) outlives the next prune: still good
    assert texts.marks(due=1.9) == [("k", "r", 4, 2.5)]  # now it would not: the newest given
    assert texts.marks(due=9.0) == []  # nothing moved since: a mark not moved is not given again


def test_exact_counts_past_the_drafts_or_a_marks_own_delta_only():
    tails = [_tail("r", ts, text) for ts, text in ((2.0, "tok "), (3.0, "tok "), (4.0, "t"))]
    assert text_after(tails, "r", 2.5) == "tok t" and text_after(tails, "r", 2.5, True) is None  # its delta not there
    assert text_after(tails, "r", 3.0, True) == "t"
    assert text_after(tails[:1] + tails, "r", 2.0) == "tok t" and text_after(tails[:1] + tails, "r", 2.0, True) is None

    class Store:
        def __init__(self, draft: tuple, marks: list):
            self.draft, self.marks = draft, marks

        def query(self, sql: str, params: tuple = ()) -> list:
            if "loomi_frames" in sql:
                return [("a:1", b) for b in tails]
            return self.marks if "loomi_marks" in sql else []

        def query_one(self, sql: str, params: tuple = ()) -> tuple:
            return self.draft

    text = "tok " * 9 + "tok tok tok t"  # the run's start pruned: 9 deltas before the rows
    past = Store(("tok " * 20, 9.0), [])  # a draft past the rows (the origin held its last deltas)
    assert stored_run_text(past, "r") == "tok " * 20 and stored_run_text(past, "r", exact=("m", text)) is None
    at = Store(("tok " * 10, 3.0), [])  # the draft's own delta in the rows
    assert stored_run_text(at, "r", exact=("m", text)) == "tok " * 10 + "t"
    marked = Store(("tok " * 20, 9.0), [("a:1", 40, 3.0)])  # a mark: 40 characters up to the delta of 3.0
    assert stored_run_text(marked, "r", exact=("m", text)) == "tok " * 10 + "t"
    assert stored_run_text(Store(("tok " * 20, 9.0), [("a:1", 40, 2.5)]), "r", exact=("m", text)) is None
    # a mark whose delta its source's rows no longer hold, nor any delta of the run after it: they were pruned past
    # it, and it is of the last delta that source rendered (a new mark comes before a prune deletes the delta of one
    # that moved since). What went out there, alone (chaos seed 3310: swept, then not counted, a filler twice)
    assert stored_run_text(Store(("tok " * 20, 9.0), [("b:2", 40, 3.0)]), "r", exact=("m", text)) == "tok " * 10
    assert stored_run_text(Store(("tok " * 20, 9.0), [("a:1", 48, 5.0)]), "r", exact=("m", text)) == "tok " * 12
    assert stored_run_text(Store(("tok " * 20, 9.0), [("b:2", 99, 3.0)]), "r", exact=("m", text)) is None  # past it
