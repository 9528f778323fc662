"""The rule of loomi_adapter/runtexts.py on its own: a message's completion is preceded by a filler
``run.delta`` only when the text deltas rendered made a strict prefix of its text (over a socket:
tests/scale/test_loomi_lost_deltas.py)."""

from __future__ import annotations

import orjson

from bridge_core.model import events as ev
from loomi_adapter.runtexts import RunTexts


def _deltas(texts: RunTexts, words: list, kind: str = "text") -> None:
    draft = ""
    for w in words:
        draft += w
        texts.streamed(ev.TextDelta(conversation_id="c", run_id="r", message_id="m", delta=w, draft=draft, kind=kind,
                                    iteration=2))


def _done(text: str, run_id: str = "r") -> ev.MessageCompleted:
    return ev.MessageCompleted(conversation_id="c", message_id="m", text=text, run_id=run_id)


def test_the_rest_of_the_text_follows_deltas_that_fell_short():
    texts = RunTexts()
    _deltas(texts, ["w1", " w2"])
    (fill,) = texts.completed(_done("w1 w2 w3"))
    frame = orjson.loads(fill)
    assert (frame["type"], frame["task_id"], frame["run_id"]) == ("run.delta", "c", "r")
    assert frame["payload"] == {"run_id": "r", "text": " w3", "kind": "text", "iteration": 2}
    assert texts.final("r") == "w1 w2 w3" and texts.final("r") is None


def test_no_filler_for_whole_deltas_deltas_past_the_text_another_text_or_none_rendered():
    for words, text in ((["w1", " w2"], "w1 w2"), (["w1", " w2", " w3"], "w1 w2"), (["x1"], "w1 w2"), ([], "w1")):
        texts = RunTexts()
        _deltas(texts, words)
        assert texts.completed(_done(text)) == [], (words, text)
    texts = RunTexts()
    _deltas(texts, ["w1"], kind="reasoning")  # a reasoning delta is no part of the message's text
    assert texts.completed(_done("w1 w2")) == []


def test_a_message_completes_once_and_the_memory_is_bounded():
    texts = RunTexts(keep=2)
    _deltas(texts, ["w1"])
    assert texts.completed(_done("w1 w2")) != []
    assert texts.completed(_done("w1 w2")) == []  # delivered again: nothing more
    for i in range(3):
        texts.completed(_done("t", run_id=f"r{i}"))
    assert texts.final("r0") is None and texts.final("r2") == "t"
