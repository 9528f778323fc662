"""Two nodes' lvmh batches of the same sessions take the sessions' rows in one order (lvmh_adapter/persistence.py
``_write``): on a shared store every node writes a bridge session's event rows and its maxima, and the maxima
went last in each node's own order of the sessions, so two batches could take two sessions' rows crosswise and one
lost a deadlock (a second's wait, then the batch run again). Here two connections to one private PostgreSQL write
one batch each, of sessions s1 and s2 in opposite orders, and stop after their first session's row until the
other reaches the same point (a barrier): taken crosswise, PostgreSQL ends one with a deadlock; in one order the
second waits for the first's commit, and both commit."""

from __future__ import annotations

import threading

import psycopg
import pytest

from bridge_core.scale.pgstore import PostgresStore
from lvmh_adapter.persistence import _MAXIMA, MIGRATIONS, _Batch, _write


class _Stepped:
    """A connection whose maxima are written one row at a time, with ``barrier`` after the first."""

    def __init__(self, conn, barrier: threading.Barrier):
        self.conn, self.barrier = conn, barrier

    def execute(self, sql, params=()):
        if sql == _MAXIMA:
            return self.executemany(sql, [params])
        return self.conn.execute(sql, params)

    def executemany(self, sql, rows):
        rows = list(rows)
        if sql != _MAXIMA:
            return self.conn.executemany(sql, rows)
        for i, row in enumerate(rows):
            self.conn.execute(sql, row)
            if i == 0:
                try:
                    self.barrier.wait(timeout=3)  # the other holds its first row, or waits on ours
                except threading.BrokenBarrierError:
                    pass


def _batch(order: list[str], seq0: int, own_write: bool) -> _Batch:
    b = _Batch()
    for sid in order:
        b.rows += [sid, seq0, 1000 + seq0, "message_end", "{}"]
        b.maxima[sid] = [seq0, seq0, 1000 + seq0, 0]
    if own_write:  # a session's own write in the batch too (its online flag), for the session written last
        b.sessions.append((order[-1], "online", None, None, True))
    return b


@pytest.mark.parametrize("own_write", [False, True], ids=["maxima-only", "with-a-session-write"])
def test_two_nodes_batches_of_the_same_sessions_take_their_rows_in_one_order(postgres, own_write):
    url = postgres.new_database()
    store, other = PostgresStore(url).open(), PostgresStore(url).open()  # two nodes: a writer's row each
    try:
        store.migrate("lvmh", MIGRATIONS)
        store.flush()
        store.submit(lambda c: c.executemany("INSERT INTO sessions(id, info, source) VALUES(?, '{}', 'bridge')",
                                             [("s1",), ("s2",)])).result(10)  # fmt: skip
        barrier = threading.Barrier(2)
        errors: list = []

        def node(of: PostgresStore, order: list[str], seq0: int) -> None:
            conn = of._connect()
            try:
                conn.execute("BEGIN")
                _write(_Stepped(conn, barrier), _batch(order, seq0, own_write), ordered=True)
                conn.execute("COMMIT")
            except psycopg.Error as exc:
                errors.append(exc)
            finally:
                conn.close()

        threads = [threading.Thread(target=node, args=(store, ["s1", "s2"], 10)),
                   threading.Thread(target=node, args=(other, ["s2", "s1"], 20))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not any(t.is_alive() for t in threads)
        assert errors == [], errors  # crosswise, one of them: DeadlockDetected
        assert store.query("SELECT id, lastSeq FROM sessions ORDER BY id") == [("s1", 20), ("s2", 20)]
        assert store.query("SELECT count(*) FROM events") == [(4,)]
    finally:
        store.close()
        other.close()
