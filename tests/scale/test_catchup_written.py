"""What a node keeps of the entries it wrote, for a refetch (bridge_core/scale/catchup.py ``Written``):
compressed in chunks, it answers exactly what a plain list of the last entries would."""

from __future__ import annotations

import collections
import random

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
    rnd = random.Random(7)
    for keep, keep_bytes, chunk in ((50, 10_000, 700), (3, 1 << 20, 64), (5000, 40_000, 4096), (100, 1000, 1 << 16)):
        w, plain = catchup.Written(keep=keep, keep_bytes=keep_bytes, chunk_bytes=chunk), _Plain(keep, keep_bytes)
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
