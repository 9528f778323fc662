"""A run in a conversation the final reads never covered is not judged against an empty store (chaos seed
2003: a phone's new-task send lost its answer when its socket closed, so the scenario never learned the
conversation and never read it; the checker took the unread message for one the store kept empty and
reported the run every phone got complete, 3,368 chars, as ``transcript_contradicts_client``). The
scenario learns such a conversation from the ``task.created`` phones were told, and reads it at the end."""

from __future__ import annotations

from tests.nemesis.checker import check
from tests.nemesis.history import Received
from tests.nemesis.scenario import told_created
from tests.nemesis.test_checker import C, clean, lf

ELSEWHERE = [{"message_id": "u9", "role": "user", "text": "elsewhere"}]


def unread() -> object:
    """The clean history with its conversation left out of every node's final read, another one read."""
    h = clean()
    for node in h.final.transcripts:
        h.final.transcripts[node] = {"c2": list(ELSEWHERE)}
    h.final.active = {"n1": {"c2": None}}
    return h


def test_a_run_of_a_conversation_never_read_is_not_held_against_an_empty_store():
    assert [a for a in check(unread()) if a.kind == "transcript_contradicts_client"] == []


def test_a_read_conversation_holding_less_than_the_completion_still_contradicts_it():
    h = unread()
    h.final.transcripts["n1"][C] = [{"message_id": "u1", "role": "user", "text": "hi"},
                                    {"message_id": "draft-r1", "role": "assistant", "text": ""}]
    found = [a for a in check(h) if a.kind == "transcript_contradicts_client"]
    assert any(a.client == "phone-1" and "run.completed of r1: 'Echo: hi' where the store holds ''" in a.detail
               for a in found), found


def test_the_conversation_of_a_send_that_lost_its_answer_is_learned_from_task_created():
    h = clean()
    assert told_created(h) == []
    created = lf(14, "task.created", None, True, task={"task_id": "c-lost", "title": "/bench 842 2000"})
    created["task_id"] = "c-lost"
    h.frames.append(Received("phone-1", "loomi", 1, "n3", 3.7, created))
    h.frames.append(Received("phone-1", "loomi", 1, "n3", 3.8, dict(created, seq=15)))
    assert told_created(h) == ["c-lost"]
