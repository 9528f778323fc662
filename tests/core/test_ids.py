"""Opaque ids: hex of the OS's random bytes, read ahead in a pool; never repeated, not across a fork."""

from __future__ import annotations

import os

from bridge_core.model import ids


def test_ids_have_their_shapes_and_do_not_repeat_across_several_refills():
    n = 3 * ids.POOL_BYTES // 16 + 7  # past three refills of the pool
    many = [ids.new_id() for _ in range(n)]
    assert all(ids.is_hex32(i) for i in many)
    assert len(set(many)) == n
    short = [ids.short_id() for _ in range(1000)]
    assert all(len(s) == 12 and int(s, 16) >= 0 for s in short)
    assert len(set(short)) == 1000


def test_the_pool_gives_each_byte_once_and_reads_the_os_source_once_per_pool(monkeypatch):
    reads = []
    counter = iter(range(1 << 30))

    def urandom(n):
        reads.append(n)
        return bytes(next(counter) % 256 for _ in range(n))

    monkeypatch.setattr(ids.os, "urandom", urandom)
    pool = ids._Pool(size=64)
    got = b"".join(pool.take(16) for _ in range(8))
    assert reads == [64, 64]
    assert got == bytes(i % 256 for i in range(128))  # in order, none skipped, none twice
    assert len(pool.take(100)) == 100  # larger than the pool: read for itself
    assert reads[-1] == 100


def test_a_forked_child_does_not_repeat_its_parents_ids():
    ids.new_id()  # the parent's pool holds unread bytes
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first ids, to the parent
        try:
            os.write(w, "".join(ids.new_id() for _ in range(4)).encode())
        finally:
            os._exit(0)
    os.close(w)
    child = b""
    while True:
        chunk = os.read(r, 4096)
        if not chunk:
            break
        child += chunk
    os.close(r)
    os.waitpid(pid, 0)
    parent = "".join(ids.new_id() for _ in range(4))
    assert len(child) == 128
    assert child.decode() != parent  # without the reset at fork both would read the same pooled bytes
