"""A connection's seqs strictly increase through its fatal error (issue 41, chaos seed 2003:
``seq_not_increasing``, ``task.list.result`` seq 5589 written before ``error unavailable`` seq 5588).

A socket closed from synchronous code (the cluster's events gone for good, a revoke, an overflow, a
heartbeat) took its error's seq at once but put the frame into the outbox later, from the closing task;
a request finishing in between (its worker woke first) took the next seq and was queued first, and the
app, dropping a seq below one it processed, never saw the error. Now the protocol numbers the fatal error
and queues it in one step (``LoomiProtocol.fail``): an answer due while the close is written follows it.

The window is made certain with a gate, not a wait: the request's execution is held after it ran, and the
test releases it and closes the socket in the same step (the worker then wakes before the closing task
runs). Over a real socket, the frames as the phone reads them.
"""

from __future__ import annotations

import asyncio

import orjson

from bridge_core.model.errors import Unavailable
from loomi_adapter.errors import CLOSE_POLICY, Replaced
from tests.waiting import until

from .helpers import Client, pair, resume
from .protocol_pair import Node


def _gate(monkeypatch, fe) -> tuple[asyncio.Event, asyncio.Future]:
    """Hold every command's result after it ran until the returned future is done."""
    entered = asyncio.Event()
    gate: asyncio.Future = asyncio.get_running_loop().create_future()
    run = fe.bridge.execute

    async def held(command, origin):
        result = await run(command, origin)
        entered.set()
        await gate
        return result

    monkeypatch.setattr(fe.bridge, "execute", held)
    return entered, gate


async def _kicked_mid_answer(loomi, monkeypatch, c: Client, type_: str, payload: dict) -> list[dict]:
    """``c`` sends a request; as its answer is due, the node's events are gone for good (the cluster's
    hook, loomi_adapter/server.py ``_gone``): every frame the socket wrote until it closed."""
    fe = loomi.frontends["loomi"]
    entered, gate = _gate(monkeypatch, fe)
    await c.send(type_, payload)
    await until(entered.is_set, what="the request executed and held")
    monkeypatch.undo()
    gate.set_result(None)  # the worker wakes first...
    fe._gone([(1, 1)])  # ...and the socket is closed in the same step, as the bus reports a loss
    frames, code = await c.closed()
    assert code == CLOSE_POLICY, code  # ``unavailable``'s close code
    return frames


def _increasing(frames: list[dict]) -> list[int]:
    seqs = [f["seq"] for f in frames]
    assert all(a < b for a, b in zip(seqs, seqs[1:])), str([(f["type"], f["seq"]) for f in frames])
    return seqs


async def test_a_reply_due_as_the_socket_is_kicked_follows_the_error(loomi, monkeypatch):
    c, creds = await pair(loomi)
    try:
        frames = await _kicked_mid_answer(loomi, monkeypatch, c, "task.list", {"request_id": "t1"})
    finally:
        await c.http.close()
    _increasing(frames)
    err, ans = frames
    assert err["type"] == "error" and err["payload"]["code"] == "unavailable" and err["payload"]["fatal"]
    assert ans["type"] == "task.list.result" and ans["payload"]["request_id"] == "t1"

    # the phone's next socket: it resumes from the highest seq it processed
    c2, ok = await resume(loomi, creds, last_seq=ans["seq"])
    try:
        assert ok["type"] == "hello.ok" and ok["seq"] == ans["seq"] and ok["payload"]["truncated"] is False
        again = await c2.request("task.list", {"request_id": "t2"}, answer="task.list.result")
        assert again["seq"] > ans["seq"]
        _increasing(c2.frames)
    finally:
        await c2.close()


async def test_an_ack_due_as_the_socket_is_kicked_follows_the_error_and_the_command_runs_once(
        loomi, monkeypatch):
    c, creds = await pair(loomi)
    try:
        frames = await _kicked_mid_answer(loomi, monkeypatch, c, "session.send",
                                          {"text": "once", "request_id": "s1"})
    finally:
        await c.http.close()
    _increasing(frames)
    types = [f["type"] for f in frames]
    assert types[-2:] == ["error", "ack"], types
    assert frames[-2]["payload"]["code"] == "unavailable" and frames[-1]["payload"]["request_id"] == "s1"
    run_id = frames[-1]["payload"]["result"]["run_id"]
    last = frames[-1]["seq"]

    c2, ok = await resume(loomi, creds, last_seq=last)
    try:
        assert ok["type"] == "hello.ok" and ok["seq"] == last and ok["payload"]["truncated"] is False
        again = await c2.request("session.send", {"text": "once", "request_id": "s1"})  # a repeat: answered
        assert again["type"] == "ack" and again["payload"]["result"]["run_id"] == run_id, again

        def ended(f: dict) -> bool:
            return f["type"] == "run.completed" and f["payload"]["run_id"] == run_id

        if not any(ended(f) for f in frames + c2.frames):  # it ends after the first socket closed: shown here
            await c2.recv_until(ended)
        _increasing(c2.frames)
        assert all(f["seq"] > last for f in c2.frames[1:])  # past hello.ok: nothing the phone had again
        events = [f for f in frames + c2.frames if f["type"] not in ("hello.ok", "ack", "error")]
        assert len({f["seq"] for f in events}) == len(events)  # no event twice
        # the command ran once: one user message, one start, one end, over both sockets
        mine = [f["type"] for f in events if f.get("run_id") == run_id]
        assert [mine.count(t) for t in ("session.message", "run.started", "run.completed")] == [1, 1, 1], mine
    finally:
        await c2.close()


def test_the_fatal_error_is_numbered_and_queued_in_one_step():
    """The rule itself, on the protocol object (no socket): ``fail`` puts the error into ``out`` with the
    device's next seq; a request finishing after it is answered behind it; a second fatal error has no
    frame, nor one without a farewell."""
    node = Node()
    d = node.pair("d1")
    phone = node.phone()
    phone.hello(d)
    phone.send("task.list", {"request_id": "t1"})
    (job,) = phone.jobs
    node.notify("before")
    assert [(f["type"], f["seq"]) for f in phone.frames()] == [("hello.ok", 0), ("notification", 1)]
    close = phone.proto.fail(Unavailable("Events were lost in the cluster; connect again to resync"))
    assert close.queued and orjson.loads(close.frame)["seq"] == 2
    phone.proto.done(job, [])  # its answer was due: numbered and queued after the error
    assert phone.proto.fail(Replaced()).frame is None  # one farewell per socket
    assert [(f["type"], f["seq"]) for f in phone.frames()] == [("error", 2), ("task.list.result", 3)]

    other = Node()
    d2 = other.pair("d2")
    phone2 = other.phone()
    phone2.hello(d2)
    phone2.frames()
    close = phone2.proto.fail(Replaced(), farewell=False)  # another node numbers the device now
    assert close.frame is None and phone2.frames() == [] and other.numbering.next_seq(d2) == 1
