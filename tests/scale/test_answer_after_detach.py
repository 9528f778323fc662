"""An answer a node numbers for a phone it detached, after it stored rows that number the phone away: the
phone's next hello replays those rows after the answer, in order (chaos seed 2701, ``seq_not_increasing``).

What the history showed (3 nodes, e95ca6e): n1 passed over events gone for good (1,041,315 numbers) and closed
phone-1 (``error unavailable``, seq 39968; its span carries the skip: ``passed_gone``), detaching it. n1 then
rendered the ~1,900 events it was behind, over rows its open span numbered for the phone away, 1081284 to
1083168. Then a request of the phone's that had waited out n1's stall was answered (``already_resolved``,
seq 39969): its span started at n1's next row with the seq after the answer's, 1081285, below the rows just
numbered. The next hello (last_seq 39969) rebuilt the window from the store: the newest of those rows
(1082785..1083168) and then the rows after the answer (1081285..1081382): seqs going back by 1,883.

The core's real store (SQLite) and Loomi's real rows and claims, no socket: the rule is where an answer's span
starts for a device no longer connected here (``ClusterRegistry.next_seq``): at the first row it was not given.
"""

from __future__ import annotations

import orjson
import pytest

from bridge_core.bridge.sqlite import Store
from loomi_adapter import codec
from loomi_adapter.cluster import ClusterRegistry
from tests.scale.claims import hello, with_tables

T = 1_796_631_000.0
WINDOW = 8


def _tail(n: int) -> bytes:
    body = orjson.dumps({"v": 1, "ts": T + n / 1000, "type": "run.delta", "task_id": "c1", "run_id": "r1",
                         "payload": {"run_id": "r1", "text": f"e{n}", "kind": "text", "iteration": 0}})
    return body[1:]


def _event(reg: ClusterRegistry, n: int) -> list[tuple]:
    assert reg.wants(n)
    return reg.record([_tail(n)], n)


def _replayed(frames: list[bytes]) -> list[tuple[int, str]]:
    return [(f["seq"], f["payload"]["text"]) for f in map(orjson.loads, frames)]


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "core.db")).open()
    with_tables(s)
    yield s
    s.close()


@pytest.mark.parametrize("gone", [False, True], ids=["closed", "closed-for-events-gone"])
async def test_an_answer_after_the_detach_is_followed_by_the_rows_stored_since(store, gone):
    n1 = ClusterRegistry(store, "n1", window=WINDOW)
    await n1.prepare()
    d, credential = await n1.pair(codec.DeviceInfo(model="Pixel 9"))
    d, _ = await hello(n1, d.device_id, credential, None)
    for n in range(1, 6):
        _event(n1, n)
    if gone:  # n1's delivery passed over 6..1000, gone for good: the phone is closed with a skip after them
        n1.passed_gone([(6, 1000)], [d])
        store.execute_later("INSERT INTO cluster_holes(node_id, life, n_from, n_to, at) VALUES(?,?,?,?,?)",
                            ("n1", n1.source, 6, 1000, T))
    error = n1.next_seq(d)  # the fatal error, numbered before the detach (server.py ``_apply``)
    n1.detach(d)
    for n in range(1001, 1001 + 2 * WINDOW):  # what n1 was behind: rows that number the phone away
        _event(n1, n)
    answer = n1.next_seq(d)  # a request's answer due after the error: the phone gets it
    assert answer == error + 1
    for n in range(1001 + 2 * WINDOW, 1004 + 2 * WINDOW):
        _event(n1, n)
    store.flush()

    d, res = await hello(n1, d.device_id, credential, answer)
    got = _replayed(res.frames)
    seqs = [s for s, _ in got]
    assert seqs == sorted(set(seqs)) and seqs[0] > answer, got
    # the window's rows, in the order n1 stored them: the newest ``WINDOW`` events after the detach
    assert [t for _, t in got] == [f"e{n}" for n in range(996 + 2 * WINDOW, 1004 + 2 * WINDOW)]
    assert res.truncated  # more than the window was stored since the answer's seq (and, gone, events were lost)
    if gone:  # the seqs after the events gone skip at least the window (passed_gone)
        assert seqs[0] > answer + 995
    # live, the numbering goes on above the replay
    (frame,) = [f for dev, f in _event(n1, 2000) if dev is d]
    assert orjson.loads(frame)["seq"] == seqs[-1] + 1
