"""A TextDelta is immutable all through: it keeps the cumulative text as it was at that delta,
whatever the run's draft does next (more deltas, a non-append edit)."""

from __future__ import annotations

import attrs
import pytest

from bridge_core.model import events as ev


def delta(draft, piece: str) -> ev.TextDelta:
    return ev.TextDelta(conversation_id="c", run_id="r", message_id="m", delta=piece, draft=draft)


def test_each_delta_keeps_its_own_cumulative_text():
    d = ev.Draft()
    seen = []
    for piece in ("He", "llo", ", ", "world"):
        d.append(piece)
        seen.append(delta(d, piece))
    assert [e.text for e in seen] == ["He", "Hello", "Hello, ", "Hello, world"]
    assert [e.draft.length for e in seen] == [2, 5, 7, 12]
    d.set("Hi")  # a non-append edit of the draft (Hermes' markdown fix-up) starts afresh
    edited = delta(d, "")
    assert edited.text == "Hi" and seen[-1].text == "Hello, world" and seen[0].text == "He"


def test_the_event_holds_no_mutable_draft():
    d = ev.Draft("x")
    e = delta(d, "x")
    assert type(e.draft) is ev.TextSoFar and isinstance(e.draft, tuple)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        e.draft = ev.Draft()  # type: ignore[misc]
    assert not hasattr(e.draft, "append") and not hasattr(e.draft, "set")
    assert delta("abc", "c").text == "abc"  # from the events' JSON form: a plain string
    assert ev.TextDelta(conversation_id="c", run_id="r", message_id="m", delta="").text == ""
    with pytest.raises(TypeError):
        delta(42, "")


def test_the_state_fold_follows_the_latest_delta():
    from bridge_core.model.state import ConversationState

    conv = ConversationState(conversation_id="c", name="n")
    conv.apply(ev.RunStarted(conversation_id="c", run_id="r", message_id="m"))
    d = ev.Draft()
    for piece in ("a", "b", "c"):
        d.append(piece)
        conv.apply(delta(d, piece))
    d.append("d")  # appended, not yet published: the state shows what was published
    assert conv.run.text == "abc"


def test_the_streamed_delta_is_the_event_the_keyword_call_makes():
    """``ev.streamed_delta`` (RunContext.delta's event, by position) makes what ``TextDelta(...)`` makes:
    every field equal, the draft a snapshot that keeps its text, the repr and the JSON form the same."""
    from bridge_core.model import serialize

    d = ev.Draft()
    for kind, iteration, piece in (("text", 0, "He"), ("reasoning", 3, "llo"), ("text", 1, "")):
        d.append(piece)
        made = ev.streamed_delta("c", "r", "m", piece, d, kind, iteration)
        assert type(made) is ev.TextDelta and type(made.draft) is ev.TextSoFar
        kw = ev.TextDelta(conversation_id="c", run_id="r", message_id="m", delta=piece, draft=d, kind=kind,
                          iteration=iteration, ts=made.ts)
        assert made == kw and repr(made) == repr(kw) and made.text == kw.text == d.text()
        assert [getattr(made, a.name) for a in attrs.fields(ev.TextDelta)] == [
            getattr(kw, a.name) for a in attrs.fields(ev.TextDelta)]
        assert serialize.to_dict(made) == serialize.to_dict(kw)
    before = made.text
    d.append("more")
    assert made.text == before and made.draft.length == len(before)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        made.delta = "x"  # type: ignore[misc]
