"""A phone told ``truncated`` because events were gone for good sees the seqs say so: a gap of at least the
replay window (issue 41, chaos seed 2010 ``truncated_under_window``; docs/scale-out.md "Catching up", "A phone
numbered across a hole skips the window").

Seed 2010: phone-2 on n2 (restarted, behind) got a run's deltas up to 57.49 s; n3 streamed some 480 more of
them (phone-3 got them), Redis lost its keys, n3 was killed, and n2's delivery passed over them: gone for good,
a hole of n2's life. n2 closed the phone (``unavailable``, seq 30883, then a reply 30884); the run's failure,
rendered after the hole, took 30885 to 30887 in n2's rows, and the next hello (last_seq 30884) was answered
``truncated`` (rightly: the phone missed those deltas) with those 3 frames replayed from 30885: no gap at all,
as if the phone had missed nothing. The spec's ``truncated`` is a gap beyond the window, so a phone told
``truncated`` for events gone now has its frames after ``last_seq`` renumbered one window higher, and the
stored numbering says so (its next hello replays from there). The same steps as
tests/scale/test_gone_truncated.py, over real sockets on two in-process nodes."""

from __future__ import annotations

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.scale.test_cluster import _nodes
from tests.scale.test_gone_truncated import _send, hole_on_b
from tests.waiting import until


def _gap(phone: LoomiApp, ok: dict) -> tuple[int, int]:
    """What the checker counts at a hello (tests/nemesis/check_clients.py ``_truncation``): frames replayed, and
    seqs skipped between the app's ``last_seq`` and the first frame after ``hello.ok``."""
    seqs = phone.connections[-1]
    replayed = sum(1 for f in phone.events if f.get("replayed") and f["seq"] in seqs[1:])
    return replayed, seqs[1] - ok["seq"] - 1


async def test_a_phone_told_truncated_for_events_gone_sees_a_gap_of_the_window(
        service_factory, engines, tmp_path, redis_server):  # fmt: skip
    a, b = await _nodes(service_factory, engines, tmp_path, "a", "b", adapters=("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    window = b.frontends["loomi"].registry.window
    try:
        _, after = await hole_on_b(a, b, phone, other, redis_server, "/bench 60 200")  # fewer than the window
        await phone.until(lambda: phone.close_code is not None)
        last = phone.processed
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is True, ok  # it missed events: told, never silent
        assert ok["seq"] == last
        await phone.wait_for("run.completed", run_id=after)
        replayed, skipped = _gap(phone, ok)
        assert replayed + skipped >= window, (replayed, skipped, phone.connections[-1][:8])
        seqs = phone.connections[-1]
        assert seqs == sorted(set(seqs)) and not phone.dropped, (seqs, [f["type"] for f in phone.dropped])
        # the store holds the numbering the phone was given: its next hello replays nothing twice, misses nothing
        got = phone.processed
        await phone.disconnect()
        ok = await phone.connect()
        assert ok["payload"]["truncated"] is False and ok["seq"] == got, ok
        again = await _send(phone, "again")
        await phone.wait_for("run.completed", run_id=again)
        seqs = phone.connections[-1]  # not told, nothing skipped: one up from what it processed
        assert not phone.dropped and seqs == list(range(got, got + len(seqs))), seqs
        assert len(phone.completed(after)) == 1, phone.completed(after)
    finally:
        await close_all()


def test_renumbered_frames_take_new_seqs_after_the_skip_and_their_rows_the_new_epoch():
    from loomi_adapter.history import History, renumber, stamp

    def h(rows):  # rows: (seq, epoch, source, m)
        return History(seq=rows[-1][0], cursor=9, floor=0, epochs_used=1,
                       frames=[(q, stamp(q, b"x}"), e) for q, e, _, _ in rows],
                       places=[(src, m, b"x}") for _, _, src, m in rows])

    # the last epoch's rows after two replies (seqs 11, 12): the two above 12 renumbered from 600 on, one span
    r = renumber(h([(10, 2, "b:1", 5), (13, 2, "b:1", 6), (14, 2, "b:1", 7)]), 12, 599)
    assert [q for q, _ in r.frames] == [10, 600, 601] and r.frames[1][1] == stamp(600, b"x}")
    assert r.spans == [("b:1", 6, 7, 594)] and r.epoch == 2
    # rows of two sources (a catch-up's, then the node's own): one span each, closed
    r = renumber(h([(10, 2, "a:1", 40), (11, 2, "b:1", 6)]), 9, 599)
    assert r.spans == [("a:1", 40, 40, 560), ("b:1", 6, 6, 595)]
    # nothing above last_seq: nothing renumbered, no epoch to close
    r = renumber(h([(10, 2, "b:1", 5)]), 10, 599)
    assert [q for q, _ in r.frames] == [10] and r.spans == [] and r.epoch is None
    # frames of two epochs above it: left as they were
    assert renumber(h([(10, 1, "a:1", 5), (11, 2, "b:1", 6)]), 9, 599) is None
