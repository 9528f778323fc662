"""A phone's first hello on a node that knew of no paired device: the events that node passed before it must
still reach the phone (issue 41, "Deltas missing without a trace"; the nemesis suite's seed 4111, about 1 run in
14: tests/nemesis/test_nemesis.py).

What the nodes' logs showed: phone-1, paired on n2, went to n1 3 s into the plan. n1 had stored no Loomi
rows: it learnt that a device was paired only by a look at the store every 5 s, and until then it stored
nothing. Its position was event 262; n3's rows, which served the phone's catch-up, reached 261 (n3 had not
stored 262 yet). The catch-up went to 261 and live numbering started after n1's position, so event 262, a
``run.delta``, was given to nobody: no seq gap, no ``truncated``.

Now every node of a cluster stores the frames of every event it renders, paired devices or not
(loomi_adapter/cluster.py ``wants``), so a node's own rows serve every event since its start.

The core's real store and Loomi's real rows and claims, no socket (as tests/scale/test_rows_never_stored.py).
"""

from __future__ import annotations

import orjson

from loomi_adapter import codec
from loomi_adapter.cluster import ClusterRegistry
from tests.scale.claims import delta_tail, hello, texts as _texts

T = 1_796_653_612.0


def _tail(n: int) -> bytes:
    return delta_tail(n, T)


async def test_a_first_hello_on_a_node_ahead_of_the_rows_misses_nothing(store):
    # both nodes up before any device is paired; the phone pairs on n2 and streams from it
    n1 = ClusterRegistry(store, "n1")
    await n1.prepare()
    n2 = ClusterRegistry(store, "n2")
    await n2.prepare()
    d, credential = await n2.pair(codec.DeviceInfo(model="Pixel 9"))
    d, _ = await hello(n2, d.device_id, credential, None)
    got = []
    for n in range(1, 6):
        for node in (n1, n2):
            if node.wants(n):
                out = node.record([_tail(n)], n)
                got += [f for dev, f in out if dev is d] if node is n2 else []
    store.flush()
    assert _texts(got) == ["e1", "e2", "e3", "e4", "e5"]
    last_seq = orjson.loads(got[-1])["seq"]

    # event 6 reaches n1 first (n2 has not stored it yet); the phone, cut off from n2, says hello to n1
    n2.detach(d)
    if n1.wants(6):
        n1.record([_tail(6)], 6)
    store.flush()
    d1, res = await hello(n1, d.device_id, credential, last_seq)
    live = []
    for n in (7, 8):
        assert n1.wants(n)
        live += [f for dev, f in n1.record([_tail(n)], n) if dev is d1]
    frames = list(res.frames)
    seqs = [orjson.loads(f)["seq"] for f in frames + live]
    assert seqs == list(range(last_seq + 1, last_seq + 1 + len(seqs))), seqs
    assert res.truncated is False
    assert _texts(frames + live) == ["e6", "e7", "e8"], "an event the node passed before its first device was lost"
