"""A phone's ``run.delta``s add up to the ``run.completed`` that ends them, even when its node never got
the run's last deltas (issue 41, chaos seed 2018 ``deltas_incomplete`` and ``transcript_contradicts_client``;
loomi_adapter/runtexts.py).

What the history showed: n1 ran ``/slow 2`` for phone-1; Redis restarted at 51.95 s to 52.07 s, n1's
publishes failed and waited for a retry, and n1 was killed with -9 at 52.07 s. Its draft, saved to the
store at 52.0 s, held ``w1 ... w10``; the event of the delta `` w10`` was still in its publish queue, so no
node and no phone ever got it, and no number of the stream was missing (nothing to refetch, no hole, no
``truncated``). n1's next life closed the run as interrupted with the draft, and phone-2 on n3 got nine
deltas (``w1 ... w9``), then ``run.completed`` with ``w1 ... w10``. Now the node renders what its deltas fell
short of the message's completion, when they made a prefix of it, as one more ``run.delta`` before the
``run.completed`` (as lvmh does for a browser: tests/scale/test_lvmh_lost_deltas.py).

Here node a's Loomi front end never gets the run's last text delta, as if its origin had died with it.
"""

from __future__ import annotations

import pytest

from bridge_core.model import events as ev
from tests.conformance.loomi_client import LoomiApp, close_all
from tests.loomi.helpers import new_token
from tests.scale.nodes import Nodes

TEXT = "hello lost deltas"


@pytest.fixture
async def node(engines, tmp_path):
    ns = Nodes(engines, tmp_path, ("loomi",))
    a = await ns.start("a")
    yield a
    await close_all()
    await ns.close()


def _lose_the_last_delta(svc, text: str) -> None:
    """Node ``svc``'s Loomi front end never gets the text delta that completes ``text``."""
    front = svc.frontends["loomi"]
    on_event = front.on_event

    def lossy(n, e):
        if not (type(e) is ev.TextDelta and e.kind == "text" and e.text == text):
            on_event(n, e)

    subs = svc.bridge.hub._subs
    subs[subs.index(on_event)] = lossy


async def test_a_phone_gets_the_text_its_node_lost_the_last_delta_of(node):
    phone = LoomiApp()
    await phone.pair(dict(await new_token(node), url=f"ws://127.0.0.1:{node.ports['loomi']}/ws"))
    _lose_the_last_delta(node, "Echo: " + TEXT)
    before = phone.processed
    ack = await phone.request("session.send", {"text": TEXT})
    assert ack["payload"]["ok"] is True, ack
    run_id = ack["payload"]["result"]["run_id"]
    done = (await phone.wait_for("run.completed", run_id=run_id))["payload"]
    assert done["status"] == "completed" and done["text"] == "Echo: " + TEXT, done
    assert phone.run_text(run_id) == done["text"], [f["payload"].get("text") for f in phone.find("run.delta")]
    seqs = phone.seqs()
    assert seqs == sorted(set(seqs)) and phone.dropped == [], seqs
    kinds = [f["type"] for f in phone.events if f.get("run_id") == run_id]
    assert kinds.index("run.completed") == max(i for i, k in enumerate(kinds) if k == "run.delta") + 1, kinds

    # the replay from the stored frames is the same: the filler is a frame the phone was sent
    live = [f for f in phone.events if f.get("run_id") == run_id]
    phone.processed, phone.events = before, []
    hello = await phone.connect()
    assert hello["payload"]["truncated"] is False
    await phone.wait_for("run.completed", run_id=run_id)
    replayed = [f for f in phone.events if f.get("run_id") == run_id]
    assert [(f["seq"], f["type"], f["payload"]) for f in replayed] == [(f["seq"], f["type"], f["payload"])
                                                                      for f in live]


async def test_a_phone_gets_the_text_of_deltas_its_node_lost_mid_run(node):
    """Deltas lost mid-run (chaos seed 2000 at 2561942: a Redis loss judged a jump while the writers did not
    answer, 300 deltas of a streaming run never reached the node): the next delta's text so far goes on past
    what the phone was sent by more than its increment, and the rest comes first as one more ``run.delta``."""
    phone = LoomiApp()
    await phone.pair(dict(await new_token(node), url=f"ws://127.0.0.1:{node.ports['loomi']}/ws"))
    _lose_the_last_delta(node, "Echo: hello")  # the second delta (" hello") of four
    ack = await phone.request("session.send", {"text": TEXT})
    run_id = ack["payload"]["result"]["run_id"]
    done = (await phone.wait_for("run.completed", run_id=run_id))["payload"]
    assert done["text"] == "Echo: " + TEXT, done
    texts = [f["payload"]["text"] for f in phone.find("run.delta") if f.get("run_id") == run_id]
    assert "".join(texts) == done["text"], texts
    assert texts[:3] == ["Echo:", " hello", " lost"], texts  # the filler, then the delta that showed the hole
    seqs = phone.seqs()
    assert seqs == sorted(set(seqs)) and phone.dropped == [], seqs
