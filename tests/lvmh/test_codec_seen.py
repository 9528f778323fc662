"""The plugin frame decoder's memo of accepted session ids and types (codec._matches): bounded,
and never a way around the patterns."""

from __future__ import annotations

import orjson
import pytest

from lvmh_adapter import codec


def _frame(sid: object, ftype: object = "tool_execution_update", **extra) -> str:
    return orjson.dumps({"v": 1, "sessionId": sid, "seq": 1, "ts": 5, "type": ftype, **extra}).decode()


def test_many_session_ids_keep_the_memo_bounded():
    for i in range(codec._SEEN_MAX * 3):
        assert codec.decode_plugin_frame(_frame(f"s-{i}")).session_id == f"s-{i}"
    assert len(codec._SEEN_SIDS) <= codec._SEEN_MAX


@pytest.mark.parametrize("sid", ["", "-lead", "a" * 129, "a b", "é", 7, None, ["a"]])
def test_a_bad_session_id_is_refused_before_and_after_good_ones(sid):
    codec.decode_plugin_frame(_frame("good-1"))
    for _ in range(2):  # a refused value is never remembered
        with pytest.raises(codec.FrameError) as err:
            codec.decode_plugin_frame(_frame(sid))
        assert err.value.code == "invalid_frame"
    assert sid not in codec._SEEN_SIDS if isinstance(sid, str) else True


@pytest.mark.parametrize("ftype", ["Tool", "9x", "a-b", "x" * 65, 3, {"a": 1}])
def test_a_bad_type_is_refused_every_time(ftype):
    for _ in range(2):
        with pytest.raises(codec.FrameError):
            codec.decode_plugin_frame(_frame("good-2", ftype))


def test_the_envelope_rules_hold_on_the_fast_path():
    with pytest.raises(codec.FrameError) as err:
        codec.decode_plugin_frame(orjson.dumps({"v": True, "sessionId": "s", "seq": 1, "type": "x"}))
    assert err.value.code == "version_mismatch"
    for seq in (True, 1.0, 0, "1", codec.MAX_SEQ + 1):
        with pytest.raises(codec.FrameError):
            codec.decode_plugin_frame(orjson.dumps({"v": 1, "sessionId": "s", "seq": seq, "ts": 1, "type": "x"}))
    kept = _frame("s", "x")
    assert codec.decode_plugin_frame(kept).raw == kept  # a good frame is stored as it came
    assert codec.decode_plugin_frame(kept.encode()).raw == kept
    restamped = codec.decode_plugin_frame(orjson.dumps({"v": 1, "sessionId": "s", "seq": 2, "ts": True, "type": "x"}))
    assert restamped.ts != 1 and orjson.loads(restamped.raw)["ts"] == restamped.ts  # a bool ts is no clock
    assert codec.decode_plugin_frame(orjson.dumps({"v": 1.0, "sessionId": "s", "seq": 3, "ts": 2.5, "type": "x"})).ts == 2
