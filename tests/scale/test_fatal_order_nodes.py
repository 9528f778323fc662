"""The shape of chaos seed 2003's ``seq_not_increasing`` (issue 41, the 30-minute run at f5e6c3f) on two
nodes: a phone's request is answered in the turn its node closes it for events gone for good (``error
unavailable``: the bus's gap hook, loomi_adapter/server.py ``_gone``). Before, the answer took the seq after
the error's and was written first, and the spec's app dropped the error (a seq below one processed). Now the
error leaves first and the answer after it; the phone's next hello, on the other node, replays from there:
it misses nothing, gets nothing twice, and the command ran once.

The window is made certain with a gate (the request's result held after it ran, released in the same step
as the close), never a wait. Over real sockets, on the test's PostgreSQL and Redis; the phone is the spec's
model app (tests/conformance/loomi_client.py).
"""

from __future__ import annotations

import asyncio

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.loomi.helpers import new_token
from tests.scale.nodes import Nodes
from tests.scale.phones import loomi_run
from tests.waiting import until


def _ws(svc) -> str:
    return f"ws://127.0.0.1:{svc.ports['loomi']}/ws"


async def test_a_phone_closed_at_a_gap_as_its_answer_is_due_sees_the_error_and_misses_nothing(
        engines, tmp_path, monkeypatch):
    ns = Nodes(engines, tmp_path, ("loomi",))
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    try:
        a, b = await ns.start("a"), await ns.start("b")
        await phone.pair(dict(await new_token(a), url=_ws(a)))
        await other.pair(dict(await new_token(b), url=_ws(b)))
        fe = a.frontends["loomi"]
        entered = asyncio.Event()
        gate: asyncio.Future = asyncio.get_running_loop().create_future()
        run = fe.bridge.execute

        async def held(command, origin):
            result = await run(command, origin)
            entered.set()
            await gate
            return result

        monkeypatch.setattr(fe.bridge, "execute", held)
        rid = phone.next_request_id()
        await phone.send("session.send", {"text": "once", "request_id": rid})
        await until(entered.is_set, what="the send executed on a and held")
        monkeypatch.undo()
        gate.set_result(None)  # the worker wakes first...
        fe._gone([(1, 1)])  # ...and the phone is closed in the same step, as the bus reports events gone
        await phone.until(lambda: phone.close_code is not None)
        first = phone.connections[-1]
        assert first == sorted(set(first)), first  # strictly increasing on that socket
        assert phone.dropped == [], phone.dropped
        err, ack = phone.events[-2:]
        assert err["type"] == "error" and err["payload"]["code"] == "unavailable", err
        assert ack["type"] == "ack" and ack["payload"]["request_id"] == rid, ack
        run_id = ack["payload"]["result"]["run_id"]

        away = await loomi_run(other, "while away")  # on b, while the phone is away
        ok = await phone.connect(_ws(b))  # the phone's next hello, on the other node
        assert ok["payload"]["truncated"] is False and ok["seq"] == ack["seq"], ok
        await phone.until(lambda: phone.completed(run_id) and phone.completed(away), timeout=30)
        mine = await loomi_run(phone, "back")
        seqs = phone.seqs()
        assert phone.dropped == [] and seqs == sorted(set(seqs)), seqs
        for r, text in ((run_id, "once"), (away, "while away"), (mine, "back")):
            assert len(phone.find("run.started", run_id=r)) == 1 and len(phone.completed(r)) == 1
            assert phone.run_text(r) == "Echo: " + text
        assert len(phone.find("session.message", role="user", text="once")) == 1  # the command ran once
    finally:
        await close_all()
        await ns.close()
