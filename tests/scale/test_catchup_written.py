"""What a node keeps of the entries it wrote, for a refetch (bridge_core/scale/catchup.py ``Written``):
compressed in chunks, it answers exactly what a plain list of the last entries would."""

from __future__ import annotations

import collections
import random

import orjson

from bridge_core.scale import catchup


class _Plain:
    """The rule, written the plain way: the last ``keep`` entries, at most ``keep_bytes`` of them."""

    def __init__(self, keep: int, keep_bytes: int):
        self.ring: collections.deque = collections.deque()
        self.keep, self.keep_bytes, self.size = keep, keep_bytes, 0

    def add(self, n: int, body: bytes) -> None:
        self.ring.append((n, body))
        self.size += len(body)
        while len(self.ring) > self.keep or (self.size > self.keep_bytes and len(self.ring) > 1):
            self.size -= len(self.ring.popleft()[1])

    def between(self, lo: int, hi: int) -> list:
        return [(n, b) for n, b in self.ring if lo < n < hi][-catchup.MAX_ANSWER:]


def test_chunked_entries_answer_as_the_plain_rule_does():
    """Bounded by count alone, the chunks keep and answer exactly the last ``keep`` entries."""
    rnd = random.Random(7)
    for keep, chunk in ((50, 700), (3, 64), (5000, 4096), (100, 1 << 16)):
        w, plain = catchup.Written(keep=keep, keep_bytes=1 << 40, chunk_bytes=chunk), _Plain(keep, 1 << 40)
        n = 0
        for _ in range(3000):
            n += rnd.choice((1, 1, 1, 2, 7))  # numbers go up, with the gaps other nodes' entries leave
            body = b'[["e",{"n":%d,"d":"%s"}]]' % (n, b"x" * rnd.randrange(0, 400))
            w.add(n, body)
            plain.add(n, body)
            assert (w.size, w.count) == (plain.size, len(plain.ring))
            if rnd.random() < 0.05:
                lo = rnd.randrange(0, n + 1)
                hi = rnd.randrange(lo, n + 3)
                assert w.between(lo, hi) == plain.between(lo, hi)
        assert w.between(0, n + 1) == plain.between(0, n + 1)


def test_the_byte_bound_is_on_what_is_held():
    """Bounded by bytes, what is held (compressed chunks, the newest as they came) stays within the bound,
    and what is kept is the newest entries, whole, oldest first."""
    rnd = random.Random(11)
    for keep_bytes, chunk in ((10_000, 700), (40_000, 4096), (3_000, 64)):
        w, added, n = catchup.Written(keep=1 << 20, keep_bytes=keep_bytes, chunk_bytes=chunk), [], 0
        for _ in range(3000):
            n += rnd.choice((1, 1, 2))
            body = b'[["e",{"n":%d,"d":"%s"}]]' % (n, bytes(rnd.choice(b"abcdefgh ") for _ in range(rnd.randrange(0, 400))))
            w.add(n, body)
            added.append((n, body))
            assert w.held <= keep_bytes or w.count == 1
            kept = added[len(added) - w.count:]
            assert w.size == sum(len(b) for _, b in kept)
        assert w.between(0, n + 1) == kept[-catchup.MAX_ANSWER:]


def test_a_long_runs_deltas_are_kept_for_seconds_not_a_fraction_of_one():
    """Seed 4107 (tests/nemesis): a run's text deltas carry its text so far, so late in a long run an entry
    is 10-20 KB, and a bound on the bytes as written (8 MB) kept a few hundred of them: a node behind when
    Redis lost its keys got back a fraction of what it missed. Bounded by what is held, a 4,000-delta run of
    24 KB of text is kept whole (48 MB as written) in under 8 MB."""
    rnd = random.Random(1)
    words = ["".join(rnd.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rnd.randrange(2, 9))) for _ in range(2000)]
    w, text = catchup.Written(), ""
    for n in range(1, 4001):
        piece = rnd.choice(words) + " "
        text += piece
        w.add(n, orjson.dumps([["e", {"event": "TextDelta", "conversation_id": "c", "run_id": "r", "message_id": "m",
                                       "delta": piece, "draft": text, "kind": "text"}]]))
    assert w.count == 4000 and w.size > 5 * catchup.KEEP_BYTES and w.held <= catchup.KEEP_BYTES
    first = orjson.loads(w.between(0, 2)[0][1])
    assert first[0][1]["draft"] == text.split(" ")[0] + " "


def test_a_busy_node_holds_its_entries_in_a_fraction_of_their_bytes():
    import tracemalloc

    event = b'["e",{"conversation_id":"c-%06d","run_id":"r-1","message_id":"m-1","delta":"a few words","kind":"text"}]'
    body = b"[" + b",".join([event] * 8) + b"]"  # an entry: the events of one batch
    tracemalloc.start()
    w = catchup.Written()
    for n in range(1, 20_001):
        w.add(n, bytes(bytearray(body % ((n,) * 8))))
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert held < w.size / 3, (held, w.size)  # the plain list held more than its payloads' bytes
    assert w.count == catchup.KEEP_ENTRIES
    assert w.between(20_000 - 3, 20_001) == [(n, body % ((n,) * 8)) for n in (19_998, 19_999, 20_000)]
