"""Golden frames: the lvmh codec and the rendering of shared events as session events."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import MultiDict

from bridge_core.model import events as ev
from bridge_core.model.errors import BadRequest
from lvmh_adapter import codec
from lvmh_adapter.codec import FrameError
from lvmh_adapter.render import Renderer
from lvmh_adapter.stream import _frames

SID = "01a22693-a4c3-719c-9d1e-dddddddddddd"


def test_plugin_frame_is_kept_as_sent():
    raw = '{"v":1,"sessionId":"%s","seq":7,"ts":1699999999999,"type":"message_end","message":{"role":"user","id":"u","text":"hi \\u00e9"}}' % SID
    frame = codec.decode_plugin_frame(raw)
    assert frame.raw is raw  # stored and served without re-encoding
    assert (frame.type, frame.session_id, frame.seq, frame.ts, frame.persisted) == ("message_end", SID, 7, 1699999999999, True)
    assert codec.decode_plugin_frame(raw.encode()).raw == raw
    upd = codec.decode_plugin_frame('{"v":1,"sessionId":"%s","seq":8,"ts":1,"type":"message_update","delta":"x"}' % SID)
    assert upd.persisted is False


def test_hello_seq_is_zero_whatever_was_sent():
    frame = codec.decode_plugin_frame(json.dumps({"v": 1, "type": "hello", "sessionId": SID, "ts": 1, "session": {}}))
    assert frame.seq == 0 and frame.type == "hello"


@pytest.mark.parametrize(
    "obj, code",
    [
        ({"v": 1, "sessionId": SID, "seq": 1, "ts": 1, "type": "hello"}, "invalid_frame"),  # no session
        ({"v": 1, "sessionId": SID, "seq": 1, "ts": 1, "type": "session_info", "session": []}, "invalid_frame"),
        ({"v": 1, "sessionId": SID, "seq": 2**53, "ts": 1, "type": "agent_start"}, "invalid_frame"),
        ({"sessionId": SID, "seq": 1, "ts": 1, "type": "agent_start"}, "version_mismatch"),
        ({"v": True, "sessionId": SID, "seq": 1, "ts": 1, "type": "agent_start"}, "version_mismatch"),
        ({"v": 1, "sessionId": "x" * 129, "seq": 1, "ts": 1, "type": "agent_start"}, "invalid_frame"),
        ({"v": 1, "sessionId": "a b", "seq": 1, "ts": 1, "type": "agent_start"}, "invalid_frame"),
    ],
)
def test_plugin_frame_errors(obj, code):
    with pytest.raises(FrameError) as info:
        codec.decode_plugin_frame(json.dumps(obj))
    assert info.value.code == code


def test_daemon_frames():
    w = json.loads(codec.welcome(SID, 42))
    assert {k: v for k, v in w.items() if k != "ts"} == {"v": 1, "type": "welcome", "sessionId": SID, "seq": 0, "lastSeq": 42}
    p = json.loads(codec.prompt(SID, "p1", "go"))
    assert {k: v for k, v in p.items() if k != "ts"} == {
        "v": 1, "type": "prompt", "sessionId": SID, "seq": 0, "promptId": "p1", "message": "go",
    }
    a = json.loads(codec.abort(SID))
    assert {k: v for k, v in a.items() if k != "ts"} == {"v": 1, "type": "abort", "sessionId": SID, "seq": 0}


def test_events_frame_and_chunking():
    raws = ['{"seq":%d}' % i for i in range(1, 4)]
    assert codec.events_frame(SID, 0, raws) == '{"type":"events","sessionId":"%s","after":0,"events":[%s]}' % (
        SID, ",".join(raws))
    items = [(i, '{"seq":%d}' % i) for i in range(1, 1202)]
    frames = [json.loads(f) for f in _frames(SID, 5, items)]
    assert [len(f["events"]) for f in frames] == [500, 500, 201]
    assert [f["after"] for f in frames] == [5, 500, 1000]


def test_browser_frames():
    assert codec.decode_browser_frame('{"type":"subscribe","sessionId":"%s"}' % SID) == codec.BrowserFrame(
        type="subscribe", session_id=SID)
    assert codec.decode_browser_frame('{"type":"unsubscribe"}').session_id is None
    with pytest.raises(FrameError):
        codec.decode_browser_frame('{"type":"subscribe","sessionId":""}')


@pytest.mark.parametrize(
    "query, expected",
    [({}, (0, 1000)), ({"after": "5"}, (5, 1000)), ({"limit": "20"}, (0, 20)), ({"limit": "100000"}, (0, 1000)),
     ({"after": "", "limit": ""}, (0, 1000))],
)
def test_events_query(query, expected):
    assert codec.events_query(MultiDict(query)) == expected


@given(st.text(max_size=30), st.text(max_size=30))
def test_events_query_only_bad_request(after, limit):
    try:
        a, n = codec.events_query(MultiDict({"after": after, "limit": limit}))
    except BadRequest:
        return
    assert 0 <= a <= codec.MAX_SEQ and 1 <= n <= codec.EVENTS_LIMIT_MAX


def test_session_info_normalises():
    info = codec.session_info({"name": 5, "cwd": "/x", "model": "m", "agent": "yes", "startedAt": 1.5, "extra": 1}, SID)
    assert info == {"id": SID, "name": None, "cwd": "/x", "model": "m", "provider": None, "agent": False, "repo": None,
                    "startedAt": 1}


# --- shared events -> lvmh session events ---------------------------------------------------------------


def test_render_a_demo_run():
    r = Renderer(lambda cid: {"id": cid, "model": "demo-small"})
    run = "r" * 32
    draft = f"draft-{run}"
    d = ev.Draft()
    events = [
        ev.UserMessageSent(conversation_id="c", message_id="u1", text="hi", run_id=run),
        ev.RunStarted(conversation_id="c", run_id=run, message_id=draft, model="demo-small"),
        ev.TextDelta(conversation_id="c", run_id=run, message_id=draft, delta="Hel", draft=d),
        ev.TextDelta(conversation_id="c", run_id=run, message_id=draft, delta="think", draft=d, kind="reasoning"),
        ev.ToolStarted(conversation_id="c", run_id=run, call_id="t1", tool_name="search", args={"q": 1}),
        ev.ToolProgress(conversation_id="c", run_id=run, call_id="t1", tool_name="search", partial="..."),
        ev.ToolFinished(conversation_id="c", run_id=run, call_id="t1", tool_name="search", status="failed",
                        duration_ms=3, error="boom", result_preview="x"),
        ev.InterimMessage(conversation_id="c", run_id=run, text="Hel", already_streamed=True),
        ev.TextDelta(conversation_id="c", run_id=run, message_id=draft, delta="lo", draft=d),
        ev.MessageCompleted(conversation_id="c", message_id=draft, text="lo", run_id=run),
        ev.RunFinished(conversation_id="c", run_id=run, status="completed", text="lo",
                       usage=ev.Usage(input_tokens=3, output_tokens=4)),
        ev.ModelChanged(model="demo-large", provider="demo", scope="conversation", conversation_id="c"),
        ev.ModelChanged(model="demo-large", provider="demo", scope="global"),
    ]
    out = [x for e in events for x in r.render(e)]
    full = {"thinking": None, "toolCalls": [], "toolCallId": None}
    assert out == [
        ("message_start", {"message": {"role": "user", "id": "u1"}}),
        ("message_end", {"message": {"role": "user", "id": "u1", "text": "hi", **full}}),
        ("agent_start", {"runId": run, "model": "demo-small"}),
        ("message_start", {"message": {"role": "assistant", "id": draft}}),
        ("message_update", {"delta": "Hel"}),
        ("tool_execution_start", {"toolCallId": "t1", "toolName": "search", "args": {"q": 1}}),
        ("tool_execution_update", {"toolCallId": "t1", "toolName": "search", "partial": "..."}),
        ("tool_execution_end", {"toolCallId": "t1", "toolName": "search", "isError": True, "resultPreview": "x",
                                "status": "failed", "durationMs": 3, "error": "boom"}),
        ("message_end", {"message": {"role": "assistant", "id": draft, "text": "Hel", **full}, "interim": True}),
        ("message_start", {"message": {"role": "assistant", "id": f"{draft}-1"}}),
        ("message_update", {"delta": "lo"}),
        ("message_end", {"message": {"role": "assistant", "id": f"{draft}-1", "text": "lo", **full}}),
        ("agent_end", {"usage": {"inputTokens": 3, "outputTokens": 4}, "status": "completed", "runId": run}),
        ("agent_settled", {"aborted": False}),
        ("session_info", {"session": {"id": "c", "model": "demo-small"}}),
    ]


def test_render_a_failed_run_closes_its_open_message():
    r = Renderer(lambda cid: {})
    run = "f" * 32
    out = r.render(ev.RunStarted(conversation_id="c", run_id=run, message_id="m"))
    out += r.render(ev.RunFinished(conversation_id="c", run_id=run, status="failed", error="demo failure", text="par"))
    assert out[-3:] == [
        ("message_end", {"message": {"role": "assistant", "id": "m", "text": "par", "thinking": None, "toolCalls": [],
                                     "toolCallId": None}}),
        ("agent_end", {"usage": {}, "status": "failed", "runId": run, "error": "demo failure"}),
        ("agent_settled", {"aborted": False}),
    ]


def test_render_a_notice_outside_a_run():
    r = Renderer(lambda cid: {})
    out = r.render(ev.MessageCompleted(conversation_id="c", message_id="n1", text="note", kind="notice"))
    assert [t for t, _ in out] == ["message_start", "message_end"] and out[1][1]["kind"] == "notice"
