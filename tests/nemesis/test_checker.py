"""The checker on small hand-made histories: a clean one (a phone, a Pheby client and a browser
watching two runs, one with an approval, the phone away for the second and replayed) has no
anomaly, and each change that stands for one fault yields its kind."""

from __future__ import annotations

import copy

import pytest

from tests.nemesis.checker import KINDS, LOSS_BOUND, check
from tests.nemesis.history import Fault, Final, History, Op, Received

C = "c1"


def lf(seq: int, type_: str, run=None, replayed=False, **payload) -> dict:
    f = {"v": 1, "seq": seq, "event_id": f"e_{seq}", "ts": 0.0, "type": type_, "task_id": C, "run_id": run,
         "payload": dict(payload, run_id=run) if run else payload}
    if replayed:
        f["replayed"] = True
    return f


def hello(seq: int, truncated=False) -> dict:
    return {"v": 1, "seq": seq, "type": "hello.ok", "task_id": None, "run_id": None,
            "payload": {"device_id": "d1", "truncated": truncated, "protocol_version": 1}}


def ev(seq: int, type_: str, **fields) -> dict:
    return {"v": 1, "sessionId": C, "seq": seq, "ts": 0, "type": type_, **fields}


def stored_events() -> list:
    return [
        ev(1, "message_start", message={"role": "user", "id": "u1"}),
        ev(2, "message_end", message={"role": "user", "id": "u1", "text": "hi"}),
        ev(3, "agent_start", runId="r1"),
        ev(4, "message_start", message={"role": "assistant", "id": "draft-r1"}),
        ev(7, "message_end", message={"role": "assistant", "id": "draft-r1", "text": "Echo: hi"}),
        ev(8, "agent_end", runId="r1", status="completed"),
        ev(9, "approval_request", approvalId="a1", runId="r2"),
        ev(10, "approval_resolved", approvalId="a1", choice="once", accepted=True, decidedBy="remote"),
    ]


def clean() -> History:
    h = History(seed=1, topology="hand-made", t0=0.0)
    ops = [
        Op(0, "pheby-1", "create", "n1", 0.0, {}, "ok", 0.1, {"created": C, "conversation": C}),
        Op(1, "phone-1", "pair", "n2", 0.2, {"conn": 0}, "ok", 0.3, {}),
        Op(2, "pheby-1", "chat", "n1", 1.0, {"conversation": C}, "ok", 1.1, {"run": "r1", "conversation": C}),
        Op(3, "phone-1", "connect", "n3", 3.0, {"conn": 1, "last_seq": 5}, "ok", 3.1, {}),
        Op(4, "pheby-1", "chat", "n1", 2.0, {"conversation": C}, "ok", 2.1, {"run": "r2", "conversation": C}),
        Op(5, "phone-1", "resolve", "n3", 3.2, {"approval": "a1"}, "ok", 3.3, {"accepted": True}),
        Op(6, "phone-1", "final", "n3", 5.0, {"conn": 1}, "ok", 5.1, {}),  # its barrier: a ping answered
    ]
    h.ops = ops
    _phone(h)
    _pheby(h)
    _browser(h)
    transcript = [{"message_id": "u1", "role": "user", "text": "hi"},
                  {"message_id": "draft-r1", "role": "assistant", "text": "Echo: hi"},
                  {"message_id": "u2", "role": "user", "text": "/approve ls"},
                  {"message_id": "draft-r2", "role": "assistant", "text": "Ran: ls"}]
    h.final = Final(transcripts={"n1": {C: transcript}, "n2": {C: copy.deepcopy(transcript)}},
                    active={"n1": {C: None}}, lvmh={"n1": {C: stored_events()}, "n3": {C: stored_events()}},
                    views={"browser-1": {C: stored_events()}})
    return h


def _phone(h: History) -> None:
    """phone-1 on n2 sees r1 live; away during r2, it reconnects to n3 and gets it replayed, then live."""
    phone = [(0, 0.3, hello(0)),
             (0, 1.1, lf(1, "session.message", "r1", message_id="u1", role="user", text="hi")),
             (0, 1.2, lf(2, "run.started", "r1")),
             (0, 1.3, lf(3, "run.delta", "r1", text="Echo:", kind="text")),
             (0, 1.4, lf(4, "run.delta", "r1", text=" hi", kind="text")),
             (0, 1.5, lf(5, "run.completed", "r1", text="Echo: hi", status="completed")),
             (1, 3.1, hello(5)),
             (1, 3.1, lf(6, "session.message", "r2", True, message_id="u2", role="user", text="/approve ls")),
             (1, 3.1, lf(7, "run.started", "r2", True)),
             (1, 3.1, lf(9, "approval.required", "r2", True, approval_id="a1")),
             (1, 3.3, lf(10, "approval.resolved", None, approval_id="a1", choice="once", accepted=True,
                         decided_by="remote")),
             (1, 3.4, lf(11, "ack", None, request_id="x", ok=True)),
             (1, 3.5, lf(12, "run.delta", "r2", text="Ran: ls", kind="text")),
             (1, 3.6, lf(13, "run.completed", "r2", text="Ran: ls", status="completed"))]
    for conn, t, f in phone:
        h.frames.append(Received("phone-1", "loomi", conn, "n2" if conn == 0 else "n3", t, f))


def _pheby(h: History) -> None:
    pheby = [{"type": "conversation.created", "conversation_id": C, "request_id": "q1"},
             {"type": "run.accepted", "conversation_id": C, "run_id": "r1"},
             {"type": "message.start", "conversation_id": C, "run_id": "r1", "message_id": "draft-r1"},
             {"type": "message.delta", "conversation_id": C, "message_id": "draft-r1", "text": "Echo:"},
             {"type": "message.complete", "conversation_id": C, "message_id": "draft-r1", "text": "Echo: hi"},
             {"type": "run.finished", "conversation_id": C, "run_id": "r1", "status": "completed"},
             {"type": "run.accepted", "conversation_id": C, "run_id": "r2"},
             {"type": "message.start", "conversation_id": C, "run_id": "r2", "message_id": "draft-r2"},
             {"type": "approval.request", "approval_id": "a1", "conversation_id": C, "run_id": "r2"},
             {"type": "approval.resolved", "approval_id": "a1", "choice": "once", "accepted": True,
              "decided_by": "remote"},
             {"type": "message.delta", "conversation_id": C, "message_id": "draft-r2", "text": "Ran:"},
             {"type": "message.complete", "conversation_id": C, "message_id": "draft-r2", "text": "Ran: ls"},
             {"type": "run.finished", "conversation_id": C, "run_id": "r2", "status": "completed"}]
    for k, f in enumerate(pheby):
        h.frames.append(Received("pheby-1", "pheby", 0, "n1", 0.1 + k * 0.25, f))


def _browser(h: History) -> None:
    live = stored_events()
    browser = [{"type": "events", "sessionId": C, "after": 0, "events": live[:4]},
               {"type": "events", "sessionId": C, "after": 4, "events": [ev(5, "message_update", delta="Echo:")]},
               {"type": "events", "sessionId": C, "after": 5, "events": [ev(6, "message_update", delta=" hi")]},
               {"type": "events", "sessionId": C, "after": 6, "events": live[4:]}]
    for k, f in enumerate(browser):
        h.frames.append(Received("browser-1", "lvmh", 0, "n3", 1.2 + k * 0.5, f))


def kinds(h: History) -> set:
    return {a.kind for a in check(h)}


def frame(h: History, client: str, **match) -> Received:
    (r,) = [r for r in h.frames if r.client == client and all(r.frame.get(k) == v for k, v in match.items())]
    return r


def test_the_clean_history_has_no_anomaly():
    assert check(clean()) == []


def test_a_hello_ok_not_carrying_the_reported_last_seq():
    h = clean()
    frame(h, "phone-1", type="hello.ok", seq=5).frame["seq"] = 4
    assert kinds(h) == {"hello_seq"}


def test_a_frame_at_or_below_what_was_processed():
    h = clean()
    h.frames.insert(5, Received("phone-1", "loomi", 0, "n2", 1.45, lf(3, "pong", None)))
    assert kinds(h) == {"seq_not_increasing"}


def test_a_live_seq_skipped_on_one_connection():
    h = clean()
    frame(h, "phone-1", type="run.completed", seq=13).frame["seq"] = 14
    assert kinds(h) == {"seq_gap"}


def test_a_gap_in_the_replay_is_a_reply_not_replayed_and_no_anomaly():
    h = clean()  # seq 8 is missing from the replay in the clean history already (an ack to the earlier socket)
    assert [r.frame["seq"] for r in h.frames if r.client == "phone-1" and r.frame.get("replayed")] == [6, 7, 9]
    assert check(h) == []


def test_truncated_for_a_gap_under_the_window():
    h = clean()
    frame(h, "phone-1", type="hello.ok", seq=5).frame["payload"]["truncated"] = True
    assert kinds(h) == {"truncated_under_window"}


def test_an_event_processed_twice():
    h = clean()
    h.frames.append(Received("phone-1", "loomi", 1, "n3", 3.7, lf(14, "run.completed", "r1", text="Echo: hi")))
    assert kinds(h) == {"event_twice"}


def test_deltas_missing_without_a_gap_or_truncation():
    """The issue's missing deltas: a run's last delta never reached a connected phone, no seq missing."""
    h = clean()
    missing = frame(h, "phone-1", type="run.delta", seq=4)
    missing.frame.update(type="pong", run_id=None, payload={})
    found = check(h)
    assert {a.kind for a in found} == {"deltas_incomplete", "transcript_contradicts_client"}
    (gap,) = [a for a in found if a.kind == "deltas_incomplete"]
    assert "run r1: 1 run.delta make 5 chars, run.completed has 8" in gap.detail


def test_a_transcript_holding_less_than_what_phones_got():
    """The issue's crash contradiction: the phone replayed the whole text, the store kept an older draft."""
    h = clean()
    h.final.transcripts["n1"][C][1]["text"] = "Echo:"
    h.final.transcripts["n2"][C][1]["text"] = "Echo:"
    found = check(h)
    assert "transcript_contradicts_client" in {a.kind for a in found}
    assert any(a.client == "phone-1" and "run.completed of r1" in a.detail for a in found)


def test_a_draft_that_is_not_a_prefix_of_the_final_text():
    h = clean()
    frame(h, "pheby-1", type="message.delta", text="Echo:").frame["text"] = "Ecco:"
    assert kinds(h) == {"text_diverged"}


def test_a_draft_longer_than_the_stored_text_needs_a_crash_right_after_it():
    h = clean()
    delta = frame(h, "pheby-1", type="message.delta", text="Echo:")
    delta.frame["text"] = "Echo: hi there"
    assert kinds(h) == {"transcript_shorter_than_sent"}
    h.faults.append(Fault("kill9", "n1", delta.t + LOSS_BOUND / 2, delta.t + 3))
    assert check(h) == []
    h.faults[0].start = delta.t + LOSS_BOUND + 1  # later than the bound ...
    assert kinds(h) == {"transcript_shorter_than_sent"}
    h.faults.insert(0, Fault("pause", "n1", delta.t + 0.1, delta.t + 1.5))  # ... unless the node was paused
    assert check(h) == []


def test_a_run_accepted_after_pairing_that_never_reached_the_phone():
    h = clean()
    h.ops.append(Op(7, "pheby-1", "chat", "n1", 4.0, {"conversation": C}, "ok", 4.1, {"run": "r3", "conversation": C}))
    assert kinds(h) == {"event_missing"}


def test_a_run_started_before_a_truncated_hello_and_acknowledged_after_it_is_excused():
    """Seed 4201: the sender's acknowledgment came after the phone's ``truncated`` hello, the run's start
    before it: the phone was told it missed frames, the run's among them (its task list then says)."""
    h = clean()
    h.ops.append(Op(7, "pheby-1", "chat", "n1", 3.7, {"conversation": C}, "ok", 4.6, {"run": "r3", "conversation": C}))
    h.frames.append(Received("phone-1", "loomi", 1, "n3", 3.8, lf(14, "session.message", "r3", message_id="u3",
                                                                   role="user", text="go")))  # fmt: skip
    h.frames.append(Received("phone-1", "loomi", 2, "n3", 4.2, hello(2000, truncated=True)))
    assert "event_missing" not in kinds(h)
    h.frames[-1].frame["payload"]["truncated"] = False  # without the truncation, still missing
    assert "event_missing" in kinds(h)


def test_a_run_left_active_after_healing():
    h = clean()
    h.final.active["n1"][C] = {"run": {"run_id": "r2"}, "approvals": [], "clarifications": []}
    assert kinds(h) == {"run_not_closed"}


def test_a_started_run_a_phone_never_saw_end():
    h = clean()
    h.frames = [r for r in h.frames if not (r.client == "phone-1" and r.frame.get("seq") == 13)]
    h.frames = [r for r in h.frames if not (r.client == "phone-1" and r.frame.get("seq") == 12)]
    assert kinds(h) == {"run_not_closed", "event_missing"}


@pytest.mark.parametrize("how", ["twice on a connection", "stored twice", "two winners", "told differently"])
def test_a_decision_not_resolved_exactly_once(how):
    h = clean()
    if how == "twice on a connection":
        resolved = frame(h, "pheby-1", type="approval.resolved")
        h.frames.append(Received("pheby-1", "pheby", 0, "n1", 9.0, dict(resolved.frame)))
    elif how == "stored twice":
        h.final.lvmh["n1"][C].append(ev(11, "approval_resolved", approvalId="a1", choice="once", accepted=True,
                                        decidedBy="remote"))
        h.final.lvmh["n3"] = h.final.views["browser-1"] = copy.deepcopy(h.final.lvmh["n1"])
    elif how == "two winners":
        h.ops.append(Op(7, "pheby-1", "resolve", "n1", 3.2, {"approval": "a1"}, "ok", 3.4, {"accepted": True}))
    else:
        frame(h, "pheby-1", type="approval.resolved").frame["choice"] = "deny"
    assert kinds(h) == {"decision_not_once"}


def test_a_conversation_unknown_to_a_node_after_another_acknowledged_it():
    h = clean()
    h.ops.append(Op(7, "phone-1", "send", "n2", 0.5, {"conversation": C}, "fail", 0.6, {"code": "task_not_found"}))
    (a,) = check(h)
    assert a.kind == "stale_read" and a.ops == (0, 7)
    h.ops[-1].invoke = 0.05  # sent before the creation was acknowledged: nothing was promised
    assert check(h) == []


def test_nodes_that_disagree_once_healed():
    h = clean()
    h.final.transcripts["n2"][C].pop()
    assert kinds(h) == {"nodes_disagree"}


def test_a_browser_view_that_differs_from_the_stored_events():
    h = clean()
    h.final.views["browser-1"][C].pop(2)
    assert kinds(h) == {"view_diverged"}


def test_a_pheby_turn_out_of_the_spec_order():
    h = clean()
    h.frames.append(Received("pheby-1", "pheby", 0, "n1", 9.0,
                             {"type": "message.delta", "conversation_id": C, "message_id": "draft-r1",
                              "text": "Echo: hi"}))
    assert kinds(h) == {"turn_out_of_order"}


def test_browser_deltas_short_of_the_message_end():
    h = clean()
    b = [r for r in h.frames if r.client == "browser-1"]
    b[2].frame["events"][0]["delta"] = ""
    assert kinds(h) == {"deltas_incomplete"}


def test_every_kind_has_a_history_here():
    """A new kind of anomaly gets its hand-made history above (and its name here)."""
    covered = {"hello_seq", "seq_not_increasing", "seq_gap", "truncated_under_window", "event_twice",
               "deltas_incomplete", "transcript_contradicts_client", "text_diverged", "transcript_shorter_than_sent",
               "event_missing", "run_not_closed", "decision_not_once", "stale_read", "nodes_disagree",
               "view_diverged", "turn_out_of_order"}  # fmt: skip
    assert covered == set(KINDS)


def test_a_history_survives_json():
    h = clean()
    again = History.from_json(h.to_json())
    assert check(again) == [] and len(again.frames) == len(h.frames)
