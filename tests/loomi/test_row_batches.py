"""Replay rows queued in an open batch reach the store even when its writer takes the batch at once.

A batch of replay rows is one store write that stays open for more rows until the store's
writer thread takes it. A new batch must hold its first rows before it is queued: a writer
that takes it the moment it is queued (a thread switch right there, as on a loaded machine)
would otherwise commit it empty, refuse the rows added after, and lose them (several nodes:
a device moving between nodes missed an event in its replay). The store here runs each
queued write at once, the most eager writer there can be.
"""

from __future__ import annotations

import sqlite3

from loomi_adapter.cluster import ClusterRegistry
from loomi_adapter.devices import MIGRATIONS, Device, Registry


class EagerStore:
    """A store whose writer takes every queued write the moment it is queued."""

    shared = False
    local_dir = None

    def __init__(self) -> None:
        self.conn = sqlite3.connect(":memory:")
        for script in MIGRATIONS:
            self.conn.executescript(script)
        self.ticket = self.processed = 0

    def write_later(self, fn, *, barrier: bool = True) -> None:
        self.ticket += 1
        fn(self.conn)
        self.processed = self.ticket

    def rows(self, sql: str) -> list[tuple]:
        return self.conn.execute(sql).fetchall()


def test_a_new_batch_of_replay_rows_keeps_its_first_rows():
    store = EagerStore()
    reg = Registry(store)  # no journal: the rows go to the store as batches
    reg.devices["d1"] = Device("d1", "hash", reserved=10**6)
    reg.record([b'"type":"run.delta","n":1}'])
    reg.record([b'"type":"run.delta","n":2}'])
    assert store.rows("SELECT n, body FROM loomi_events ORDER BY n") == [
        (1, b'"type":"run.delta","n":1}'), (2, b'"type":"run.delta","n":2}')]


def test_a_new_batch_of_a_nodes_frames_keeps_its_first_rows():
    store = EagerStore()
    reg = ClusterRegistry(store, "n1")
    reg.record([b'"type":"run.delta","n":7}'], 7)
    reg.record([b'"type":"run.delta","n":8}'], 8)
    assert store.rows("SELECT m, n, body FROM loomi_frames ORDER BY m") == [
        (1, 7, b'"type":"run.delta","n":7}'), (2, 8, b'"type":"run.delta","n":8}')]
    assert store.rows("SELECT source, kept_from_n FROM loomi_sources") == [(reg.source, 7)]
