"""After a crash: the interrupted message is completed with the longest durable text (issue 41 item 2),
and a run a crash interrupted is closed at some start, however often the process dies meanwhile.

The wire side (phones replaying from Loomi's journal, several nodes) is the nemesis suite's
(tests/nemesis/test_nemesis.py, seeds 4102 and 4103); here the core's rule, on the store.
"""

from __future__ import annotations

from bridge_core.bridge.bridge import Bridge
from bridge_core.bridge.demo import DemoAgent
from bridge_core.bridge.drafts import longest_text
from bridge_core.model import commands as cmd
from bridge_core.model import events as ev
from tests.waiting import until

PHEBY = cmd.Origin(surface="pheby")


async def _crash_mid_run(d: str):
    """A bridge whose ``/slow 30`` run streamed its first words (saved at once) when the process "dies"."""
    b = Bridge(d, DemoAgent())
    await b.start()
    res = await b.execute(cmd.SendMessage(text="/slow 30"), PHEBY)
    await until(lambda: b.conversation(res.conversation_id).run.text, what="the first streamed words (saved at once)")
    _die(b)
    return b, res


def _die(b: Bridge) -> None:
    """The process "dies": what was queued reaches the store, nothing else runs (no stop)."""
    b.store.flush()
    b.store.close()
    for t in list(b.tasks._tasks):
        t.cancel()


def _closing(b: Bridge) -> list:
    seen: list = []
    b.hub.subscribe(lambda s, e: seen.append(e))
    return seen


def test_the_longest_text_that_goes_on_from_the_draft():
    offered = {"r": "w1 w2 w3"}
    assert longest_text("w1", "r", [offered.get]) == "w1 w2 w3"
    assert longest_text("w1", "other", [offered.get]) == "w1"  # nothing held of that run
    assert longest_text("w1 w2 w3 w4", "r", [offered.get]) == "w1 w2 w3 w4"  # the draft is longer
    assert longest_text("x1", "r", [offered.get]) == "x1"  # another text: never replaces the draft

    def broken(run_id):
        raise OSError("the record cannot be read now")

    assert longest_text("w1", "r", [broken, offered.get, lambda r: "w1 w2"]) == "w1 w2 w3"


async def test_an_interrupted_message_is_completed_with_the_longest_durable_text(tmp_path):
    d = str(tmp_path / "d")
    b, res = await _crash_mid_run(d)
    b2 = Bridge(d, DemoAgent())
    b2.add_durable_text(lambda run_id: None)

    def journaled(run_id):  # a front end that sent two deltas past the saved draft, durably
        return b2.conversation(res.conversation_id).run.text + " w9 w10" if run_id == res.run_id else None

    b2.add_durable_text(journaled)
    await b2.start()
    try:
        draft = b2.conversation(res.conversation_id).run.text
        assert draft.startswith("w1")
        seen = _closing(b2)
        assert b2.report_interrupted() == 1
        completed = next(e for e in seen if isinstance(e, ev.MessageCompleted))
        assert completed.text == draft + " w9 w10"
        await until(lambda: b2.store.query("SELECT text FROM messages WHERE message_id=?",
                                           (completed.message_id,)) == [(completed.text,)], what="the text stored")
    finally:
        await b2.stop()


async def test_without_a_durable_record_the_draft_completes_it(tmp_path):
    d = str(tmp_path / "d")
    b, res = await _crash_mid_run(d)
    b2 = Bridge(d, DemoAgent())
    b2.add_durable_text(lambda run_id: "something else entirely")  # not this message's text: ignored
    await b2.start()
    try:
        draft = b2.conversation(res.conversation_id).run.text
        seen = _closing(b2)
        assert b2.report_interrupted() == 1
        assert next(e for e in seen if isinstance(e, ev.MessageCompleted)).text == draft
    finally:
        await b2.stop()


async def test_a_crash_before_the_interrupted_runs_are_closed_leaves_them_to_the_next_start(tmp_path):
    """Seed 1003 (docs/performance.md, "Chaos"): killed again after its start marked the run failed and
    before it closed it (report_interrupted runs once the front ends listen), the node never closed it:
    the run stayed active for good on the other nodes, and a phone never got its end."""
    d = str(tmp_path / "d")
    b, res = await _crash_mid_run(d)
    b2 = Bridge(d, DemoAgent())
    await b2.start()  # marks the run failed, then "dies" before report_interrupted
    assert b2.interrupted_runs == [(res.conversation_id, res.run_id)]
    assert b2.store.query("SELECT status, error FROM runs WHERE run_id=?", (res.run_id,)) == [
        ("failed", ev.RUN_INTERRUPTED)]
    _die(b2)
    b3 = Bridge(d, DemoAgent())
    await b3.start()
    try:
        assert b3.interrupted_runs == [(res.conversation_id, res.run_id)]
        assert b3.conversation(res.conversation_id).run.run_id == res.run_id
        seen = _closing(b3)
        assert b3.report_interrupted() == 1
        finished = next(e for e in seen if isinstance(e, ev.RunFinished))
        assert (finished.run_id, finished.status, finished.error) == (res.run_id, "failed", ev.RUN_INTERRUPTED)
        await until(lambda: b3.store.query("SELECT finished_at FROM runs WHERE run_id=?", (res.run_id,))[0][0],
                    what="the run's end stored")
    finally:
        await b3.stop()
    b4 = Bridge(d, DemoAgent())  # closed once: the next start has nothing to close
    await b4.start()
    try:
        assert b4.interrupted_runs == []
        assert b4.conversation(res.conversation_id).run is None
    finally:
        await b4.stop()
