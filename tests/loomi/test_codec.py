"""The pure codec: golden frames, splicing, round trips, garbage."""

from __future__ import annotations

import attrs
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.errors import BridgeError
from bridge_core.model.state import ConversationState
from loomi_adapter import codec
from loomi_adapter.protocol import PairHello, ResumeHello, parse_hello

TS = 1759123456.789


def frames(event, **extra):
    return [orjson.loads(codec.stamp(b, 7)) for b in codec.render(event, codec.Extra(**extra))]


def test_stamp_and_replayed_are_byte_splices():
    b = codec.body("run.delta", {"text": "x"}, task_id="t", run_id="r", ts=TS)
    f = codec.stamp(b, 10231)
    assert f.startswith(b'{"seq":10231,"event_id":"e_10231","v":1,')
    assert orjson.loads(f) == {"seq": 10231, "event_id": "e_10231", "v": 1, "ts": TS, "type": "run.delta",
                               "task_id": "t", "run_id": "r", "payload": {"text": "x"}}
    assert orjson.loads(codec.mark_replayed(f)) == dict(orjson.loads(f), replayed=True)


GOLDEN = [
    (
        ev.TextDelta(conversation_id="t1", run_id="r1", message_id="m", delta="Hel", kind="reasoning", iteration=2,
                     ts=TS),
        [{"type": "run.delta", "task_id": "t1", "run_id": "r1",
          "payload": {"run_id": "r1", "text": "Hel", "kind": "reasoning", "iteration": 2}}],
    ),
    (
        ev.InterimMessage(conversation_id="t1", run_id="r1", text="thinking", already_streamed=True, ts=TS),
        [{"type": "run.interim", "task_id": "t1", "run_id": "r1",
          "payload": {"run_id": "r1", "text": "thinking", "already_streamed": True}}],
    ),
    (
        ev.RunFinished(conversation_id="t1", run_id="r1", status="failed", error="boom", text="partial", ts=TS),
        [{"type": "run.completed", "task_id": "t1", "run_id": "r1",
          "payload": {"run_id": "r1", "status": "failed", "text": "partial", "error": "boom", "finished": False}},
         {"type": "run.failed", "task_id": "t1", "run_id": "r1",
          "payload": {"run_id": "r1", "error": "boom", "status": "failed"}}],
    ),
    (
        ev.ApprovalResolved(conversation_id="t1", run_id="r1", approval_id="a1", choice="timeout", accepted=False,
                            decided_by="timeout", surface="agent", ts=TS),
        [{"type": "approval.resolved", "task_id": "t1", "run_id": "r1",
          "payload": {"approval_id": "a1", "choice": "timeout", "decided_by": "timeout", "accepted": False,
                      "surface": "agent"}}],
    ),
    (
        ev.Notification(conversation_id=None, message_id="n1", text="cron done", title="Cron", category="diagnostic",
                        source="cron", requires_attention=True, ts=TS),
        [{"type": "notification", "task_id": None, "run_id": None,
          "payload": {"category": "diagnostic", "title": "Cron", "text": "cron done", "source": "cron",
                      "requires_attention": True}}],
    ),
    (
        ev.MessageCompleted(conversation_id="t1", message_id="m1", text="gateway notice", kind="notice", ts=TS),
        [{"type": "notification", "task_id": "t1", "run_id": None,
          "payload": {"category": "result", "title": "", "text": "gateway notice", "source": "agent",
                      "requires_attention": False}}],
    ),
    (ev.MessageCompleted(conversation_id="t1", message_id="m1", text="final", run_id="r1", ts=TS), []),
    (ev.ToolProgress(conversation_id="t1", run_id="r1", call_id="c", tool_name="x", partial="..", ts=TS), []),
    (ev.ModelChanged(model="m", provider="p", scope="global", ts=TS), []),
    (
        ev.ConversationDeleted(conversation_id="t1", ts=TS),
        [{"type": "task.deleted", "task_id": "t1", "run_id": None, "payload": {"task_id": "t1"}}],
    ),
]


@pytest.mark.parametrize("event,expected", GOLDEN)
def test_golden_frames(event, expected):
    got = frames(event)
    want = [dict(e, seq=7, event_id="e_7", v=1, ts=TS) for e in expected]
    assert got == want


@settings(max_examples=200, deadline=None)
@given(st.text(), st.text(min_size=1), st.text(min_size=1), st.sampled_from(["text", "reasoning"]),
       st.integers(0, 2**40) | st.booleans(), st.floats(0, 1e12, allow_nan=False) | st.integers(0, 2**40))
def test_a_delta_made_as_its_tail_is_the_body_of_the_envelope(delta, conv, run, kind, iteration, ts):
    """The streamed delta's frame, spliced from its values' JSON (codec.delta_tail: the hot path), is
    byte for byte the body ``codec.body`` encodes, without its ``{``."""
    e = ev.TextDelta(conversation_id=conv, run_id=run, message_id="m", delta=delta, kind=kind, iteration=iteration,
                     ts=ts)
    expected = codec.body("run.delta", {"run_id": run, "text": delta, "kind": kind, "iteration": iteration},
                          task_id=conv, run_id=run, ts=ts)
    assert codec.delta_tail(e) == expected[1:]
    assert codec.render(e) == [expected]


def test_run_completed_takes_the_final_message_when_the_run_has_no_text():
    e = ev.RunFinished(conversation_id="t", run_id="r", status="completed", ts=TS)
    (f,) = frames(e, final_text="from message.complete")
    assert f["payload"]["text"] == "from message.complete" and f["payload"]["finished"] is True


def test_task_frames_carry_the_task_shape():
    conv = ConversationState(conversation_id="t1", name="Plan", created_at=1.0, updated_at=2.0)
    conv.preview = "last words"
    (f,) = frames(ev.ConversationRenamed(conversation_id="t1", name="Plan", ts=TS), conv=conv)
    assert f["type"] == "task.updated"
    assert f["payload"] == {"task": {"task_id": "t1", "title": "Plan", "status": "idle", "created_at": 1.0,
                                     "updated_at": 2.0, "preview": "last words", "source": "demo"}}


def test_approval_choices_follow_the_request():
    e = ev.ApprovalRequested(conversation_id="t", run_id="r", approval_id="a", session_key="agent:main:x:dm:t",
                             command="rm", description="d", choices=("once", "deny"), smart_denied=True, ts=TS)
    (f,) = frames(e)
    assert [c["choice"] for c in f["payload"]["choices"]] == ["once", "deny"]
    assert f["payload"]["smart_denied"] is True and "agent:" not in orjson.dumps(f).decode()


# --- client frames ---------------------------------------------------------------------

ids = st.text(min_size=1, max_size=40)
REQUESTS = st.one_of(
    st.builds(codec.SessionSend, text=st.text(max_size=200), task_id=st.none() | ids, request_id=st.none() | ids),
    st.builds(codec.RunCancel, run_id=ids, request_id=st.none() | ids),
    st.builds(codec.RunPause, run_id=ids, request_id=st.none() | ids),
    st.builds(codec.RunResume, run_id=ids, request_id=st.none() | ids),
    st.builds(codec.ApprovalResolve, approval_id=ids, choice=st.sampled_from(ev.APPROVAL_CHOICES),
              reason=st.none() | st.text(max_size=50), request_id=st.none() | ids),
    st.builds(codec.ClarifyResolve, clarify_id=ids, response=st.text(max_size=50), request_id=st.none() | ids),
    st.builds(codec.TaskList, request_id=st.none() | ids, limit=st.integers(0, 1000),
              status_filter=st.none() | st.lists(st.sampled_from(codec.TASK_STATUSES), min_size=1).map(tuple)),
)


@settings(max_examples=300, deadline=None)
@given(REQUESTS)
def test_requests_round_trip(req):
    payload = {k: (list(v) if isinstance(v, tuple) else v) for k, v in attrs.asdict(req).items() if v is not None}
    raw = orjson.dumps({"v": 1, "type": codec.TYPE_OF[type(req)], "payload": payload})
    assert codec.decode_request(codec.parse_frame(raw)) == req
    command = codec.to_command(req)
    assert type(command) in cmd.COMMAND_TYPES
    if getattr(req, "request_id", None) is not None:
        assert command.request_id == req.request_id  # as it came: provenance is the command's Origin


def test_strict_types():
    bad = [
        {"v": 1, "type": "session.send", "payload": {"text": 1}},
        {"v": 1, "type": "session.send", "payload": {"text": "x", "request_id": 5}},
        {"v": 1, "type": "task.list", "payload": {"limit": True}},
        {"v": 1, "type": "task.list", "payload": {"limit": "5"}},
        {"v": 1, "type": "approval.resolve", "payload": {"approval_id": "a", "choice": ["once"]}},
        {"v": 1, "type": "session.send", "payload": {"text": "x", "request_id": ""}},
        {"v": 1, "type": "session.send", "payload": {"text": "x", "request_id": "r" * 129}},
    ]
    for frame in bad:
        with pytest.raises(BridgeError) as info:
            codec.decode_request(codec.parse_frame(orjson.dumps(frame)))
        assert info.value.code == "bad_request"
    with pytest.raises(BridgeError) as info:
        codec.parse_frame(b'{"v":2,"type":"ping"}')
    assert info.value.code == "version_mismatch"
    # unknown fields are ignored
    req = codec.decode_request(codec.parse_frame(b'{"type":"ping","seq":4,"payload":{"extra":1}}'))
    assert req == codec.Ping()


def test_hello_classification_never_echoes_secrets():
    with pytest.raises(BridgeError) as info:
        parse_hello(orjson.dumps({"type": "hello", "payload": {"token": 12345678, "device_info": "x"}}))
    assert "12345678" not in info.value.message and info.value.fatal
    hs = parse_hello(orjson.dumps({"type": "hello", "payload": {"token": "tok", "protocol_version": 1}}))
    assert isinstance(hs, PairHello) and "tok" not in repr(hs)
    hs = parse_hello(orjson.dumps(
        {"type": "hello", "payload": {"device_id": "d", "credential": "sekrit", "last_seq": 4,
                                      "device_info": {"model": "P", "os": "A", "app_version": "1"}}}))
    assert isinstance(hs, ResumeHello) and hs.last_seq == 4 and hs.info.model == "P" and "sekrit" not in repr(hs)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=200),
        st.text(max_size=200).map(str.encode),
        st.builds(lambda t, p: orjson.dumps({"v": 1, "type": t, "payload": p}),
                  st.sampled_from(list(codec.REQUEST_TYPES) + ["x"]), json_values),
    )
)
def test_garbage_only_ever_raises_bridge_errors(data):
    for hello in (True, False):
        try:
            if hello:
                parse_hello(data)
            else:
                codec.decode_request(codec.parse_frame(data))
        except BridgeError:
            pass


def test_a_runs_later_deltas_reuse_its_template_and_still_match_the_envelope():
    """codec.delta_tail keeps a template per run (its ids, kind and iteration spliced in): the run's next
    deltas, a kind or iteration that changes, another conversation under the same run id and a ``%`` in
    an id still give the body ``codec.body`` encodes."""
    for conv, run, kind, iteration, delta in [("c%d", "r%b", "text", 0, "a"), ("c%d", "r%b", "text", 0, "b%s"),
                                              ("c%d", "r%b", "reasoning", 0, "c"), ("c%d", "r%b", "text", 2, "d"),
                                              ("other", "r%b", "text", 2, "e")]:
        e = ev.TextDelta(conversation_id=conv, run_id=run, message_id="m", delta=delta, kind=kind,
                         iteration=iteration, ts=TS)
        expected = codec.body("run.delta", {"run_id": run, "text": delta, "kind": kind, "iteration": iteration},
                              task_id=conv, run_id=run, ts=TS)
        assert codec.delta_tail(e) == expected[1:]
