"""The notifier's rules, pure (bridge_core/push/state.py and model.py): no sockets, no clock."""

from __future__ import annotations

import base64

from bridge_core.model import events as ev
from bridge_core.push.model import check_subscription, conversation_url, message, topic
from bridge_core.push.state import Arm, Disarm, NotifierState, PushDecision, PushNotice, PushRun, Withdraw


def _approval(aid="a1", cid="c1", deadline=None):
    return ev.ApprovalRequested(conversation_id=cid, run_id="r1", approval_id=aid, session_key="s", command="ls",
                                description="", deadline_ts=deadline, ts=100.0)  # fmt: skip


def _resolved(aid="a1", cid="c1"):
    return ev.ApprovalResolved(conversation_id=cid, run_id="r1", approval_id=aid, choice="once")


def test_a_decision_is_armed_then_pushed_once_then_withdrawn():
    s = NotifierState(grace=5, run_seconds=30)
    assert s.on_event(_approval(), now=100.0) == [Arm(decision_id="a1", at=105.0)]
    assert s.on_event(_approval(), now=101.0) == []  # the same decision again: still one
    (push,) = s.due("a1", now=105.0)
    assert type(push) is PushDecision and push.decision.text == "ls" and push.decision.choices == ev.APPROVAL_CHOICES
    assert s.due("a1", now=106.0) == []
    (w,) = s.on_event(_resolved(), now=107.0)
    assert type(w) is Withdraw and w.decision.decision_id == "a1"
    assert s.on_event(_resolved(), now=108.0) == []


def test_answered_within_grace_is_disarmed_and_never_pushed():
    s = NotifierState(grace=5, run_seconds=30)
    s.on_event(_approval(), now=100.0)
    assert s.on_event(_resolved(), now=101.0) == [Disarm(decision_id="a1")]
    assert s.due("a1", now=105.0) == []


def test_a_decision_past_its_deadline_is_not_pushed():
    s = NotifierState(grace=5, run_seconds=30)
    s.on_event(_approval(deadline=103.0), now=100.0)
    assert s.due("a1", now=105.0) == []


def test_runs_are_pushed_when_long_and_unwatched():
    s = NotifierState(grace=5, run_seconds=30)

    def run(rid, start, end, watched):
        s.on_event(ev.RunStarted(conversation_id="c", run_id=rid, message_id="m", ts=start), now=start)
        return s.on_event(ev.RunFinished(conversation_id="c", run_id=rid, status="completed", text="done", ts=end),
                          now=end, watched=watched)  # fmt: skip

    assert run("short", 0.0, 10.0, watched=False) == []
    assert run("watched", 0.0, 60.0, watched=True) == []
    (p,) = run("long", 0.0, 60.0, watched=False)
    assert type(p) is PushRun and (p.status, p.text) == ("completed", "done")
    # a run this notifier never saw start (before a restart) is not guessed at
    assert s.on_event(ev.RunFinished(conversation_id="c", run_id="x", status="failed", ts=99.0), now=99.0) == []


def test_notifications_skip_diagnostics_and_watched():
    s = NotifierState(grace=5, run_seconds=30)
    n = ev.Notification(conversation_id="c", message_id="m", text="hi", title="T")
    assert s.on_event(n, now=0.0, watched=True) == []
    assert s.on_event(ev.Notification(conversation_id="c", message_id="m", text="x", category="diagnostic"), now=0.0) == []
    assert s.on_event(ev.Notification(conversation_id=None, message_id="m", text="x"), now=0.0) == []
    assert s.on_event(n, now=0.0) == [PushNotice(conversation_id="c", title="T", text="hi")]


def test_a_deleted_conversation_withdraws_its_pushed_decisions():
    s = NotifierState(grace=0, run_seconds=30)
    s.on_event(_approval("a1"), now=0.0)
    s.on_event(_approval("a2"), now=0.0)
    s.due("a1", now=0.0)
    out = s.on_event(ev.ConversationDeleted(conversation_id="c1"), now=1.0)
    assert sorted(type(a).__name__ for a in out) == ["Disarm", "Withdraw"]


def test_the_message_shape():
    m = message("approval", "c1", "Box", "rm  -rf\nx", "https://h/#/s/c1", decision_id="a1",
                actions=[{"action": "once", "title": "Approve once", "url": "u"}])  # fmt: skip
    assert m == {"v": 1, "kind": "approval", "conversation_id": "c1", "title": "Approval needed", "body": "Box: rm -rf x",
                 "url": "https://h/#/s/c1", "decision_id": "a1",
                 "actions": [{"action": "once", "title": "Approve once", "url": "u"}]}  # fmt: skip
    assert len(message("notify", "c", "n", "x" * 5000, "")["body"]) <= 510
    assert conversation_url("https://h/", "a b") == "https://h/#/s/a%20b" and conversation_url(None, "c") == ""
    assert topic("c1") == topic("c1") != topic("c2") and len(topic("c1")) <= 32


def test_subscription_checks():
    key = base64.urlsafe_b64encode(b"\x04" + b"k" * 64).decode().rstrip("=")
    auth = base64.urlsafe_b64encode(b"a" * 16).decode().rstrip("=")
    assert check_subscription("https://push.example.com/x", key, auth)
    assert check_subscription("https://127.attacker.example/x", key, auth)  # https: any host
    for loopback in ("http://127.0.0.1:9/x", "http://127.9.8.7/x", "http://[::1]:9/x"):
        assert check_subscription(loopback, key, auth, allow_insecure=True)
    insecure = ("http://127.0.0.1:9/x", "http://[::1]:9/x")  # refused without [push] allow_insecure_endpoints
    # never a loopback address, whatever their text looks like
    names = ("http://127.attacker.example/x", "http://127.0.0.1.nip.io/x", "http://localhost:9/x", "http://127.1/x",
             "http://2130706433/x", "http://push.example.com/x", "http://10.0.0.1/x")
    cases = [(e, key, auth, False) for e in insecure] + [(e, key, auth, True) for e in names]
    cases += [("https:///x", key, auth, True), ("https://p/x", "!!", auth, True), ("https://p/x", key, key, True)]
    for endpoint, k, a, insecure_ok in cases:
        try:
            check_subscription(endpoint, k, a, allow_insecure=insecure_ok)
        except Exception as exc:
            assert getattr(exc, "code", None) == "bad_request"
        else:
            raise AssertionError(f"accepted {endpoint} {k} {a}")
