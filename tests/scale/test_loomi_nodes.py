"""Loomi on several nodes of one bridge (in one process, on a private PostgreSQL and Redis), over
real sockets with the spec-model app: a device alternating between nodes across reconnects, with
replies, pings and events it missed in between, misses nothing and gets nothing twice."""

from __future__ import annotations

import pytest

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.loomi.helpers import new_token
from tests.scale.nodes import Nodes
from tests.waiting import until


def _ws(svc) -> str:
    return f"ws://127.0.0.1:{svc.ports['loomi']}/ws"


async def _run(app: LoomiApp, text: str) -> str:
    ack = await app.request("session.send", {"text": text})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    run_id = ack["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", run_id=run_id)
    return run_id


def _whole(app: LoomiApp, runs: dict) -> None:
    """Every run seen exactly once and whole; seqs strictly increasing; nothing dropped."""
    seqs = app.seqs()
    assert app.dropped == [], [f["seq"] for f in app.dropped]
    assert seqs == sorted(set(seqs)), seqs
    for run_id, text in runs.items():
        assert len(app.completed(run_id)) == 1, (run_id, [f["type"] for f in app.events])
        assert len(app.find("run.started", run_id=run_id)) == 1
        assert app.run_text(run_id) == app.completed(run_id)[0]["payload"]["text"] == "Echo: " + text


@pytest.fixture
async def nodes(engines, tmp_path):
    ns = Nodes(engines, tmp_path, ("loomi",))
    a, b = await ns.start("a"), await ns.start("b")
    yield ns, (a, b)
    await close_all()
    await ns.close()


async def test_a_device_alternating_between_nodes_misses_nothing(nodes):
    ns, (a, b) = nodes
    qr = await new_token(a)  # made on node a, redeemed on node b
    phone, other = LoomiApp("Pixel 9"), LoomiApp("Other phone")
    await phone.pair(dict(qr, url=_ws(b)))
    await other.pair(dict(await new_token(b), url=_ws(a)))
    runs: dict[str, str] = {}
    for k in range(6):
        here, there = (a, b) if k % 2 == 0 else (b, a)
        ok = await phone.connect(_ws(here))
        assert ok["payload"]["truncated"] is False, ok
        assert ok["seq"] == phone.processed
        text = f"turn {k} on {here.cfg.node_id}"
        runs[await _run(phone, text)] = text
        await phone.send("ping")  # a reply takes a seq between events
        await phone.until(lambda: len(phone.pongs) > k)
        tasks = await phone.request("task.list", {"limit": 5}, answer="task.list.result")
        assert tasks["type"] == "task.list.result"
        await phone.disconnect()
        # while it is away, the other phone (on the other node) runs something
        await other.connect(_ws(there))
        away = f"away {k}"
        runs[await _run(other, away)] = away
        await other.disconnect()
    await phone.connect(_ws(a))
    await phone.until(lambda: all(phone.completed(r) for r in runs))
    _whole(phone, runs)
    replayed = [f for f in phone.events if f.get("replayed")]
    assert {f["payload"]["run_id"] for f in replayed if f["type"] == "run.completed"} >= {
        r for r, t in runs.items() if t.startswith("away")}


async def test_a_node_behind_in_the_stream_skips_what_the_device_got_elsewhere(nodes):
    ns, (a, b) = nodes
    phone = LoomiApp()
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    ns.hold(b)  # node b is behind: it has not seen the next events yet
    runs = {}
    runs[await _run(phone, "while b lags")] = "while b lags"
    await phone.disconnect()
    ok = await phone.connect(_ws(b))  # b rebuilds the device: it was numbered up to events b has not seen
    assert ok["payload"]["truncated"] is False
    await phone.send("ping")  # a reply while b still has to skip those events for it
    await phone.until(lambda: phone.pongs)
    ns.release(b)  # b now sees them: the device got them from a, so it does not get them again
    runs[await _run(phone, "on b")] = "on b"
    await phone.disconnect()
    ok = await phone.connect(_ws(a))
    runs[await _run(phone, "back on a")] = "back on a"
    _whole(phone, runs)


async def test_replay_from_any_node_serves_the_frames_as_they_were_sent(nodes):
    ns, (a, b) = nodes
    phone = LoomiApp()
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    run = await _run(phone, "first")
    sent = {f["seq"]: f for f in phone.events}
    await phone.disconnect()
    phone.processed = min(sent) - 1  # the app lost what it had processed: it asks for all of it again
    phone.events.clear()
    ok = await phone.connect(_ws(b))
    assert ok["payload"]["truncated"] is False
    await phone.until(lambda: phone.completed(run))
    again = {f["seq"]: f for f in phone.events if f.get("replayed")}
    events = {s: f for s, f in sent.items() if f["type"] not in ("ack", "pong", "task.list.result", "error")}
    assert again.keys() == events.keys()
    for s, f in events.items():
        assert {k: v for k, v in again[s].items() if k != "replayed"} == f


async def test_a_device_replaced_on_another_node_is_closed_at_its_next_heartbeat(nodes):
    ns, (a, b) = nodes
    a.frontends["loomi"].ping_interval = 0.2
    phone = LoomiApp()
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    twin = LoomiApp()
    twin.device_id, twin.credential, twin.processed = phone.device_id, phone.credential, phone.processed
    await twin.connect(_ws(b))
    await until(lambda: phone.close_code is not None)
    assert phone.close_code == 4000


async def test_a_device_whose_node_stopped_catches_up_on_another(nodes):
    ns, (a, b) = nodes
    phone, other = LoomiApp(), LoomiApp("Other phone")
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    await other.pair(dict(await new_token(b), url=_ws(b)))
    runs = {await _run(phone, "on a"): "on a"}
    await phone.disconnect()
    await ns.stop(a)  # nothing numbers the phone any more
    for text in ("while away 1", "while away 2"):
        runs[await _run(other, text)] = text
    ok = await phone.connect(_ws(b))  # b numbers what it missed from its own rows, and replays it
    assert ok["payload"]["truncated"] is False
    await phone.until(lambda: all(phone.completed(r) for r in runs))
    runs[await _run(phone, "on b")] = "on b"
    _whole(phone, runs)


async def test_a_node_that_joined_later_serves_what_happened_before_it_joined(nodes):
    ns, (a, b) = nodes
    phone, other = LoomiApp(), LoomiApp("Other phone")
    await phone.pair(dict(await new_token(a), url=_ws(a)))
    await other.pair(dict(await new_token(b), url=_ws(b)))
    runs = {await _run(phone, "on a"): "on a"}
    await phone.disconnect()
    await ns.stop(a)
    runs[await _run(other, "before c")] = "before c"
    c = await ns.start("c")
    runs[await _run(other, "after c")] = "after c"
    ok = await phone.connect(_ws(c))  # from b's rows before c joined, then c's own
    assert ok["payload"]["truncated"] is False
    await phone.until(lambda: all(phone.completed(r) for r in runs))
    runs[await _run(phone, "on c")] = "on c"
    _whole(phone, runs)
