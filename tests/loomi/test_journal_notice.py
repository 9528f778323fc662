"""An interrupted run's notice as Loomi's frames hold it, restored with its end (loomi_adapter/journal.py
``run_end``; ``Bridge.restore_end``; chaos seed 2103 ``nodes_disagree``). A notification frame names no run and no
message: the notice is the first one of the run's task titled as an interrupt notice after the end. The wire side
(every node's transcript the same after a restart) is tests/scale/test_notice_restored.py."""

from __future__ import annotations

from bridge_core.bridge.bridge import interrupt_notice
from bridge_core.model import events as ev
from loomi_adapter import codec
from loomi_adapter.journal import run_end

TEXT = "This run was interrupted by a restart of the bridge and did not finish."


def _tails(*events) -> list[bytes]:
    """The rows' bodies, as the registry stores them (without their ``{``)."""
    codec.prepare()
    return [b[1:] for e in events for b in codec.RENDERERS[type(e)](e, codec.Extra())]


def _end(cid: str, run_id: str, ts: float, error=ev.RUN_INTERRUPTED) -> ev.RunFinished:
    return ev.RunFinished(conversation_id=cid, run_id=run_id, status="failed", error=error, ts=ts)


def test_an_interrupted_end_holds_its_notice_after_it():
    other = ev.Notification(conversation_id="c2", message_id="n-x", text="elsewhere", title="Run interrupted", ts=2.0)
    result = ev.Notification(conversation_id="c1", message_id="n-y", text="a result", ts=2.5)  # (not a notice)
    tails = _tails(_end("c1", "r1", 1.0), other, result, interrupt_notice("c1", "r1", TEXT, 3.0))
    end = run_end(tails, "r1")
    assert (end.status, end.error, end.ts, end.notice) == ("failed", ev.RUN_INTERRUPTED, 1.0, (TEXT, 3.0))


def test_no_notice_before_the_end_nor_for_another_end():
    before = _tails(interrupt_notice("c1", "r0", TEXT, 0.5), _end("c1", "r1", 1.0))
    assert run_end(before, "r1").notice is None  # an earlier run's notice
    completed = _tails(ev.RunFinished(conversation_id="c1", run_id="r1", status="completed", ts=1.0),
                       interrupt_notice("c1", "r2", TEXT, 2.0))
    assert run_end(completed, "r1").notice is None  # not interrupted: no notice of it
    assert run_end(_tails(_end("c1", "r1", 1.0)), "r1").notice is None  # its notice not in these frames


def test_the_notice_has_one_id_per_run():
    first, again = interrupt_notice("c1", "r1", TEXT), interrupt_notice("c1", "r1", "another text")
    assert first.message_id == again.message_id == "n-r1"
    assert interrupt_notice("c1", "r2", TEXT).message_id != first.message_id
