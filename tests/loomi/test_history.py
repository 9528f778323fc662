"""A device's numbering across nodes, rebuilt from stored rows (loomi_adapter/history.py, pure)."""

from __future__ import annotations

from loomi_adapter.history import Epoch, Range, Span, plan_catchup, rebuild, stamp


class Rows:
    """Stored frames by source: m -> (n, body); ``fetch``/``extent`` as the store answers them."""

    def __init__(self, **sources: dict[int, int]):
        self.rows = {src: {m: (n, b'"type":"e%d"}' % n) for m, n in rows.items()} for src, rows in sources.items()}
        self.fetched: list[tuple] = []

    def fetch(self, source, lo, hi, limit):
        self.fetched.append((source, lo, hi, limit))
        got = sorted((m for m in self.rows.get(source, {}) if m >= lo and (hi is None or m <= hi)), reverse=True)
        return [(m, self.rows[source][m][0], self.rows[source][m][1]) for m in got[:limit]]

    def extent(self, source):
        ms = self.rows.get(source)
        return (min(ms), max(ms)) if ms else None


def build(rows: Rows, epochs, spans, window=512, base=0):
    return rebuild(epochs, spans, rows.fetch, rows.extent, window, base=base)


def test_a_device_never_claimed_starts_above_what_it_was_given():
    h = build(Rows(), [], [], base=4096)
    assert (h.seq, h.cursor, h.floor, h.frames) == (4096, -1, 4096, [])


def test_frames_of_an_open_span_are_the_sources_rows_with_their_seqs():
    rows = Rows(a={1: 10, 2: 11, 3: 11, 4: 12})
    h = build(rows, [Epoch(1, 9, 0)], [Span(1, "a", 1, None, 4)])
    assert [s for s, _, _ in h.frames] == [5, 6, 7, 8]
    assert h.frames[0][1] == stamp(5, b'"type":"e10"}') == b'{"seq":5,"event_id":"e_5","type":"e10"}'
    assert (h.seq, h.cursor, h.floor) == (8, 12, 0)


def test_a_reply_between_frames_starts_a_span_and_is_the_last_seq_when_nothing_followed():
    rows = Rows(a={1: 10, 2: 11, 3: 12})
    spans = [Span(1, "a", 1, None, 0), Span(1, "a", 3, None, 1), Span(1, "a", 4, None, 2)]
    h = build(rows, [Epoch(1, 9, 0)], spans)
    # frames 1, 2 (seqs 1, 2); a reply took 3; frame 3 is seq 4; a reply took 5 (first seq of the last span, 6)
    assert [s for s, _, _ in h.frames] == [1, 2, 4]
    assert h.seq == 5 and h.cursor == 12


def test_a_claimed_epoch_ends_at_the_seq_its_claim_found():
    rows = Rows(a={1: 10, 2: 11, 3: 12, 4: 13}, b={1: 13, 2: 14})
    epochs = [Epoch(1, 9, 0, last_seq=2), Epoch(2, 11, 2)]
    spans = [Span(1, "a", 1, None, 0), Span(2, "b", 1, None, 2)]  # a kept rendering after the claim
    h = build(rows, epochs, spans)
    assert [s for s, _, _ in h.frames] == [1, 2, 3, 4]
    assert [f for _, f, _ in h.frames][2] == stamp(3, b'"type":"e13"}')
    assert (h.seq, h.cursor) == (4, 14)


def test_a_reply_while_skipping_raises_the_epoch_seq_not_its_floor():
    h = build(Rows(), [Epoch(1, 20, 7, reply_seq=9)], [])
    assert (h.seq, h.floor, h.frames) == (9, 7, [])


def test_pruned_rows_set_the_floor():
    rows = Rows(a={3: 12, 4: 13})  # rows 1 and 2 were pruned
    h = build(rows, [Epoch(1, 9, 0)], [Span(1, "a", 1, None, 10)])
    assert [s for s, _, _ in h.frames] == [13, 14]
    assert h.floor == 12


def test_a_span_whose_rows_are_all_gone_sets_the_floor():
    rows = Rows(a={5: 20})
    spans = [Span(1, "a", 1, 2, 0), Span(1, "a", 5, None, -2)]
    h = build(rows, [Epoch(1, 9, 0)], spans)
    assert [s for s, _, _ in h.frames] == [3] and h.floor == 2


def test_the_window_keeps_the_newest_frames_and_the_one_before_is_the_floor():
    rows = Rows(a={m: 100 + m for m in range(1, 11)})
    h = build(rows, [Epoch(1, 9, 0)], [Span(1, "a", 1, None, 0)], window=4)
    assert [s for s, _, _ in h.frames] == [7, 8, 9, 10] and h.floor == 6
    assert rows.fetched == [("a", 1, None, 5)]  # only what the window needs is read


def test_catch_up_from_another_source_then_the_own_rows():
    rows = Rows(old={7: 30, 8: 31}, own={2: 32, 3: 33})
    spans = [Span(1, "old", 7, 8, -2), Span(1, "own", 2, None, 5)]
    h = build(rows, [Epoch(1, 29, 4)], spans)
    assert [s for s, _, _ in h.frames] == [5, 6, 7, 8]
    assert (h.seq, h.cursor) == (8, 33)


def test_old_epochs_out_of_the_window_are_reported_droppable():
    rows = Rows(a={1: 1, 2: 2}, b={1: 3, 2: 4, 3: 5})
    epochs = [Epoch(1, 0, 0, last_seq=2), Epoch(2, 2, 2)]
    h = build(rows, epochs, [Span(1, "a", 1, None, 0), Span(2, "b", 1, None, 2)], window=2)
    assert [s for s, _, _ in h.frames] == [4, 5] and h.epochs_used == 2 and h.floor == 3


def test_catch_up_plan_takes_the_source_reaching_furthest():
    ranges, gap = plan_catchup(10, 20, [("x", 5, 14), ("y", 8, 19)])
    assert ranges == [Range("y", 11, 19)] and not gap


def test_catch_up_plan_stitches_sources_and_says_what_is_gone():
    ranges, gap = plan_catchup(10, 30, [("x", 5, 15), ("y", 18, 29)])
    assert ranges == [Range("x", 11, 15), Range("y", 18, 29)] and gap  # 16 and 17: stored once, gone


def test_catch_up_plan_with_nothing_stored_after_the_cursor_misses_nothing_known():
    assert plan_catchup(10, 30, [("x", 1, 10)]) == ([], False)
