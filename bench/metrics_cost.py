"""What the metrics cost (docs/operations.md): ``python -m bench.metrics_cost`` prints one JSON line.

- ``write_ns``: an ``Outbox`` write of one frame with its front end's counter and without
  (``_sent``, the only addition on a socket's path), best of several rounds, and the difference.
- ``deliver_ns``: the bus lag's lines in ``Cluster._deliver`` (one ``ts`` read and ``time.time()``
  per delivered event), less an empty call; ``from_dict_ns``, what the same delivery already spends
  turning one text delta's data into its event, for scale.
- ``scrape_ms``: one scrape (``generate_latest`` of the bridge's registry) with C conversations, a
  pending approval in one in ten, three front ends: what the endpoint costs the loop every scrape
  interval, not per event.
"""

from __future__ import annotations

import collections
import json
import time
import timeit
from types import SimpleNamespace

ROUNDS = 7


def _outbox(counted: bool):
    from bridge_core.kit.frontend import FrontEndCounts
    from bridge_core.kit.outbox import Outbox

    async def send(data: bytes) -> None:  # never awaited: _sent is what is timed
        pass

    if counted:
        send.counts = FrontEndCounts()  # type: ignore[attr-defined]
    return Outbox(send)


def write_ns(n: int = 1_000_000) -> dict:
    plain, counted = _outbox(False), _outbox(True)
    best = {}
    for name, box in (("without", plain), ("with", counted)):
        best[name] = min(timeit.repeat(lambda b=box: b._sent(1, 100), number=n, repeat=ROUNDS)) / n * 1e9
    best["added"] = best["with"] - best["without"]
    return {k: round(v, 1) for k, v in best.items()}


def deliver_ns(n: int = 1_000_000) -> float:
    data = {"event": "text_delta", "ts": time.time()}
    holder = SimpleNamespace(lag=None)

    def line() -> None:
        ts = data.get("ts") if type(data) is dict else None
        if type(ts) is float:
            holder.lag = time.time() - ts

    def empty() -> None:
        pass

    def ns(fn) -> float:
        return min(timeit.repeat(fn, number=n, repeat=ROUNDS)) / n * 1e9

    return round(ns(line) - ns(empty), 1)


def from_dict_ns(n: int = 100_000) -> float:
    from bridge_core.model import events as ev
    from bridge_core.model.serialize import from_dict, to_dict

    data = to_dict(ev.TextDelta(conversation_id="c1", run_id="r1", message_id="m1", delta="word ", draft="a word "))
    return round(min(timeit.repeat(lambda: from_dict(data), number=n, repeat=ROUNDS)) / n * 1e9, 1)


def scrape_ms(conversations: int) -> float:
    from prometheus_client import generate_latest

    from bridge_core.kit.metrics import bridge_registry

    now = time.time()
    convs = {f"c{i}": SimpleNamespace(approvals={"a": SimpleNamespace(ts=now)} if i % 10 == 0 else {},
                                      clarifications={}, run=None) for i in range(conversations)}  # fmt: skip
    fe = SimpleNamespace(connections=lambda: 10, counts=SimpleNamespace(frames_sent=1, replay_events=1),
                         limiter=SimpleNamespace(wrong_total=0))  # fmt: skip
    bridge = SimpleNamespace(conversations=convs, runs_ended=collections.Counter(completed=5), cluster=None,
                             store=SimpleNamespace(failed=None, commits=1))  # fmt: skip
    registry = bridge_registry(bridge, {"pheby": fe, "loomi": fe, "lvmh": fe}, None, "bench")
    return round(min(timeit.repeat(lambda: generate_latest(registry), number=20, repeat=ROUNDS)) / 20 * 1e3, 2)


def main() -> None:
    print(json.dumps({"write_ns": write_ns(), "deliver_ns": deliver_ns(), "from_dict_ns": from_dict_ns(),
                      "scrape_ms": {str(c): scrape_ms(c) for c in (100, 10_000, 100_000)}}))  # fmt: skip


if __name__ == "__main__":
    main()
