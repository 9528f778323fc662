"""A phone's catch-up over numbers no node has rows for is ``truncated`` only for what the events served after
them lack (chaos seed 2003: ``truncated_under_window``; bridge_core/scale/gone.py ``happened``, ``Held``).

A Redis restart lost a run's start as it streamed; its node sent the start again after the loss, numbered after
the numbers lost and stamped before them. A node started then has no rows of any node after a phone's cursor up
to its own first event, so it asks the core's store whether something was done in between (``gone.happened``):
the store shows the run's start there, and the phone was told ``truncated`` with every event replayed. Now what
the store shows counts only if the frames this node serves from its own first event lack it (the run's start,
its end, a message): the resent start is among them, so nothing is missing; a run whose start they lack still
is. The core's real store (SQLite) and Loomi's real rows, no socket: the rule is the store's read.
"""

from __future__ import annotations

import orjson

from bridge_core.bridge.sqlite import Store
from bridge_core.scale import gone
from loomi_adapter.cluster import ClusterRegistry
from loomi_adapter.devices import MIGRATIONS
from loomi_adapter.history import plan_catchup

T = 1_796_560_000.0


def _frame(kind: str, ts: float, run: str, **payload) -> bytes:
    body = orjson.dumps({"v": 1, "ts": ts, "type": kind, "task_id": "c1", "run_id": run, "payload": payload})
    return body[1:]  # stored without the opening brace (loomi_adapter/cluster.py)


def _setup(tmp_path):
    store = Store(str(tmp_path / "core.db")).open()
    store.migrate("loomi", MIGRATIONS)

    def write(c) -> None:
        # what the store records: a run started at T+2 (its start lost, resent after the loss), its user message
        c.execute("INSERT INTO runs(run_id, conversation_id, status, started_at) VALUES('r1','c1','running',?)",
                  (T + 2.0,))  # fmt: skip
        c.execute("INSERT INTO messages(conversation_id, message_id, role, text, ts) VALUES('c1','u-1','user','hi',?)",
                  (T + 1.99,))  # fmt: skip
        # another node's rows: events 1..10, the last stamped T
        c.executemany("INSERT INTO loomi_frames(source, m, n, body) VALUES('n2:aa', ?, ?, ?)",
                      [(n, n, _frame("run.delta", T - 1 + n / 10, "r0", text="tok ")) for n in range(1, 11)])
        c.execute("INSERT INTO loomi_sources(source, node, kept_from_n) VALUES('n2:aa', 'n2', 1)")

    store.write_later(write)
    store.flush()
    reg = ClusterRegistry(store, "n1")
    return store, reg


def test_a_resent_run_start_served_after_the_gap_is_not_missing(tmp_path):
    store, reg = _setup(tmp_path)
    try:
        # this node, started since, rendered from event 20 (stamped T+3): then the resent user message and run
        # start, numbered after it and stamped before it, then the run's deltas
        reg.recent.extend([(1, 20, _frame("run.delta", T + 3.0, "r0", text="tok ")),
                           (2, 21, _frame("session.message", T + 1.99, "r1", message_id="u-1", role="user")),
                           (3, 22, _frame("run.started", T + 2.0, "r1", run_id="r1")),
                           (4, 23, _frame("run.delta", T + 5.0, "r1", text="tok "))])  # fmt: skip
        others = [("n2:aa", 1, 10)]
        assert plan_catchup(5, 20, others, {}, reg._happened) == ([_range("n2:aa", 6, 10)], False)
    finally:
        store.close()


def test_a_run_whose_start_nothing_served_holds_is_still_missing(tmp_path):
    store, reg = _setup(tmp_path)
    try:
        # the frames this node serves hold neither the run's start nor the user's message: gone
        reg.recent.extend([(1, 20, _frame("run.delta", T + 3.0, "r0", text="tok ")),
                           (2, 21, _frame("run.delta", T + 5.0, "r1", text="tok "))])  # fmt: skip
        assert plan_catchup(5, 20, [("n2:aa", 1, 10)], {}, reg._happened) == ([_range("n2:aa", 6, 10)], True)
    finally:
        store.close()


def test_what_is_held():
    held = gone.Held(frozenset({"r1"}), frozenset({"r2"}), frozenset({"u-1"}))
    assert held.message("u-1") and held.message("draft-r1") and held.message("draft-r2")
    assert not held.message("u-2") and not held.message("draft-r3") and not gone.Held().message("draft-")


def _range(source: str, a: int, b: int):
    from loomi_adapter.history import Range

    return Range(source, a, b)
