"""Events a phone missed that no node's rows hold any more take their seqs (issue 41, chaos seed 2004
``truncated_under_window``; docs/scale-out.md "Catching up", "Events gone from every node's rows").

The node that numbered a phone stops while the phone is away; another renders more than the replay window
meanwhile, keeping only its newest rows; a node just started, not rendering yet, answers the phone's hello
from those rows. The events before them are gone: ``truncated``, rightly (the run's start and most of its
deltas). Before, those events took no seq: the replay went on from the phone's last seq with no gap, so the
phone (and the checker) saw a truncation with fewer than the window's 512 events missed (chaos: 409 replayed,
0 skipped, for 1118 missed). Now the seqs skip the events gone. Beside it, the same steps with fewer events
than the window while away: everything is served, not told, no seq skipped. Over real sockets, on the test's
PostgreSQL and Redis."""

from __future__ import annotations

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.loomi.helpers import new_token
from tests.scale.nodes import Nodes

WINDOW = 512


def _ws(svc) -> str:
    return f"ws://127.0.0.1:{svc.ports['loomi']}/ws"


async def _run(app: LoomiApp, text: str) -> str:
    ack = await app.request("session.send", {"text": text})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    run_id = ack["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", timeout=60, run_id=run_id)
    return run_id


def _missed(app: LoomiApp, last: int) -> tuple[int, int]:
    """(replayed, skipped) at the last hello of ``app`` reporting ``last``: the checker's count."""
    seqs = app.connections[-1][1:]
    on = set(seqs)
    return sum(1 for f in app.events if f.get("replayed") and f["seq"] in on), (seqs[0] - last - 1 if seqs else 0)


async def _away(engines, tmp_path, phone: LoomiApp, other: LoomiApp, bench: int) -> tuple[Nodes, object, int, list]:
    """The phone numbered by ``a``, away while ``a`` stops and ``b`` runs ``/bench`` twice (``bench`` deltas,
    then a few more once ``c`` started and is held: ``b`` prunes past where ``c`` starts from). Returns the
    nodes, ``c``, the phone's last seq and the runs it missed."""
    ns = Nodes(engines, tmp_path, ("loomi",))
    a, b = await ns.start("a"), await ns.start("b")
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    await other.pair(dict(await new_token(b), url=_ws(b)))
    await _run(phone, "on a")
    last = phone.processed
    await phone.disconnect()
    await ns.stop(a)  # nothing numbers the phone any more
    runs = [await _run(other, f"/bench {bench}")]  # b keeps its newest window + 1 rows
    # its position: the newest event any node stored; c renders nothing yet, not even its join's (a node just
    # started, still behind; chaos: 70 ms after a restart)
    c = await ns.start_behind("c")
    runs.append(await _run(other, f"/bench {bench // 4}"))
    return ns, c, last, runs


async def _after(ns: Nodes, c, phone: LoomiApp, other: LoomiApp) -> None:
    """c reads on: the phone's next events come live, one seq after the other, nothing dropped or twice."""
    ns.release(c)
    run = await _run(other, "after")
    await phone.wait_for("run.completed", timeout=30, run_id=run)
    seqs = phone.connections[-1]
    assert seqs == sorted(set(seqs)) and not phone.dropped, [f["type"] for f in phone.dropped]


async def test_events_gone_from_every_nodes_rows_take_their_seqs(engines, tmp_path):
    phone, other = LoomiApp(), LoomiApp("Other phone")
    ns = None
    try:
        ns, c, last, runs = await _away(engines, tmp_path, phone, other, 1200)
        ok = await phone.connect(_ws(c))
        assert ok["payload"]["truncated"] is True, ok  # the first run's start and most of its deltas are gone
        await phone.until(lambda: phone.completed(runs[0]), timeout=30)  # the end of what c serves
        replayed, skipped = _missed(phone, last)
        assert replayed < WINDOW  # what b still keeps from c's position back
        assert replayed + skipped >= WINDOW, (replayed, skipped)  # before: (252, 0)
        assert not phone.find("run.started", run_id=runs[0]) and phone.completed(runs[0])
        await _after(ns, c, phone, other)
    finally:
        await close_all()
        if ns is not None:
            await ns.close()


async def test_a_phone_whose_missed_events_are_all_kept_is_not_told_and_skips_nothing(engines, tmp_path):
    phone, other = LoomiApp(), LoomiApp("Other phone")
    ns = None
    try:
        ns, c, last, runs = await _away(engines, tmp_path, phone, other, 100)
        ok = await phone.connect(_ws(c))
        assert ok["payload"]["truncated"] is False, ok
        await phone.until(lambda: phone.completed(runs[0]), timeout=30)  # the end of what c serves
        replayed, skipped = _missed(phone, last)
        assert skipped == 0 and replayed > 0, (replayed, skipped)
        await _after(ns, c, phone, other)
        for run in runs:  # the first from b's rows, the second from c's own once it reads on
            assert phone.run_text(run) == other.run_text(run) and len(phone.find("run.started", run_id=run)) == 1
    finally:
        await close_all()
        if ns is not None:
            await ns.close()


def test_the_plan_says_which_numbers_are_gone_among_the_ranges():
    """Pure (loomi_adapter/history.py ``plan``): rows pruned by every source, and a hole nobody else covers, are
    numbers gone, in order among the ranges served; what no node stored after the cursor is not (a jump, or
    nothing known: how many, if any, is not said)."""
    from loomi_adapter.history import Range, plan

    p = plan(10, 30, [("x", 5, 15), ("y", 18, 29)])
    assert (p.ranges, p.gap, p.gone) == ([Range("x", 11, 15), Range("y", 18, 29)], True, [(16, 17)])
    p = plan(10, 101, [("b:1", 5, 100)], {"b:1": [(20, 29)]})
    assert (p.ranges, p.gap, p.gone) == ([Range("b:1", 11, 19), Range("b:1", 30, 100)], True, [(20, 29)])
    p = plan(10, 40, [("y", 25, 39)])  # the chaos case: the cursor below every source's kept rows
    assert (p.ranges, p.gone) == ([Range("y", 25, 39)], [(11, 24)])
    assert plan(10, 30, [("x", 1, 10)]).gone == [] and plan(10, 20, [("y", 8, 19)]).gone == []
