"""The spec's tricky sequences on Loomi's protocol object (loomi_adapter/protocol.py), synchronous, with a
fake clock: no socket, no loop, no sleep (tests/loomi/protocol_pair.py). The same sequences run over
real sockets in tests/loomi and tests/conformance."""

from __future__ import annotations

import orjson
import pytest

from bridge_core.model import events as ev
from bridge_core.model.commands import SendMessage
from bridge_core.model.errors import BridgeError, ConversationNotFound
from loomi_adapter import codec
from loomi_adapter.protocol import (CHECK, MAX_QUEUED_REQUESTS, REQUEST, Close, LoomiProtocol, ProtocolStateError,
                                    Settings, State)
from loomi_adapter.replay import frames_of

from .protocol_pair import Node


class Sent:
    """A core result of SendMessage, as Bridge.execute returns it."""

    def __init__(self, conversation_id: str, run_id: str):
        self.conversation_id = conversation_id
        self.run_id = run_id


def opened(node: Node, device_id: str = "d1", last_seq=None):
    d = node.devices.get(device_id) or node.pair(device_id)
    phone = node.phone()
    phone.hello(d, last_seq)
    return d, phone


def types(frames: list[dict]) -> list[str]:
    return [f["type"] for f in frames]


# --- the handshake -----------------------------------------------------------------------------------


def test_nothing_but_a_hello_opens_a_socket():
    node = Node()
    for first, code in ((b'{"v":1,"type":"ping","payload":{}}', "unauthorized"),
                        (b"not json", "invalid_json"),
                        (b'{"v":1,"type":"hello","payload":{"protocol_version":2,"token":"t"}}', "version_mismatch")):
        phone = node.phone()
        (close,) = phone.raw(first)
        assert isinstance(close, Close) and phone.proto.state is State.CLOSING
        (err,) = phone.frames()
        assert err["seq"] == 0 and err["type"] == "error"  # no device yet: seq 0
        assert err["payload"]["code"] == code and err["payload"]["fatal"] is True
        assert close.code == {"unauthorized": 4001, "invalid_json": 1008, "version_mismatch": 4003}[code]
    phone = node.phone()
    (close,) = phone.proto.receive_binary(0.0)
    assert close.code == 4001 and close.payload["message"] == "The first frame must be a hello"


def test_a_socket_without_a_hello_is_closed_at_its_deadline():
    node = Node()
    phone = node.phone()
    assert phone.proto.next_tick() == 9.0
    assert phone.proto.tick(8.99) == []
    (close,) = phone.proto.tick(9.0)
    assert close.code == 4002 and close.reason == "auth_timeout"
    assert phone.proto.next_tick() is None


def test_a_wrong_credential_is_refused_and_answers_nothing_after():
    node = Node()
    phone = node.phone()
    phone.send("hello", {"device_id": "nobody", "credential": "guess"})
    (err,) = phone.frames()
    assert err["payload"]["code"] == "unauthorized" and err["payload"]["fatal"] and phone.closes[0].code == 4001
    assert phone.send("ping") == [] and phone.frames() == []  # a closing socket is not served


def test_hello_ok_carries_the_apps_last_seq_and_the_replay_follows_above_it():
    node = Node()
    d, phone = opened(node)
    (ok,) = phone.frames()
    assert ok["type"] == "hello.ok" and ok["seq"] == 0 and ok["payload"]["truncated"] is False  # a new device: 0
    for i in range(3):
        node.notify(f"n{i}")
    phone.send("ping")
    live = phone.frames()
    assert [(f["type"], f["seq"]) for f in live] == [("notification", 1), ("notification", 2),
                                                      ("notification", 3), ("pong", 4)]
    # reconnect reporting nothing: hello.ok has the device's current seq, nothing is replayed
    phone2 = node.phone()
    phone2.hello(d)
    (ok,) = phone2.frames()
    assert ok["seq"] == 4 and ok["payload"]["truncated"] is False
    # reconnect reporting seq 1: hello.ok says 1 (never a new seq), then events 2 and 3, marked replayed
    phone3 = node.phone()
    phone3.hello(d, last_seq=1)
    got = phone3.frames()
    assert [(f["type"], f["seq"]) for f in got] == [("hello.ok", 1), ("notification", 2), ("notification", 3)]
    assert got[1:] == [dict(f, replayed=True) for f in live[1:3]]  # the original frames, byte for byte
    phone3.send("ping")
    # live above everything given: 5 and 6 went to the errors that closed the two older sockets (replaced)
    assert [(f["type"], f["seq"]) for f in phone3.frames()] == [("pong", 7)]
    assert [(f["payload"]["code"], f["seq"]) for f in phone.frames() + phone2.frames()] == [("replaced", 5),
                                                                                          ("replaced", 6)]


def test_truncated_only_when_an_event_above_last_seq_is_gone():
    node = Node(window=4)
    d, phone = opened(node)
    phone.frames()
    for i in range(6):
        node.notify(f"n{i}")  # seqs 1..6; the window keeps 3..6
    phone.frames()
    for last_seq, truncated, replayed in ((2, False, [3, 4, 5, 6]), (1, True, [3, 4, 5, 6]), (6, False, [])):
        p = node.phone()
        p.hello(d, last_seq=last_seq)
        got = p.frames()
        assert got[0]["seq"] == last_seq and got[0]["payload"]["truncated"] is truncated
        assert [f["seq"] for f in got[1:]] == replayed


def test_a_last_seq_above_anything_given_is_truncated_and_moves_the_numbering_up():
    node = Node()
    d, phone = opened(node, last_seq=10_000)
    (ok,) = phone.frames()
    assert ok["seq"] == 10_000 and ok["payload"]["truncated"] is True
    node.notify("after")
    assert [f["seq"] for f in phone.frames()] == [10_001]  # the app keeps every frame that follows


def test_a_second_hello_of_a_device_replaces_its_older_socket():
    node = Node()
    d, first = opened(node)
    first.frames()
    second = node.phone()
    second.hello(d)
    assert first.proto.state is State.CLOSING and [c.code for c in first.closes] == [4000]
    (err,) = first.frames()
    assert err["type"] == "error" and err["payload"] == {"code": "replaced", "fatal": True,
                                                        "message": "This device connected again on another socket"}
    assert types(second.frames()) == ["hello.ok"]
    node.notify("n")
    assert first.frames() == [] and types(second.frames()) == ["notification"]  # events go to the new socket only
    assert first.send("session.send", {"text": "x", "request_id": "r"}) == [] and first.jobs == []
    third = node.phone()  # the old one, already closing, is not closed twice
    third.hello(d)
    assert [c.code for c in first.closes] == [4000] and [c.code for c in second.closes] == [4000]


# --- requests --------------------------------------------------------------------------------------


def test_a_repeated_request_id_is_answered_with_the_first_result_and_runs_once():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    assert phone.send("session.send", {"text": "once", "request_id": "same"}) == [REQUEST]
    (job,) = phone.jobs
    assert job.command == SendMessage(text="once", request_id="same")
    phone.proto.done(job, Sent("t1", "r1"))
    (first,) = phone.frames()
    assert first["payload"] == {"request_id": "same", "ok": True, "result": {"task_id": "t1", "run_id": "r1"}}
    phone.jobs.clear()
    phone.send("session.send", {"text": "once", "request_id": "same"})
    (again,) = phone.jobs
    assert again.command is None and again.joined is None  # nothing to run
    (ack,) = phone.frames()
    assert ack["payload"] == first["payload"] and ack["seq"] == first["seq"] + 1  # a new seq


def test_a_repeat_while_the_first_runs_is_answered_when_it_ends():
    node = Node()
    d, first = opened(node)
    first.send("session.send", {"text": "slow", "request_id": "dup"})
    (running,) = first.jobs
    second = node.phone()  # the phone reconnects while its request runs, and sends it again
    second.hello(d)
    second.send("session.send", {"text": "slow", "request_id": "dup"})
    (waiting,) = second.jobs
    assert waiting.command is None and waiting.joined is running.pending
    answers = []
    waiting.joined.then(lambda ok, value: answers.append((ok, value)))
    first.proto.done(running, Sent("t1", "r1"))
    assert answers == [(True, {"task_id": "t1", "run_id": "r1"})]
    second.proto.joined(waiting, *answers[0])
    assert [(f["type"], f["payload"].get("result")) for f in second.frames()] == [
        ("hello.ok", None), ("ack", {"task_id": "t1", "run_id": "r1"})]
    third = node.phone()
    third.hello(d)
    third.send("session.send", {"text": "slow", "request_id": "dup"})
    (cached,) = third.jobs
    assert cached.command is None


def test_a_failed_request_is_forgotten_so_a_retry_runs_it():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    phone.send("session.send", {"task_id": "nope", "text": "x", "request_id": "r1"})
    phone.proto.failed(phone.jobs.pop(), ConversationNotFound())
    (err,) = phone.frames()
    assert err["payload"] == {"code": "task_not_found", "message": "Conversation not found", "fatal": False,
                              "request_id": "r1"}
    phone.send("session.send", {"task_id": "nope", "text": "x", "request_id": "r1"})
    (retry,) = phone.jobs
    assert retry.command is not None  # it runs again
    phone.proto.interrupted(retry)  # the socket went while it ran: a repeat later runs it again too
    phone.send("session.send", {"task_id": "nope", "text": "x", "request_id": "r1"})
    assert phone.jobs[-1].command is not None


def test_requests_without_an_id_are_answered_only_when_they_fail_and_task_list_always():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    phone.send("run.cancel", {"run_id": "r9"})
    phone.proto.done(phone.jobs.pop(), "r9")
    assert phone.frames() == []
    phone.send("task.list", {"request_id": "l1"})
    phone.proto.done(phone.jobs.pop(), [])
    (res,) = phone.frames()
    assert res["type"] == "task.list.result" and res["payload"] == {"request_id": "l1", "tasks": []}


def test_too_many_requests_waiting_are_refused_not_queued():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    proto = phone.proto
    for i in range(MAX_QUEUED_REQUESTS + 1):  # the server's worker takes none meanwhile
        proto.receive(orjson.dumps({"v": 1, "type": "run.cancel", "payload": {"run_id": "r", "request_id": f"q{i}"}}),
                      0.0)
    assert len(proto.waiting) == MAX_QUEUED_REQUESTS
    (err,) = phone.frames()
    assert err["payload"]["code"] == "rate_limited" and err["payload"]["request_id"] == f"q{MAX_QUEUED_REQUESTS}"
    assert err["payload"]["message"] == "Too many requests in flight"


def test_a_bad_frame_on_an_open_socket_is_answered_and_never_fatal():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    for frame in ({"v": 2, "type": "ping"}, {"v": 1, "type": "nope"}, {"v": 1, "type": "hello", "payload": {}},
                  {"v": 1, "type": "session.send", "payload": {"text": 5, "request_id": "r"}}):
        assert phone.raw(orjson.dumps(frame)) == []
    assert [f["payload"]["code"] for f in phone.frames()] == ["version_mismatch", "unknown_type", "bad_request",
                                                             "bad_request"]
    phone.proto.receive_binary(node.now)
    (err,) = phone.frames()
    assert err["payload"] == {"code": "bad_request", "message": "Binary frames are reserved", "fatal": False}
    assert phone.proto.state is State.OPEN


def test_a_flood_is_answered_with_rate_limited_and_pongs_are_exempt():
    node = Node(Settings(rate=100.0, burst=200.0))
    d, phone = opened(node)
    phone.frames()
    for _ in range(250):
        phone.send("ping")
    for _ in range(20):
        phone.send("pong")
    got = phone.frames()
    assert types(got).count("pong") == 200
    limited = [f for f in got if f["type"] == "error"]
    assert len(limited) == 50 and all(f["payload"]["code"] == "rate_limited" and not f["payload"]["fatal"]
                                      for f in limited)
    assert phone.proto.rate_limited == 50
    node.now += 0.05  # five tokens back
    for _ in range(6):
        phone.send("ping")
    assert types(phone.frames()) == ["pong"] * 5 + ["error"]


# --- the heartbeat ---------------------------------------------------------------------------------


def test_a_ping_every_25_s_and_three_missed_pongs_close_the_socket():
    node = Node()
    d, phone = opened(node)
    phone.frames()
    proto = phone.proto
    assert proto.next_tick() == 25.0 and proto.tick(24.9) == []
    node.advance(25.0)
    assert [(f["type"], f["seq"]) for f in phone.frames()] == [("ping", 1)]  # a ping takes a seq
    assert proto.next_tick() == 35.0  # its pong deadline
    node.advance(10.0)
    assert proto.heartbeat.missed == 1 and proto.state is State.OPEN
    phone.send("pong")  # any pong resets the count
    assert proto.heartbeat.missed == 0
    for t in (50.0, 75.0, 100.0):
        node.advance(t - node.now)
        assert types(phone.frames()) == ["ping"]
    node.advance(9.9)
    assert proto.state is State.OPEN and proto.heartbeat.missed == 2
    (close,) = node.advance(0.1)  # 110: the third ping in a row without a pong
    assert close.code == 4008 and close.reason == "heartbeat_timeout"
    (err,) = phone.frames()
    assert err["payload"]["code"] == "heartbeat_timeout" and err["payload"]["fatal"] is True


def test_a_device_revoked_or_taken_elsewhere_is_closed_at_its_next_ping():
    node = Node()
    for gone, code in (("revoked", 4004), ("replaced", 4000)):
        d, phone = opened(node, device_id=gone)
        phone.frames()
        node.gone[gone] = gone
        assert phone.proto.tick(node.now + 25.0) == [CHECK]
        (close,) = phone.proto.checked(node.now + 25.0, gone)
        assert close.code == code
        assert types(phone.frames()) == ["error"]  # no ping went out: the fatal error, numbered and queued


# --- the state machine ------------------------------------------------------------------------------


def test_illegal_moves_raise():
    proto = LoomiProtocol()
    with pytest.raises(ProtocolStateError):
        proto.refuse(BridgeError("x"))  # nothing to refuse before a hello
    proto.receive(orjson.dumps({"v": 1, "type": "hello", "payload": {"device_id": "d", "credential": "c"}}), 0.0)
    assert proto.state is State.AUTHENTICATING
    with pytest.raises(ProtocolStateError):
        proto.receive(b'{"type":"ping"}', 0.0)  # the server reads nothing while the registry answers
    d = Node().pair("d")
    proto.open("d", d.log.resume(None), next_seq=lambda: 1, requests=d.requests, now=0.0)
    with pytest.raises(ProtocolStateError):
        proto.open("d", d.log.resume(None), next_seq=lambda: 1, requests=d.requests, now=0.0)
    proto.fail(BridgeError("x"))
    with pytest.raises(ProtocolStateError):
        proto.refuse(BridgeError("x"))
    proto.closed()
    assert proto.state is State.CLOSED and proto.receive(b"{}", 0.0) == [] and proto.tick(1e9) == []


# --- the one seq rule: what the node stores rebuilds what each device got --------------------------------


def test_frames_rebuilt_from_the_stored_rows_are_the_frames_each_device_got():
    node = Node()
    a, pa = opened(node, "a")
    b, pb = opened(node, "b")
    got: dict[str, list[dict]] = {"a": [], "b": []}
    for i in range(4):  # a takes a reply seq between events, b does not: their offsets differ
        node.publish(ev.RunFinished(conversation_id="t", run_id=f"r{i}", status="failed", error="x", ts=1.0))
        pa.send("ping")
        got["a"] += [f for f in pa.frames() if f["type"] != "hello.ok"]
        got["b"] += [f for f in pb.frames() if f["type"] != "hello.ok"]
    assert len(node.stored) == 8  # each event's two bodies stored once, whatever the number of devices
    for name, phone in (("a", pa), ("b", pb)):
        rebuilt = [orjson.loads(f) for _, f in frames_of(node.stored, node.marks[name])]
        assert rebuilt == [f for f in got[name] if f["type"] != "pong"]
    assert node.marks["b"] == [(1, 0)] and len(node.marks["a"]) == 4


def test_replayed_frames_come_from_the_one_place_a_replay_is_made():
    node = Node()
    d, phone = opened(node)
    node.notify("x")
    frame = [f for f in phone.proto.frames_to_send() if b'"notification"' in f][0]
    res = d.log.resume(0)
    assert res.frames == [codec.mark_replayed(frame)]
