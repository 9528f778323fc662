"""Pheby's protocol objects (pheby_adapter/protocol.py) driven synchronously: frames in, frames out, a fake clock.

The spec's tricky sequences without a socket (tests/pheby/protocol_pair.py is the harness): the
handshake's failures and what they tell the lockout, the hello's deadline, too_large, the rate
limit, a reply before the broadcasts it causes, conversation.delete's one frame, draft pacing.
The same rules over real sockets: tests/pheby/test_handshake.py, test_errors.py, test_chat.py and
tests/conformance/test_pheby_*.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.errors import AlreadyResolved, ConversationNotFound
from pheby_adapter.errors import IllegalTransition
from pheby_adapter.pacing import DraftPacer
from pheby_adapter.protocol import Close, State
from tests.pheby.protocol_pair import SECRET, ProtocolPair

MIB = 1024 * 1024


def without_ts(frames: list[dict]) -> list[dict]:
    return [{k: v for k, v in f.items() if k != "ts"} for f in frames]


def error(code: str, message: str, request_id: str | None = None) -> dict:
    frame: dict = {"type": "error"}
    if request_id is not None:
        frame["request_id"] = request_id
    frame["error"] = {"code": code, "message": message}
    return frame


# --- the handshake -----------------------------------------------------------------------------


def test_a_hello_with_the_secret_opens_the_connection():
    pair = ProtocolPair()
    c = pair.connect(hello=False)
    assert c.state is State.AWAIT_HELLO
    assert c.send({"type": "hello", "secret": SECRET, "protocol_version": 1, "request_id": "h1"}) == []
    [ready] = c.received()
    assert ready.pop("ts").endswith("+00:00")
    assert ready == {"type": "ready", "protocol_version": 1, "server": "pheby", "request_id": "h1"}
    assert c.state is State.OPEN and c.closed is None and c.auth_failures == 0
    c.send({"type": "ping", "request_id": "p"})
    assert without_ts(c.received()) == [{"type": "pong", "request_id": "p"}]


@pytest.mark.parametrize("first, request_id, message", [
    ({"type": "hello", "secret": "guess", "protocol_version": 1, "request_id": "h"}, "h", "Invalid secret"),
    ({"type": "hello", "secret": SECRET[:-1], "protocol_version": 1}, None, "Invalid secret"),
    ({"type": "hello", "secret": 5, "protocol_version": 1}, None, "Invalid secret"),
    ({"type": "hello", "protocol_version": 1}, None, "Invalid secret"),
    ({"type": "conversation.list", "request_id": "l"}, "l", "First frame must be hello"),
    ("not json", None, "First frame must be hello"),
    ("[1]", None, "First frame must be hello"),
])  # fmt: skip
def test_a_failed_hello_is_unauthorized_closes_and_counts_for_the_lockout(first, request_id, message):
    pair = ProtocolPair()
    c = pair.connect(hello=False)
    assert c.send(first) == []
    assert without_ts(c.received()) == [error("unauthorized", message, request_id)]
    assert c.closed == Close(1008, b"unauthorized") and c.auth_failures == 1 and c.state is State.CLOSED
    # closed: nothing more is read, nothing is sent
    assert c.send({"type": "hello", "secret": SECRET, "protocol_version": 1}) == [] and c.received() == []
    pair.publish(ev.ConversationCreated(conversation_id="c1", name="x"))
    assert c.received() == []


def test_a_binary_first_frame_is_a_failed_hello():
    c = ProtocolPair().connect(hello=False)
    c.send_binary()
    assert without_ts(c.received()) == [error("unauthorized", "First frame must be hello")]
    assert c.closed == Close(1008, b"unauthorized") and c.auth_failures == 1


@pytest.mark.parametrize("version", [2, 0, True, "1", None])
def test_another_protocol_version_is_refused_without_counting_as_a_failed_hello(version):
    c = ProtocolPair().connect(hello=False)
    c.send({"type": "hello", "secret": SECRET, "protocol_version": version, "request_id": "v"})
    assert without_ts(c.received()) == [error("version_mismatch", "Server speaks protocol_version 1", "v")]
    assert c.closed == Close(1008, b"version_mismatch") and c.auth_failures == 0 and c.state is State.CLOSED


def test_a_hello_while_the_address_is_locked_out_is_not_judged():
    """The lockout tripped while this socket waited (other sockets' failed hellos): even the right secret is
    answered rate_limited and closed, and that answer is not one more failure."""
    pair = ProtocolPair()
    c = pair.connect(hello=False)
    pair.locked = True
    c.send({"type": "hello", "secret": SECRET, "protocol_version": 1, "request_id": "h"})
    assert without_ts(c.received()) == [error("rate_limited", "Too many failed attempts; try again later")]
    assert c.closed == Close(1008, b"rate_limited") and c.auth_failures == 0 and c.state is State.CLOSED
    d = pair.connect(hello=False)
    d.send_binary()  # a binary frame alike
    assert d.closed == Close(1008, b"rate_limited") and d.auth_failures == 0
    pair.locked = False
    assert pair.connect().state is State.OPEN  # the lockout lifted: the right secret opens again


def test_no_hello_before_the_deadline_is_auth_timeout():
    pair = ProtocolPair(hello_timeout=10.0)
    c = pair.connect(hello=False)
    pair.now += 9.999
    assert c.tick() == [] and c.received() == [] and c.state is State.AWAIT_HELLO
    pair.now += 0.001
    c.tick()
    assert without_ts(c.received()) == [error("auth_timeout", "No hello within 10 seconds")]
    assert c.closed == Close(1008, b"auth_timeout") and c.auth_failures == 0
    opened = pair.connect()
    pair.now += 3600
    assert opened.tick() == [] and opened.state is State.OPEN  # the deadline is the hello's only


def test_a_second_hello_is_a_bad_request_and_the_connection_goes_on():
    c = ProtocolPair().connect()
    c.send({"type": "hello", "secret": "x", "protocol_version": 1, "request_id": "again"})
    assert without_ts(c.received()) == [error("bad_request", "Already authenticated", "again")]
    assert c.state is State.OPEN and c.closed is None


# --- frames ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("hello", [False, True])
def test_a_frame_over_2_mib_is_too_large_then_closed_1009(hello):
    c = ProtocolPair().connect(hello=hello)
    c.send(json.dumps({"type": "ping", "pad": "é" * MIB}))  # a million characters, two bytes each in UTF-8
    assert without_ts(c.received()) == [error("too_large", "Frame larger than 2 MiB")]
    assert c.closed == Close(1009, b"too_large") and c.auth_failures == 0 and c.state is State.CLOSED


def test_a_frame_of_exactly_2_mib_is_read():
    c = ProtocolPair().connect()
    frame = '{"type":"ping","pad":""}'
    c.send(frame[:-2] + "x" * (2 * MIB - len(frame)) + '"}')
    assert [f["type"] for f in c.received()] == ["pong"]


def test_the_token_bucket_answers_rate_limited_and_refills():
    pair = ProtocolPair(rate=1.0, burst=3.0)
    c = pair.connect()
    for i in range(3):
        c.send({"type": "ping", "request_id": f"p{i}"})
    c.send("not json")  # refused before the bucket: spends no token
    c.send({"type": "conversation.list", "request_id": "l"})
    assert without_ts(c.received()) == [
        {"type": "pong", "request_id": "p0"}, {"type": "pong", "request_id": "p1"}, {"type": "pong", "request_id": "p2"},
        error("invalid_json", "Frame is not valid JSON"),
        error("rate_limited", "Too many messages; slow down", "l"),
    ]  # fmt: skip
    assert c.commands == [] and c.protocol.rate_limited == 1 and c.state is State.OPEN
    c.send_binary()  # a binary frame spends no token either
    assert without_ts(c.received()) == [error("invalid_json", "Binary frames are not supported")]
    pair.now += 1.0
    assert c.send({"type": "conversation.list", "request_id": "l2"}) == [cmd.ListConversations(request_id="l2")]


# --- one request at a time: the reply first ------------------------------------------------------


def test_a_reply_comes_before_the_broadcasts_its_request_causes():
    pair = ProtocolPair()
    a, b = pair.connect(), pair.connect()
    [create] = a.send({"type": "conversation.create", "name": "New chat", "request_id": "c"})
    assert create == cmd.CreateConversation(name="New chat", request_id="c")
    created = ev.ConversationCreated(conversation_id="c1", name="New chat")

    class Conv:
        conversation_id, name = "c1", "New chat"

    pair.run(a, create, result=Conv(), during=[created])
    assert a.received() == [
        {"type": "conversation.created", "conversation_id": "c1", "name": "New chat", "request_id": "c"},
        {"type": "conversation.updated", "conversation_id": "c1", "name": "New chat"},
    ]
    assert b.received() == [{"type": "conversation.updated", "conversation_id": "c1", "name": "New chat"}]


def test_nothing_passes_a_reply_that_is_not_known_yet():
    pair = ProtocolPair()
    a = pair.connect()
    [send] = a.send({"type": "chat.send", "conversation_id": "c1", "text": "hi", "request_id": "s"})
    slot = pair.begin(a, send)
    pair.publish(ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1", request_id="s",
                               origin=cmd.Origin(surface="pheby", connection="p1")))
    assert a.received() == []  # the reply's place holds what follows
    pair.finish(a, slot, result=object())  # chat.send: no reply of its own, the broadcast answers
    assert a.received() == [
        {"type": "run.accepted", "conversation_id": "c1", "run_id": "r1", "request_id": "s"},
        {"type": "message.start", "conversation_id": "c1", "run_id": "r1", "message_id": "draft-r1"},
    ]


def test_conversation_delete_is_one_frame_for_each_client():
    """The requester gets the reply alone (with its request_id), every other client the broadcast; a deletion
    of another conversation meanwhile still reaches the requester."""
    pair = ProtocolPair()
    a, b = pair.connect(), pair.connect()
    [delete] = a.send({"type": "conversation.delete", "conversation_id": "c1", "request_id": "d"})
    pair.run(a, delete, result="c1", during=[ev.ConversationDeleted(conversation_id="c1", request_id="d"),
                                             ev.ConversationDeleted(conversation_id="c2")])
    assert a.received() == [
        {"type": "conversation.deleted", "conversation_id": "c1", "request_id": "d"},
        {"type": "conversation.deleted", "conversation_id": "c2"},
    ]
    assert b.received() == [{"type": "conversation.deleted", "conversation_id": "c1"},
                            {"type": "conversation.deleted", "conversation_id": "c2"}]
    pair.publish(ev.ConversationDeleted(conversation_id="c1"))  # not executing any more: broadcast to all
    assert a.received() == [{"type": "conversation.deleted", "conversation_id": "c1"}]


def test_a_failed_request_replies_with_a_pheby_error_code_and_no_detail():
    pair = ProtocolPair()
    a = pair.connect()
    [answer] = a.send({"type": "approval.respond", "approval_id": "a1", "choice": "once", "request_id": "r"})
    pair.run(a, answer, error=AlreadyResolved("settled"))
    assert without_ts(a.received()) == [error("approval_not_found", "Approval already resolved", "r")]
    [answer] = a.send({"type": "clarify.respond", "clarify_id": "k1", "response": "x", "request_id": "q"})
    pair.run(a, answer, error=AlreadyResolved("settled"))
    assert without_ts(a.received()) == [error("clarify_not_found", "Clarification already answered", "q")]
    [opened] = a.send({"type": "conversation.open", "conversation_id": "nope", "request_id": "o"})
    pair.run(a, opened, error=ConversationNotFound("Conversation not found"))
    assert without_ts(a.received()) == [error("conversation_not_found", "Conversation not found", "o")]
    [lst] = a.send({"type": "conversation.list", "request_id": "l"})
    pair.run(a, lst, error=KeyError("/secret/path"))
    assert without_ts(a.received()) == [error("internal_error", "Internal error", "l")]
    assert a.state is State.OPEN


def test_the_states_allow_only_their_transitions():
    pair = ProtocolPair()
    fresh = pair.connect(hello=False)
    with pytest.raises(IllegalTransition):
        fresh.protocol.execute(cmd.ListConversations())  # nothing runs before the hello
    c = pair.connect()
    c.protocol.execute(cmd.ListConversations())
    assert c.state is State.EXECUTING
    with pytest.raises(IllegalTransition):
        c.protocol.execute(cmd.ListConversations())  # one request at a time
    with pytest.raises(IllegalTransition):
        c.send({"type": "ping"})  # the next frame is read once the reply is in place
    c.protocol.done()
    assert c.state is State.OPEN and c.protocol.executing is None
    c.send(json.dumps({"pad": "x" * (2 * MIB)}))
    assert c.state is State.CLOSED
    with pytest.raises(IllegalTransition):
        c.protocol.execute(cmd.ListConversations())
    assert IllegalTransition("x").code == "internal_error"


# --- broadcasts and drafts ------------------------------------------------------------------------


def test_a_broadcast_is_rendered_once_for_every_client_and_never_before_the_hello():
    pair = ProtocolPair()
    a, b = pair.connect(), pair.connect()
    waiting = pair.connect(hello=False)
    pair.publish(ev.ConversationRenamed(conversation_id="c1", name="n"))
    [ra], [rb] = a.raw(), b.raw()
    assert ra is rb and json.loads(ra) == {"type": "conversation.renamed", "conversation_id": "c1", "name": "n"}
    assert waiting.received() == []
    pair.publish(ev.UserMessageSent(conversation_id="c1", message_id="m", text="x"))  # no Pheby frame
    pair.publish(ev.TextDelta(conversation_id="c1", run_id="r", message_id="m", delta="x", draft=ev.Draft(),
                              kind="reasoning"))  # no Pheby frame either
    assert a.received() == [] and pair.timers == {}


def _delta(draft: ev.Draft, piece: str, mid: str = "draft-r1") -> ev.TextDelta:
    draft.append(piece)
    return ev.TextDelta(conversation_id="c1", run_id="r1", message_id=mid, delta=piece, draft=draft)


def _texts(frames: list[dict]) -> list[tuple[str, str]]:
    return [(f["type"], f.get("text", "")) for f in frames]


def test_drafts_go_out_first_at_once_then_the_newest_once_per_interval():
    pair = ProtocolPair(pacer=DraftPacer(0.040, tick=0))
    c = pair.connect()
    d = ev.Draft()
    pair.publish(_delta(d, "a"))
    assert _texts(c.received()) == [("message.delta", "a")]  # the first at once
    pair.advance(0.010)
    pair.publish(_delta(d, "b"))
    pair.advance(0.010)
    pair.publish(_delta(d, "c"))
    assert c.received() == [] and abs(pair.timers["draft-r1"] - (pair.now + 0.020)) < 1e-9
    pair.advance(0.020)
    assert _texts(c.received()) == [("message.delta", "abc")]  # one interval after the last push: the newest
    pair.advance(1.0)
    pair.publish(_delta(d, "d"))
    assert _texts(c.received()) == [("message.delta", "abcd")]  # a full interval since: at once again


def test_a_slow_client_gets_only_the_newest_draft_and_none_once_its_message_completed():
    pair = ProtocolPair(pacer=DraftPacer(0.040, tick=0))
    fast, slow = pair.connect(), pair.connect()
    d = ev.Draft()
    pair.publish(_delta(d, "a"))
    assert _texts(fast.received()) == [("message.delta", "a")]  # slow reads nothing
    for piece in "bcd":
        pair.advance(0.040)
        pair.publish(_delta(d, piece))
        pair.advance(0.040)
        assert _texts(fast.received())[-1:] == [("message.delta", d.text())]
    # the slow client's queue: its first draft was replaced in place by the newest push
    assert [i.key for i in slow.queue] == [("draft", "draft-r1")]
    pair.publish(ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="abcd!"))
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="completed"))
    assert _texts(slow.received()) == [("message.complete", "abcd!"), ("run.finished", "")]  # no stale draft
    assert _texts(fast.received()) == [("message.complete", "abcd!"), ("run.finished", "")]
    assert pair.timers == {}


def test_a_first_draft_not_yet_sent_still_goes_out_before_its_message_completes():
    pair = ProtocolPair(pacer=DraftPacer(0.040, tick=0))
    slow = pair.connect()
    d = ev.Draft()
    pair.publish(_delta(d, "a"))
    pair.publish(_delta(d, "b"))  # due later; the message completes first
    pair.publish(ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="ab"))
    assert _texts(slow.received()) == [("message.delta", "a"), ("message.complete", "ab")]
    assert pair.timers == {}  # the due push cancelled


def test_a_runs_end_ends_its_draft_and_a_due_push_waits_for_its_longer_draft():
    pair = ProtocolPair(pacer=DraftPacer(0.040, min_interval=0.010, full_chars=64, tick=0))
    c = pair.connect()
    d = ev.Draft()
    pair.publish(_delta(d, "tok "))
    pair.publish(_delta(d, "tok "))  # 8 characters: due after 5 ms (the 10 ms floor)
    pair.publish(_delta(d, "x" * 4000))  # by then thousands: their own wait is far longer
    pair.advance(0.010)
    assert _texts(c.received()) == [("message.delta", "tok ")] and "draft-r1" in pair.timers  # rechecked: later
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="failed", error="boom"))
    assert pair.timers == {}
    assert [f["type"] for f in c.received()] == ["run.finished"]


def test_the_pure_modules_load_no_io():
    """Imported alone, Pheby's codec, renderer, protocol and pacing load no aiohttp, no asyncio, no store, no
    bridge (the import-linter contract checks the import graph; this, what Python actually loads)."""
    code = ("import sys\n"
            "import pheby_adapter.codec, pheby_adapter.render, pheby_adapter.protocol, pheby_adapter.pacing\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('aiohttp', 'asyncio') or m in\n"
            "    ('bridge_core.bridge.bridge', 'bridge_core.bridge.store', 'bridge_core.bridge.hub', 'bridge_core.kit.security'))\n"
            "print(','.join(bad))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
