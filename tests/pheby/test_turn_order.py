"""A Pheby turn keeps the spec's order whatever this node was not delivered (pheby_adapter/protocol.py ``Turns``).

``run.accepted → message.start → (message.delta)* → message.complete → run.finished``: a run's end on
a connection whose message of that run is still open (its ``message.start`` sent, or shown running by a
``conversation.open`` snapshot) comes after that message's ``message.complete``, even when the node never
got the run's ``MessageCompleted`` (issue 41, chaos seed 2022: n2's bus reader dropped it, its fold
needing the store while PostgreSQL restarted; over real sockets: tests/scale/test_pheby_lost_completion.py).
Driven synchronously through tests/pheby/protocol_pair.py.
"""

from __future__ import annotations

import json

from bridge_core.bridge.handlers import Snapshot
from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from bridge_core.model.state import ActiveRun, ConversationState
from pheby_adapter.pacing import DraftPacer
from pheby_adapter.protocol import Turns
from tests.pheby.protocol_pair import ProtocolPair

START = ev.RunStarted(conversation_id="c1", run_id="r1", message_id="draft-r1")


def _delta(draft: ev.Draft, piece: str) -> ev.TextDelta:
    draft.append(piece)
    return ev.TextDelta(conversation_id="c1", run_id="r1", message_id="draft-r1", delta=piece, draft=draft)


def _turn(frames: list[dict]) -> list[tuple[str, str]]:
    return [(f["type"], f.get("text", "")) for f in frames]


def _streamed(pair: ProtocolPair, *pieces: str) -> None:
    pair.publish(START)
    d = ev.Draft()
    for piece in pieces:
        pair.publish(_delta(d, piece))


def test_a_run_ending_with_its_message_open_completes_it_first_with_the_ends_text():
    pair = ProtocolPair(pacer=DraftPacer(0.040, tick=0))
    a, b = pair.connect(), pair.connect()
    _streamed(pair, "Echo:", " hi")  # the second draft is paced: due later
    # its MessageCompleted never came: the run's end is next
    end = ev.RunFinished(conversation_id="c1", run_id="r1", status="completed", text="Echo: hi")
    pair.publish(end)
    want = [("run.accepted", ""), ("message.start", ""), ("message.delta", "Echo:"),
            ("message.complete", "Echo: hi"), ("run.finished", "")]  # fmt: skip
    frames_a = a.raw()
    assert _turn([json.loads(x) for x in frames_a]) == want
    assert b.raw() == frames_a  # rendered once: the same bytes for every connection
    assert pair.timers == {}
    # the completion arriving after it is not sent again, nor anything of the run
    pair.publish(ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="Echo: hi", run_id="r1"))
    assert a.received() == [] and b.received() == []


def test_the_completion_carries_the_message_fields_and_the_ends_time():
    pair = ProtocolPair()
    c = pair.connect()
    _streamed(pair, "w1")
    c.received()
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="failed", error="boom", text="w1 w2",
                                ts=1_700_000_123.5))  # fmt: skip
    complete, finished = c.received()
    assert complete == {"type": "message.complete", "conversation_id": "c1", "message_id": "draft-r1",
                        "text": "w1 w2", "ts": "2023-11-14T22:15:23.500+00:00"}  # fmt: skip
    assert (finished["type"], finished["status"], finished["error"]) == ("run.finished", "failed", "boom")


def test_a_run_end_without_text_completes_its_message_with_the_newest_draft_here():
    pair = ProtocolPair(pacer=DraftPacer(0.040, tick=0))
    c = pair.connect()
    _streamed(pair, "w1", " w2", " w3")  # " w2", " w3" not pushed yet
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="failed", error="interrupted"))
    assert _turn(c.received())[2:] == [("message.delta", "w1"), ("message.complete", "w1 w2 w3"),
                                       ("run.finished", "")]  # fmt: skip


def test_a_delivered_completion_is_sent_once_and_nothing_is_added():
    pair = ProtocolPair()
    c = pair.connect()
    _streamed(pair, "Echo: hi")
    pair.publish(ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="Echo: hi", run_id="r1"))
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="completed", text="Echo: hi"))
    assert [t for t, _ in _turn(c.received())] == ["run.accepted", "message.start", "message.delta",
                                                   "message.complete", "run.finished"]  # fmt: skip


def test_only_a_connection_the_message_is_open_on_gets_the_completion():
    """A connection made after the run's start never saw its message start: nothing to close there. One that
    opened the conversation while the run streamed was shown it running (the snapshot's ``run``): closed."""
    pair = ProtocolPair()
    early = pair.connect()
    _streamed(pair, "w1")
    late, opened = pair.connect(), pair.connect()
    conv = ConversationState(conversation_id="c1", name="c")
    run = ActiveRun(run_id="r1", message_id="draft-r1", started_at=1.0)
    snap = Snapshot(conversation=conv, messages=[], attachments=[], run=run, tools=[], approvals=[],
                    clarifications=[])  # fmt: skip
    pair.run(opened, cmd.OpenConversation(conversation_id="c1", request_id="o"), result=snap)
    assert opened.received()[0]["run"]["message_id"] == "draft-r1"
    early.received()
    pair.publish(ev.RunFinished(conversation_id="c1", run_id="r1", status="completed", text="w1"))
    assert _turn(early.received()) == [("message.complete", "w1"), ("run.finished", "")]
    assert _turn(opened.received()) == [("message.complete", "w1"), ("run.finished", "")]
    assert _turn(late.received()) == [("run.finished", "")]


def test_a_connection_remembers_a_bounded_number_of_runs():
    turns, pair = Turns(keep=2), ProtocolPair()
    for i in range(3):
        turns.send(ev.RunStarted(conversation_id="c1", run_id=f"r{i}", message_id=f"m{i}"), pair.broadcast)
    oldest = ev.RunFinished(conversation_id="c1", run_id="r0", status="completed", text="t")
    assert len(turns.send(oldest, pair.broadcast)) == 1  # forgotten: its end alone
    newest = ev.RunFinished(conversation_id="c1", run_id="r2", status="completed", text="t")
    assert len(turns.send(newest, pair.broadcast)) == 2


def _opened_snapshot(completed: bool) -> Snapshot:
    conv = ConversationState(conversation_id="c1", name="c")
    run = ActiveRun(run_id="r1", message_id="draft-r1", started_at=1.0, completed=completed)
    return Snapshot(conversation=conv, messages=[], attachments=[], run=run, tools=[], approvals=[],
                    clarifications=[])  # fmt: skip


DONE = ev.MessageCompleted(conversation_id="c1", message_id="draft-r1", text="w1", run_id="r1")
END = ev.RunFinished(conversation_id="c1", run_id="r1", status="completed", text="w1")


def test_a_snapshot_showing_the_message_completed_opens_nothing():
    """Opened after the run's message completed, before the run ended: the run's end is all that comes."""
    pair = ProtocolPair()
    _streamed(pair, "w1")
    pair.publish(DONE)
    c = pair.connect()
    pair.run(c, cmd.OpenConversation(conversation_id="c1", request_id="o"), result=_opened_snapshot(completed=True))
    assert c.received()[0]["run"]["message_id"] == "draft-r1"
    pair.publish(END)
    assert _turn(c.received()) == [("run.finished", "")]


def test_a_completion_sent_while_the_open_executes_counts():
    """The snapshot showed the message running; its completion was broadcast while the open executed: once."""
    pair = ProtocolPair()
    _streamed(pair, "w1")
    c = pair.connect()
    pair.run(c, cmd.OpenConversation(conversation_id="c1", request_id="o"), result=_opened_snapshot(completed=False),
             during=[DONE])  # fmt: skip
    assert _turn(c.received())[1:] == [("message.complete", "w1")]
    pair.publish(END)
    assert _turn(c.received()) == [("run.finished", "")]


def test_a_message_completed_on_a_connection_is_never_opened_again_there():
    """The rule itself, both orders: completed then opened (nothing to fill), opened then completed (nothing)."""
    pair = ProtocolPair()
    first = Turns()
    first.send(DONE, pair.broadcast)
    first.opened("r1", "draft-r1")
    assert len(first.send(END, pair.broadcast)) == 1  # its end alone
    second = Turns()
    second.opened("r1", "draft-r1")
    assert len(second.send(DONE, pair.broadcast)) == 1
    second.opened("r1", "draft-r1")  # a later open showing it (a stale snapshot) opens nothing
    assert len(second.send(END, pair.broadcast)) == 1
