"""The spec's tricky sequences on the plugin and browser sockets (docs/lvmh.md, Transport 1 and 3),
driven through the sans-I/O protocol object and the session book (tests/lvmh/protocol_pair.py):
no socket, no loop, a fake clock. The same sequences over real sockets: test_plugin_ws.py,
test_browser_ws.py, test_inflight.py."""

from __future__ import annotations

import pytest

from lvmh_adapter import errors
from lvmh_adapter.auth import Principal
from lvmh_adapter.protocol import MAX_ERROR_FRAMES, PluginProtocol, PluginState, ProtocolStateError

from .protocol_pair import Browser, Daemon

SID = "pair-session-1"
WORKER = Principal("worker", SID)


def start(p, sid=SID, seq=1):
    return p.event(sid, "message_start", seq, message={"role": "assistant", "id": f"m{seq}"})


def delta(p, seq, text, sid=SID):
    return p.event(sid, "message_update", seq, delta=text)


def end(p, seq, text, mid="m1", sid=SID):
    return p.event(sid, "message_end", seq, message={"role": "assistant", "id": mid, "text": text})


# --- the handshake ------------------------------------------------------------------------------------


def test_hello_first_then_welcome_with_the_highest_stored_seq():
    d = Daemon()
    p = d.plugin()
    [err] = p.event(SID, "agent_start", 1)
    assert err["code"] == "hello_expected" and err["refSeq"] == 1 and p.closed is None
    welcome = p.connect(SID, name="tricky")
    assert welcome["type"] == "welcome" and welcome["lastSeq"] == 0 and welcome["sessionId"] == SID
    assert p.state.state is PluginState.READY
    assert d.bridge.conversations[SID].name == "tricky" and d.bridge.conversations[SID].source == "lvmh"


def test_no_hello_by_the_deadline_closes_4001_and_not_a_moment_before():
    d = Daemon(hello_timeout=10.0)
    p = d.plugin()
    d.advance(9.999)
    assert p.closed is None and p.state.deadline == 10.0
    d.advance(0.001)
    assert p.out == [{"type": "error", "code": "auth_timeout", "error": "No hello within the deadline"}]
    assert p.closed == (errors.CLOSE_HELLO_TIMEOUT, b"no hello")
    assert p.state.state is PluginState.CLOSED


def test_a_hello_in_time_ends_the_deadline():
    d = Daemon(hello_timeout=10.0)
    p = d.plugin()
    d.advance(5)
    p.connect(SID)
    assert p.state.deadline is None
    d.advance(60)
    assert p.closed is None


def test_another_protocol_version_in_the_hello_is_fatal_but_not_after_it():
    d = Daemon()
    p = d.plugin()
    [err] = p.send({"v": 2, "type": "hello", "sessionId": SID, "seq": 0, "ts": 1, "session": {}})
    assert err["code"] == "version_mismatch" and p.closed == errors.FATAL_CLOSE_DEFAULT
    q = d.plugin()
    q.connect(SID)
    [err] = q.send({"v": 2, "type": "agent_start", "sessionId": SID, "seq": 1, "ts": 1})
    assert err["code"] == "version_mismatch" and q.closed is None


def test_reconnect_resends_after_last_seq_stored_and_shown_once():
    d = Daemon()
    p = d.plugin()
    p.connect(SID)
    for seq, etype in enumerate(["agent_start", "turn_start", "agent_end"], 1):
        p.event(SID, etype, seq)
    p.close(1006, b"")  # the network drops; the plugin did not see what was stored
    q = d.plugin()
    assert q.connect(SID)["lastSeq"] == 3
    for seq, etype in enumerate(["agent_start", "turn_start", "agent_end", "agent_settled"], 1):
        q.event(SID, etype, seq)  # a plugin that resends more than it must
    assert d.log.stored(SID) == [(1, "agent_start"), (2, "turn_start"), (3, "agent_end"), (4, "agent_settled")]
    assert [s for s, _ in d.browsers.shown[SID]] == [1, 2, 3, 4]
    assert [e for _, e in d.source.translated] == ["agent_start", "turn_start", "agent_end", "agent_settled"]


def test_deltas_are_shown_never_stored_and_their_seqs_never_reused():
    d = Daemon()
    p = d.plugin()
    p.connect(SID)
    start(p)
    delta(p, 2, "Hel")
    delta(p, 3, "lo")
    assert d.log.stored(SID) == [(1, "message_start")]
    assert d.browsers.shown[SID] == [(1, "message_start"), (2, "message_update"), (3, "message_update")]
    assert d.log.reserved[SID] >= 3  # recorded ahead: a closing event the daemon writes never reuses them
    browser = Browser(d)
    browser.send({"type": "subscribe", "sessionId": SID})  # mid-stream: the open message's text so far
    assert browser.out[0]["type"] == "inflight" and browser.out[0]["text"] == "Hello"
    p.close(1006, b"")
    q = d.plugin()
    assert q.connect(SID)["lastSeq"] == 1  # the deltas were never stored
    delta(q, 2, "Hel")  # resent after the welcome: shown (a browser that saw them skips them: inflight seq)
    end(q, 4, "Hello")
    delta(q, 3, "lo")  # a delta below the last stored event: late, never shown
    assert d.browsers.shown[SID][3:] == [(2, "message_update"), (4, "message_end")]
    assert d.log.stored(SID) == [(1, "message_start"), (4, "message_end")]
    assert list(d.book.records[SID].daemon_seqs(2)) == [5, 6]  # the daemon's own events: above every seq used


def test_a_frame_for_another_session_is_refused_and_the_connection_goes_on():
    d = Daemon()
    p = d.plugin()
    p.connect(SID)
    [err] = p.event("other-session", "agent_start", 1)
    assert err["code"] == "wrong_session" and p.closed is None
    assert p.event(SID, "agent_start", 1) == [] and d.log.stored(SID) == [(1, "agent_start")]


def test_a_repeated_hello_rebinds_with_a_new_welcome():
    d = Daemon()
    p = d.plugin()
    p.connect(SID, name="first")
    p.event(SID, "agent_start", 1)
    welcome = p.connect(SID, name="renamed")
    assert welcome["type"] == "welcome" and welcome["lastSeq"] == 1 and p.state.state is PluginState.READY
    assert d.source.infos[-1] == (SID, "renamed")


# --- claims -------------------------------------------------------------------------------------------


def test_the_same_credential_takes_the_session_over_and_closes_the_old_socket():
    d = Daemon()
    old = d.plugin()
    old.connect(SID)
    new = d.plugin()
    assert new.connect(SID)["type"] == "welcome"
    assert old.closed == (errors.CLOSE_REPLACED, b"replaced by a newer connection") and old.replaced
    assert d.book.records[SID].conn is new
    assert old.event(SID, "agent_start", 1) == [] and d.log.stored(SID) == []  # the old one is deaf


def test_another_credential_cannot_take_a_live_session_but_may_once_it_is_gone():
    d = Daemon()
    user = d.plugin()
    user.connect(SID)
    worker = d.plugin(WORKER)
    err = worker.connect(SID)
    assert err["code"] == "session_taken" and worker.closed[0] == errors.CLOSE_CONFLICT
    assert d.book.records[SID].conn is user
    user.close(1006, b"")
    again = d.plugin(WORKER)
    assert again.connect(SID)["type"] == "welcome" and d.book.records[SID].conn is again


def test_a_worker_may_say_hello_only_for_its_own_session():
    d = Daemon()
    w = d.plugin(WORKER)
    err = w.connect("someone-else")
    assert err["code"] == "forbidden" and w.closed[0] == errors.CLOSE_FORBIDDEN
    assert "someone-else" not in d.book.records


def test_a_bridge_conversation_id_cannot_be_claimed():
    d = Daemon()
    d.bridge.create_conversation("mine", source="demo", conversation_id="conv-1")
    p = d.plugin()
    err = p.connect("conv-1")
    assert err["code"] == "conflict" and p.closed[0] == errors.CLOSE_CONFLICT
    assert "conv-1" not in d.book.records


# --- limits -------------------------------------------------------------------------------------------


def test_bad_frames_are_answered_up_to_the_cap_then_dropped_silently():
    d = Daemon()
    p = d.plugin()
    p.connect(SID)
    answered = [p.send("not json") for _ in range(MAX_ERROR_FRAMES + 5)]
    assert sum(len(a) for a in answered) == MAX_ERROR_FRAMES and p.closed is None
    assert p.event(SID, "agent_start", 1) == [] and d.log.stored(SID) == [(1, "agent_start")]


def test_past_the_quota_an_event_is_refused_and_the_second_closes():
    d = Daemon(quota=300)
    p = d.plugin()
    p.connect(SID)
    assert p.event(SID, "agent_start", 1) == []
    big = "x" * 400
    [err] = end(p, 2, big)
    assert err["code"] == "quota_exceeded" and err["refSeq"] == 2 and p.closed is None
    [err] = end(p, 3, big)
    assert err["code"] == "quota_exceeded" and p.closed == (errors.CLOSE_QUOTA, b"storage quota exceeded")
    assert d.log.stored(SID) == [(1, "agent_start")]


# --- the state table ------------------------------------------------------------------------------------


def test_illegal_moves_of_the_connection_raise():
    s = PluginProtocol()
    with pytest.raises(ProtocolStateError):
        s.welcomed()  # no hello yet
    s.close()
    with pytest.raises(ProtocolStateError):
        s.welcomed()
    s.close()  # closing twice is no move
    assert s.state is PluginState.CLOSED


def test_frames_while_binding_are_refused():
    s = PluginProtocol()
    s.receive('{"v":1,"type":"hello","sessionId":"s-1","seq":0,"ts":1,"session":{}}')
    assert s.state is PluginState.BINDING
    action = s.receive('{"v":1,"type":"agent_start","sessionId":"s-1","seq":1,"ts":1}')
    assert action.code == "hello_expected"


# --- the browser --------------------------------------------------------------------------------------


def test_a_browser_holds_one_subscription_at_a_time():
    d = Daemon()
    b = Browser(d)
    b.send({"type": "subscribe", "sessionId": "a"})
    b.send({"type": "subscribe", "sessionId": "b"})
    assert b.subscription == "b"
    b.send({"type": "unsubscribe", "sessionId": "a"})  # not the one it holds: kept
    assert b.subscription == "b"
    b.send({"type": "unsubscribe"})
    assert b.subscription is None
    b.send({"type": "bogus"})
    assert b.out and b.out[-1]["type"] == "error"


# --- the bridge's own conversations -----------------------------------------------------------------------


def test_the_book_numbers_a_bridge_conversation_and_reserves_ahead():
    d = Daemon()
    d.bridge.create_conversation("mine", source="demo", conversation_id="conv-1")
    for i in range(3):
        d.book.emit("conv-1", "agent_start", {}, TS_S + i)
    assert d.log.stored("conv-1") == [(1, "agent_start"), (2, "agent_start"), (3, "agent_start")]
    assert d.log.reserved["conv-1"] >= 3 and d.link.frames == []  # a bridge conversation is never relayed


TS_S = 1759123456.0
