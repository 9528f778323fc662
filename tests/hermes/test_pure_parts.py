"""The Hermes host's pure pieces, without a bridge or Hermes: approvals in Hermes's order,
session keys, how a turn's outcome names a run's end, the choices an approval offers."""

from __future__ import annotations

from agent_bridge_cli.hermes.chats import chat_from_key, on_platform, session_key
from agent_bridge_cli.hermes.decisions import ApprovalBook, approval_choices
from agent_bridge_cli.hermes.driver import end_status

KEY = "agent:main:pheby:dm:c1"


def test_answers_are_handed_over_oldest_first_per_session():
    book = ApprovalBook()
    book.add("a", KEY, "rm a")
    book.add("b", KEY, "rm b")
    book.add("c", KEY, "rm c")
    book.add("x", "agent:main:pheby:dm:c2", "rm x")  # another session: its own order
    assert book.is_next("a") and not book.is_next("b") and book.is_next("x")
    book.hold("c", "deny", "no")
    book.hold("b", "once", None)
    assert book.take_decided(KEY) is None  # the oldest is not decided: nothing goes yet
    book.forget("a")  # answered (or settled by Hermes)
    assert book.take_decided(KEY) == ("b", "once", None)
    assert book.take_decided(KEY) == ("c", "deny", "no")
    assert book.take_decided(KEY) is None and book.get("b") is None and book.get("c") is None
    assert book.is_next("x") and book.get("x").command == "rm x"


def test_an_outcome_matches_by_request_id_then_command_then_the_oldest():
    book = ApprovalBook()
    book.add("a", KEY, "rm a", request_id="req-1")
    book.add("b", KEY, "rm b", request_id="req-2")
    assert book.match(KEY, "rm a", "req-2") == "b"  # the request id wins over the command
    assert book.match(KEY, "rm b", None) == "b"
    assert book.match(KEY, "something else", "req-9") == "a"  # the oldest: Hermes 0.19.0 settles in order
    assert book.match("agent:main:pheby:dm:other", "rm a", None) is None


def test_forgetting_twice_or_an_unknown_id_is_harmless():
    book = ApprovalBook()
    book.add("a", KEY, "rm a")
    assert book.forget("a").command == "rm a"
    assert book.forget("a") is None and book.forget("never") is None
    assert book.match(KEY, "rm a", None) is None


def test_session_keys_are_hermes_dm_keys():
    assert session_key("pheby", "c1") == KEY
    assert chat_from_key(KEY, "pheby") == "c1"
    assert chat_from_key("agent:main:pheby:dm:c1:thread-7", "pheby") == "c1"
    assert chat_from_key(KEY, "loomi") == "" and chat_from_key("agent:main:pheby:group:g", "pheby") == ""
    assert on_platform(KEY, ("loomi", "pheby")) and not on_platform("agent:main:telegram:dm:9", ("pheby",))


def test_end_status_from_hermes_outcome():
    class Outcome:
        value = "CANCELLED"

    assert end_status("SUCCESS", stopped=False) == "completed"
    assert end_status("FAILURE", stopped=False) == "failed"
    assert end_status(Outcome(), stopped=False) == "cancelled"
    assert end_status("FAILURE", stopped=True) == "cancelled"  # /stop (or an interrupted turn) wins
    assert end_status(None, stopped=False) == "completed"


def test_approval_choices():
    assert approval_choices(allow_permanent=True, smart_denied=False) == ("once", "session", "always", "deny")
    assert approval_choices(allow_permanent=False, smart_denied=False) == ("once", "session", "deny")
    assert approval_choices(allow_permanent=True, smart_denied=True) == ("once", "deny")
