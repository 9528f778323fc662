"""Per-device seq, the replay window, truncation, restarts, slow devices."""

from __future__ import annotations

import sqlite3
import threading

from bridge_core.model import events as ev
from bridge_core.model.commands import Origin, SendMessage

from tests.waiting import turns, until

from .helpers import notify, pair, resume, wait_for

CLI = Origin(surface="cli", decided_by="local")


async def run_to_end(svc, text: str, conversation_id=None):
    """Start a run from outside Loomi and wait until it finished."""
    res = await svc.bridge.execute(SendMessage(text=text, conversation_id=conversation_id), CLI)
    await wait_for(lambda: svc.bridge.conversations[res.conversation_id].run is None)
    return res


async def test_reconnect_replays_the_gap_in_order(loomi):
    c, creds = await pair(loomi)
    await c.send("session.send", {"text": "first", "request_id": "r1"})
    live = await c.recv_until(lambda f: f["type"] == "run.completed")
    last = live[-1]["seq"]
    await c.close()
    await wait_for(lambda: loomi.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)

    res = await run_to_end(loomi, "while you were away")
    c2, ok = await resume(loomi, creds, last_seq=last)
    assert ok["type"] == "hello.ok" and ok["payload"]["truncated"] is False
    replayed = await c2.recv_until(lambda f: f["type"] == "run.completed")
    assert all(f["replayed"] is True for f in replayed)
    seqs = [f["seq"] for f in replayed]
    assert seqs == list(range(last + 1, last + 1 + len(seqs)))  # events only, in order, no gaps, no duplicates
    assert ok["seq"] == last  # hello.ok carries the app's last_seq; the replay follows above it
    assert [f["type"] for f in replayed] == [
        "task.created", "session.message", "run.started", "run.delta", "run.delta", "run.delta", "run.delta",
        "run.delta", "run.completed",
    ]
    assert replayed[-1]["payload"]["text"] == "Echo: while you were away"
    assert replayed[-1]["task_id"] == res.conversation_id and replayed[-1]["event_id"] == f"e_{seqs[-1]}"
    # then live frames, never marked
    await c2.send("ping")
    pong = await c2.recv()
    assert pong["type"] == "pong" and "replayed" not in pong and pong["seq"] == seqs[-1] + 1
    await c2.close()


async def test_replayed_frames_are_the_original_frames(loomi):
    c, creds = await pair(loomi)
    await c.send("session.send", {"text": "a b c", "request_id": "r1"})
    live = [f for f in await c.recv_until(lambda f: f["type"] == "run.completed") if f["type"] != "ack"]
    await c.close()
    await wait_for(lambda: loomi.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    c2, ok = await resume(loomi, creds, last_seq=0)
    replayed = await c2.recv_until(lambda f: f["type"] == "run.completed")
    assert replayed == [dict(f, replayed=True) for f in live]
    await c2.close()


async def test_gap_outside_the_window_is_truncated(loomi):
    c, creds = await pair(loomi)
    await c.close()
    await wait_for(lambda: loomi.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    notify(loomi, 600)
    c2, ok = await resume(loomi, creds, last_seq=0)
    assert ok["payload"]["truncated"] is True and ok["seq"] == 0
    frames = [await c2.recv() for _ in range(512)]
    assert [f["payload"]["text"] for f in frames] == [f"n{i}" for i in range(88, 600)]
    assert [f["seq"] for f in frames] == list(range(89, 601))
    await c2.send("ping")
    assert (await c2.recv())["type"] == "pong"  # nothing more was replayed
    await c2.close()


async def test_in_window_gap_and_up_to_date_device_are_not_truncated(loomi):
    c, creds = await pair(loomi)
    await c.close()
    await wait_for(lambda: loomi.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    notify(loomi, 512)
    c2, ok = await resume(loomi, creds, last_seq=0)
    assert ok["payload"]["truncated"] is False
    frames = [await c2.recv() for _ in range(512)]
    assert frames[0]["seq"] == 1 and frames[-1]["seq"] == 512
    await c2.close()
    await wait_for(lambda: loomi.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    c3, ok3 = await resume(loomi, creds, last_seq=512)
    assert ok3["payload"]["truncated"] is False and ok3["seq"] == 512
    await c3.send("ping")
    pong = await c3.recv()
    assert pong["type"] == "pong" and pong["seq"] == 513
    await c3.close()


async def test_last_seq_the_server_never_gave_is_truncated(loomi):
    c, creds = await pair(loomi)
    await c.close()
    c2, ok = await resume(loomi, creds, last_seq=10_000)
    assert ok["payload"]["truncated"] is True and ok["seq"] == 10_000
    await c2.send("ping")  # the numbering moved above it, so the app keeps every frame that follows
    assert (await c2.recv())["seq"] == 10_001
    await c2.close()


async def test_every_online_device_gets_every_event_with_its_own_seq(loomi):
    a, _ = await pair(loomi, "A")
    b, _ = await pair(loomi, "B")
    res = await run_to_end(loomi, "to both")
    fa = await a.recv_until(lambda f: f["type"] == "run.completed")
    fb = await b.recv_until(lambda f: f["type"] == "run.completed")
    strip = lambda fs: [(f["type"], f["payload"]) for f in fs if f["run_id"] == res.run_id]  # noqa: E731
    assert strip(fa) == strip(fb) and len(strip(fa)) > 3
    for fs in (fa, fb):
        seqs = [f["seq"] for f in fs]
        assert seqs == sorted(set(seqs))
    await a.close()
    await b.close()


async def test_seq_continues_across_a_clean_restart(service_factory):
    svc = await service_factory(adapters=("loomi",))
    c, creds = await pair(svc)
    await c.send("session.send", {"text": "before restart", "request_id": "r1"})
    frames = await c.recv_until(lambda f: f["type"] == "run.completed")
    last = frames[-1]["seq"]
    await svc.stop()
    _, close = await c.closed()
    assert close == 1001  # going away
    await c.close()

    svc2 = await service_factory(adapters=("loomi",))
    # the device saw everything: nothing to replay, nothing lost
    c2, ok = await resume(svc2, creds, last_seq=last)
    assert ok["type"] == "hello.ok" and ok["seq"] == last and ok["payload"]["truncated"] is False
    await c2.send("ping")
    assert (await c2.recv())["seq"] == last + 1
    await c2.close()
    await wait_for(lambda: svc2.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    # a device behind the restart point: the window is in the database, it replays
    c3, ok3 = await resume(svc2, creds, last_seq=last - 3)
    assert ok3["seq"] == last - 3 and ok3["payload"]["truncated"] is False
    replayed = await c3.recv_until(lambda f: f["type"] == "run.completed")
    events = [f for f in frames if f["type"] not in ("ack", "error") and f["seq"] > last - 3]
    assert replayed == [dict(f, replayed=True) for f in events]
    await c3.close()


async def test_seq_jumps_past_the_reserved_block_after_a_crash(service_factory):
    svc = await service_factory(adapters=("loomi",))
    c, creds = await pair(svc)
    await c.send("session.send", {"text": "before crash", "request_id": "r1"})
    frames = await c.recv_until(lambda f: f["type"] == "run.completed")
    last = frames[-1]["seq"]
    fe = svc.frontends["loomi"]

    async def crash() -> None:  # the exact seq is never stored, as when the process dies
        return None

    fe.registry.persist_exact = crash
    await svc.stop()
    await c.close()
    svc2 = await service_factory(adapters=("loomi",))
    (row,) = svc2.bridge.store.query("SELECT seq_reserved FROM loomi_devices")
    block = svc2.frontends["loomi"].registry.block
    c2, ok = await resume(svc2, creds, last_seq=last - 2)
    # nothing sent was lost: the window is in the database; numbering goes on above the reserved block
    assert ok["seq"] == last - 2 and ok["payload"]["truncated"] is False
    replayed = await c2.recv_until(lambda f: f["type"] == "run.completed")
    assert [f["seq"] for f in replayed] == [f["seq"] for f in frames if f["seq"] > last - 2 and f["type"] != "ack"]
    await c2.send("ping")
    assert (await c2.recv())["seq"] == block + 1  # above anything it was ever given
    assert row[0] == 2 * block  # a fresh block reserved at start
    await c2.close()


async def test_seq_and_window_are_stored_in_batches_not_a_commit_per_event(loomi):
    c, creds = await pair(loomi)
    store = loomi.bridge.store
    await store.aflush()
    commits = store.commits
    notify(loomi, 1000)
    await store.aflush()
    assert store.commits - commits < 100  # the writer takes whatever is queued into one commit
    frames = [await c.recv() for _ in range(1000)]
    assert [f["seq"] for f in frames] == list(range(1, 1001))
    await loomi.frontends["loomi"].registry.flush_rows()  # the journaled rows reach the tables in batches
    # each event once (whatever the number of devices), the window and its floor's row, and rows not yet pruned
    (n, low, high), = store.query("SELECT COUNT(*), MIN(n), MAX(n) FROM loomi_events")
    assert high == 1000 and 512 < n <= 512 + 1 + 64 and low == 1000 - n + 1
    assert store.query("SELECT from_n, seq_offset FROM loomi_segments") == [(1, 0)]  # seq = n for all of them
    await c.close()


async def test_long_bursts_reserve_blocks_and_stay_monotonic(loomi):
    fe = loomi.frontends["loomi"]
    fe.registry.block = 64
    c, creds = await pair(loomi)
    c_dev = fe.registry.devices[creds["device_id"]]
    notify(loomi, 500)
    frames = [await c.recv() for _ in range(500)]
    assert [f["seq"] for f in frames] == list(range(1, 501))
    await loomi.bridge.store.aflush()
    (row,) = loomi.bridge.store.query("SELECT seq_reserved FROM loomi_devices")
    assert row[0] >= c_dev.seq
    await c.close()


async def test_the_next_block_is_reserved_ahead_and_holds_only_the_frames_above_the_last_one(loomi):
    """docs/loomi.md, "Seq across restarts": the next block's write is queued half a block ahead and holds
    no frame whose seq the block recorded before covers; the first frame above it waits for its commit."""
    fe = loomi.frontends["loomi"]
    store = loomi.bridge.store
    fe.registry.block = 16
    c, creds = await pair(loomi)
    d = fe.registry.devices[creds["device_id"]]
    await store.aflush()
    (reserved,) = store.query_one("SELECT seq_reserved FROM loomi_devices WHERE device_id=?", (d.device_id,))
    assert reserved == d.seqs.reserved and reserved - d.seq > 8  # a committed block, more than half of it ahead
    gate = threading.Event()
    store.submit(lambda conn: gate.wait(30), barrier=False)  # the store's commits stall behind this write
    start = d.seq
    n = reserved - start + 4  # four frames above the recorded block
    notify(loomi, n)
    assert d.seqs.reserved > reserved  # the next block was asked for, half a block before it was needed
    got = [await c.recv() for _ in range(reserved - start)]  # everything the recorded block covers leaves
    assert [f["seq"] for f in got] == list(range(start + 1, reserved + 1))
    held = d.conn.outbox
    assert len(held) == 4 and store.processed < store.ticket  # the frames above it wait for the next block
    gate.set()
    rest = [await c.recv() for _ in range(4)]
    assert [f["seq"] for f in rest] == list(range(reserved + 1, reserved + 5))
    (now,) = store.query_one("SELECT seq_reserved FROM loomi_devices WHERE device_id=?", (d.device_id,))
    assert now >= reserved + 4  # committed before they left
    await c.close()


async def test_a_reconnect_is_answered_and_replayed_while_the_store_is_busy(loomi):
    """The device's last-seen time and info (for `loomi devices`, in no frame) are written behind no frame:
    hello.ok and the replay after it leave without waiting for that write's commit."""
    c, creds = await pair(loomi)
    notify(loomi, 3)
    got = [await c.recv() for _ in range(3)]
    await c.close()
    store = loomi.bridge.store
    await store.aflush()
    (before,) = store.query_one("SELECT last_seen FROM loomi_devices WHERE device_id=?", (creds["device_id"],))
    gate = threading.Event()
    store.submit(lambda conn: gate.wait(30), barrier=False)  # the store's commits stall behind this write
    try:
        c2, ok = await resume(loomi, creds, last_seq=got[0]["seq"])
        assert ok["type"] == "hello.ok"
        replay = [await c2.recv() for _ in range(2)]
        assert [(f["seq"], f["payload"]["text"]) for f in replay] == [(g["seq"], g["payload"]["text"]) for g in got[1:]]
        (still,) = store.query_one("SELECT last_seen FROM loomi_devices WHERE device_id=?", (creds["device_id"],))
        assert still == before  # its write is queued behind the stalled one
    finally:
        gate.set()
    await store.aflush()
    (after,) = store.query_one("SELECT last_seen FROM loomi_devices WHERE device_id=?", (creds["device_id"],))
    assert after > before
    await c2.close()


async def test_a_device_is_not_dropped_for_frames_waiting_on_the_store(loomi):
    # far more frames than the outbox holds wait for a commit the store has not made: the wait is the
    # server's, not the device's (it reads everything), so it is not disconnected as slow
    fe = loomi.frontends["loomi"]
    fe.outbox_items = 50
    c, creds = await pair(loomi)
    gate = threading.Event()
    loomi.bridge.store.submit(lambda conn: gate.wait(30))  # the store's commits stall behind this write
    notify(loomi, 400)
    held = fe.registry.devices[creds["device_id"]].conn.outbox
    await until(lambda: len(held) > fe.outbox_items, what="more frames held for the commit than the outbox holds")
    gate.set()
    got = [await c.recv() for _ in range(400)]
    assert [f["payload"]["text"] for f in got] == [f"n{i}" for i in range(400)]
    assert fe.registry.devices[creds["device_id"]].conn is not None
    await c.close()


async def test_a_slow_device_is_disconnected_and_recovers_by_replay(loomi):
    fe = loomi.frontends["loomi"]
    fe.outbox_items = 50
    c, creds = await pair(loomi)
    device = fe.registry.devices[creds["device_id"]]
    c.ws._response.connection.transport.pause_reading()  # the device stops reading: the socket fills
    sent = 0
    while device.conn is not None:  # bursts, each committed, until the released frames overflow its outbox
        assert sent < 100_000, "never disconnected"
        for i in range(sent, sent + 100):
            loomi.bridge.publish(ev.Notification(conversation_id=None, message_id=f"m{i}", text=f"n{i}"))
        sent += 100
        await loomi.bridge.store.aflush()
        await turns(1)  # the commit's flush runs
    c.ws._response.connection.transport.resume_reading()
    frames, close = await c.closed()
    errors = [f for f in frames if f["type"] == "error"]
    assert [e["payload"]["code"] for e in errors] == ["slow_consumer"]
    assert errors[0]["payload"]["fatal"] is True
    assert close == 4009
    await c.close()
    last = max([0] + [f["seq"] for f in frames if f["type"] == "notification"])
    fe.outbox_items = 2048
    c2, ok = await resume(loomi, creds, last_seq=last)
    missed = [f["payload"]["text"] for f in frames if f["type"] == "notification"]
    if ok["payload"]["truncated"] is False:  # the gap is within the replay window: replayed in order
        got = [await c2.recv() for _ in range(sent - len(missed))]
        assert [f["payload"]["text"] for f in got] == [f"n{i}" for i in range(len(missed), sent)]
    await c2.close()


async def test_a_device_from_before_the_stored_window_is_truncated_once(service_factory):
    svc = await service_factory(adapters=("loomi",))
    c, creds = await pair(svc)
    notify(svc, 3)
    frames = [await c.recv() for _ in range(3)]
    await svc.stop()
    await c.close()
    # as a database from before the replay table: the window was in memory, its floor unknown
    conn = sqlite3.connect(svc.bridge.store.path)
    conn.execute("DELETE FROM loomi_events")
    conn.execute("DELETE FROM loomi_segments")
    conn.execute("UPDATE loomi_devices SET replay_floor=-1")
    conn.commit()
    conn.close()
    svc2 = await service_factory(adapters=("loomi",))
    c2, ok = await resume(svc2, creds, last_seq=frames[0]["seq"])
    assert ok["payload"]["truncated"] is True  # those events are gone, and it says so
    await c2.close()
    await wait_for(lambda: svc2.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    notify(svc2, 2)
    c3, ok3 = await resume(svc2, creds, last_seq=ok["seq"])
    got = [await c3.recv() for _ in range(2)]
    assert ok3["payload"]["truncated"] is True  # still below what was lost
    assert [f["payload"]["text"] for f in got] == ["n0", "n1"]  # but the new events are kept
    await c3.close()
    await wait_for(lambda: svc2.frontends["loomi"].registry.devices[creds["device_id"]].conn is None)
    c4, ok4 = await resume(svc2, creds, last_seq=got[-1]["seq"])
    assert ok4["payload"]["truncated"] is False
    await c4.close()


async def test_revoking_a_device_deletes_its_stored_segments(loomi):
    c, creds = await pair(loomi)
    notify(loomi, 5)
    registry = loomi.frontends["loomi"].registry
    await registry.flush_rows()
    assert loomi.bridge.store.query("SELECT COUNT(*) FROM loomi_segments")[0][0] == 1
    await loomi.frontends["loomi"].revoke(creds["device_id"])
    assert loomi.bridge.store.query("SELECT COUNT(*) FROM loomi_segments")[0][0] == 0
    await c.close()


async def test_rows_journaled_before_a_revoke_do_not_bring_its_segments_back(loomi):
    c, creds = await pair(loomi)
    registry = loomi.frontends["loomi"].registry
    notify(loomi, 5)  # journaled; the batch to the tables is still the loop's when the device is revoked
    assert registry._jbatch is not None
    await loomi.frontends["loomi"].revoke(creds["device_id"])
    await registry.flush_rows()
    await loomi.bridge.store.aflush()
    assert loomi.bridge.store.query("SELECT COUNT(*) FROM loomi_segments")[0][0] == 0
    assert loomi.bridge.store.query("SELECT COUNT(*) FROM loomi_events")[0][0] == 5
    await c.close()


async def test_frames_rebuilt_after_a_restart_are_the_frames_sent_to_each_device(service_factory):
    svc = await service_factory(adapters=("loomi",))
    a, creds_a = await pair(svc, "A")
    b, creds_b = await pair(svc, "B")
    got_a, got_b = [], []
    for i in range(5):  # device A takes reply seqs between events, B does not: their offsets differ
        notify(svc, 2, text=f"r{i}-")
        await a.send("ping")
        got_a += [f for f in [await a.recv() for _ in range(3)] if f["type"] == "notification"]
        got_b += [await b.recv() for _ in range(2)]
    await svc.stop()
    await a.close()
    await b.close()
    svc2 = await service_factory(adapters=("loomi",))
    for creds, got in ((creds_a, got_a), (creds_b, got_b)):
        c, ok = await resume(svc2, creds, last_seq=0)
        assert ok["payload"]["truncated"] is False
        replayed = [await c.recv() for _ in range(10)]
        assert replayed == [dict(f, replayed=True) for f in got]
        await c.close()


def test_replay_rows_go_in_as_few_statements_of_known_sizes():
    """A batch of k events is inserted in statements of 1..32 or 256 rows (cached texts), all of them."""
    from loomi_adapter.rows import _EVENTS_SQL, event_chunks

    for k in (1, 7, 32, 33, 255, 256, 257, 700, 5000):
        chunks = event_chunks(k)
        assert sum(chunks) == k and all(c in _EVENTS_SQL for c in chunks)
        assert len(chunks) <= k // 256 + 8
