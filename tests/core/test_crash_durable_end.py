"""After a kill -9: a run whose end a front end's durable record holds is not closed again (event_twice,
chaos seed 2002, issue 41).

Loomi journals a run's ``run.completed`` on the loop before the core's writer commits the run's end; killed
in between, the store says the run is running while the journal (and a phone replaying it) says it
completed. The start writes that end, and closes nothing: no second end on any front end. The wire side
(a ``serve`` process killed while the core's write is held, a phone's replay) is
tests/loomi/test_journal_run_end.py.
"""

from __future__ import annotations

from bridge_core.bridge.bridge import Bridge
from bridge_core.bridge.demo import DemoAgent
from bridge_core.bridge.drafts import RunEnd, durable_end
from bridge_core.model import events as ev
from tests.core.test_crash_durable_text import _closing, _crash_mid_run, _die
from tests.waiting import until


def test_the_first_record_holding_an_end_gives_it():
    end = RunEnd("completed", None, "w1 w2", 1.0)

    def broken(run_id):
        raise OSError("the record cannot be read now")

    assert durable_end("r", [lambda r: None, broken, {"r": end}.get]) == end
    assert durable_end("other", [broken, {"r": end}.get]) is None


async def test_an_end_a_front_end_holds_is_written_not_closed_again(tmp_path):
    d = str(tmp_path / "d")
    b, res = await _crash_mid_run(d)  # the store: running (the end's write never committed)
    b2 = Bridge(d, DemoAgent())
    held = RunEnd("completed", None, "w1 w2 w3 done", 1234.5)
    b2.add_durable_end(lambda run_id: held if run_id == res.run_id else None)
    await b2.start()
    try:
        seen = _closing(b2)
        assert b2.interrupted_runs == []
        assert b2.conversation(res.conversation_id).run is None
        assert b2.report_interrupted() == 0
        assert not [e for e in seen if isinstance(e, (ev.RunFinished, ev.Notification))]  # no second end
        await until(lambda: b2.store.query("SELECT status, error, finished_at FROM runs WHERE run_id=?",
                                           (res.run_id,)) == [("completed", None, 1234.5)], what="the end written")
        await until(lambda: b2.store.message_text(res.conversation_id, f"draft-{res.run_id}") == "w1 w2 w3 done",
                    what="its message's text written")
        _die(b2)
    finally:
        await b2.stop()
    b3 = Bridge(d, DemoAgent())  # and it stays ended without the record
    await b3.start()
    try:
        assert b3.interrupted_runs == [] and b3.conversation(res.conversation_id).run is None
    finally:
        await b3.stop()


async def test_without_an_end_held_the_run_is_closed_as_interrupted(tmp_path):
    d = str(tmp_path / "d")
    b, res = await _crash_mid_run(d)
    b2 = Bridge(d, DemoAgent())
    b2.add_durable_end(lambda run_id: None)
    await b2.start()
    try:
        seen = _closing(b2)
        assert b2.report_interrupted() == 1
        finished = next(e for e in seen if isinstance(e, ev.RunFinished))
        assert (finished.status, finished.error) == ("failed", ev.RUN_INTERRUPTED)
    finally:
        await b2.stop()
