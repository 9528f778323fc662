"""A phone a node numbered across events gone for good is told ``truncated`` with seqs that skip at least the
replay window (issue 41, chaos seed 2022 ``truncated_under_window``: 360 replayed, 0 skipped; docs/scale-out.md
"Catching up", bridge_core/scale/gone.py).

In the chaos run n1 was behind when Redis lost its keys and the run's writer (n3) was killed: n1 passed over the
first events of a run (its message, its start, a delta), closed phone-1 (``error unavailable``), and rendered
what followed over the rows that go on numbering the phone. Its next hello to n1 was ``truncated`` (its
numbering crossed n1's hole: history.py ``crossed``), rightly, yet the replay went on from the error's seq: the
events gone took no seq, a truncation over fewer seqs than the window (the spec says ``truncated`` when the gap
exceeds the window). Now the rows after the hole take their seqs above a skip of at least the window. Two
in-process nodes on the test's PostgreSQL and Redis, the spec-built phone over real sockets."""

from __future__ import annotations

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.test_cluster import _nodes
from tests.scale.test_gone_numbered import WINDOW, _missed
from tests.scale.test_gone_truncated import hole_on_b
from tests.waiting import until


async def test_a_phone_numbered_across_events_gone_skips_the_window(service_factory, engines, tmp_path, redis_server):
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        _, after = await hole_on_b(a, b, phone, other, redis_server, "/bench 20 200")  # fewer than the window
        await phone.until(lambda: phone.close_code is not None)  # closed by b at the hole
        assert phone.find("error") and phone.find("error")[-1]["payload"]["code"] == "unavailable"
        last = phone.processed
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True and ok["seq"] == last, ok
        await phone.wait_for("run.completed", run_id=after)  # what follows, as ever
        replayed, skipped = _missed(phone, last)
        assert replayed + skipped >= WINDOW, (replayed, skipped)  # before: a few replayed, 0 skipped
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
        # its next hello, having processed the replay, misses nothing: not told, nothing skipped
        await phone.disconnect()
        last = phone.processed
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is False and ok["seq"] == last, ok
        # the phone on a, numbered by a node that read everything, is told nothing and skips nothing
        await other.disconnect()
        last = other.processed
        ok = await other.connect()
        assert ok["payload"]["truncated"] is False, ok
        assert _missed(other, last)[1] == 0
    finally:
        await close_all()


async def test_a_phone_away_numbered_across_events_gone_skips_the_window(
        service_factory, engines, tmp_path, redis_server):  # fmt: skip
    """The same hole while the phone is away (closed before it): the node's rows go on numbering it, and its
    next hello is ``truncated`` with the same skip (a span queued at the hole for every device away whose
    numbering is the node's). Before: a few replayed, 0 skipped."""
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        _, after = await hole_on_b(a, b, phone, other, redis_server, "/bench 20 200", away=True)
        last = phone.processed  # as it went away (the helper disconnects it after its first run)
        await other.wait_for("run.completed", run_id=after)
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True and ok["seq"] == last, ok
        await phone.wait_for("run.completed", run_id=after)
        replayed, skipped = _missed(phone, last)
        assert replayed + skipped >= WINDOW, (replayed, skipped)
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
    finally:
        await close_all()
