"""welcome.lastSeq only ever names seqs that are committed, with nothing lost below them."""

from __future__ import annotations

import asyncio
import threading

from lvmh_adapter.persistence import EventLog
from tests.lvmh.helpers import FakePlugin
from tests.waiting import until

SID = "durable-session-1"


async def test_welcome_waits_for_writes_in_flight(lvmh, plugins):
    fe = lvmh.frontends["lvmh"]
    store = lvmh.bridge.store
    p = plugins(SID)
    await p.connect()
    await p.event("agent_start")
    for _ in range(500):
        await fe.log.aflush()
        if fe.log.committed.get(SID) == 1:
            break
    assert fe.log.committed[SID] == 1

    release = threading.Event()
    blocked = store.submit(lambda c: release.wait(30))  # the writer thread is busy: nothing commits
    try:
        for _ in range(3):
            await p.event("tool_execution_update", toolCallId="c", toolName="bash", partial="...")
        await p.event("message_update", delta="live")
        # received (the browser stream could show them) but not committed: not counted as persisted
        await until(lambda: fe.book.records[SID].high == 4, what="the four events received")
        assert fe.log.committed[SID] == 1 and fe.log.welcome_seq(SID) == 1

        # a reconnecting plugin gets its welcome only once those writes have landed
        q = FakePlugin(lvmh.ports["lvmh"], SID)
        await q.open()
        await q.send_raw({"v": 1, "type": "hello", "sessionId": SID, "seq": 0, "ts": 1, "session": {}})
        waiting = asyncio.ensure_future(q.recv_type("welcome", timeout=30))
        # the subject: for this long, with nothing committing, no welcome may arrive (a sleep
        # bounds a "never"; the welcome that follows the release below is waited for)
        await asyncio.sleep(0.2)
        assert not waiting.done()
    finally:
        release.set()
    welcome = await waiting
    assert welcome["lastSeq"] == 4
    await asyncio.wrap_future(blocked)
    await q.close()


async def test_a_failed_batch_caps_last_seq_below_the_lost_rows(lvmh):
    """A batch that did not commit is never reported as persisted, even after later ones did."""
    store = lvmh.bridge.store
    log = EventLog(store)
    real_submit = store.submit
    calls = {"n": 0}

    def flaky_submit(op):
        calls["n"] += 1
        if calls["n"] == 2:  # the second batch fails inside the writer's transaction
            def failing(conn):
                raise RuntimeError("disk full")

            return real_submit(failing)
        return real_submit(op)

    store.submit = flaky_submit  # type: ignore[method-assign]
    try:
        log.upsert_session(SID, {"id": SID}, "plugin")
        for seq in (1, 2, 3):
            log.append(SID, seq, seq, "agent_start", '{"seq": %d}' % seq)
        log.flush()
        for seq in (4, 5, 6):
            log.append(SID, seq, seq, "agent_start", '{"seq": %d}' % seq)
        log.flush()
        for seq in (7, 8):
            log.append(SID, seq, seq, "agent_start", '{"seq": %d}' % seq)
        await log.settle(SID)
    finally:
        store.submit = real_submit  # type: ignore[method-assign]
    assert log.committed[SID] == 8  # batch 7..8 committed after the failed one
    assert log.failures == 1
    assert log.welcome_seq(SID) == 3  # ...but the plugin must resend from 4
    assert [r[0] for r in store.query("SELECT seq FROM events WHERE sessionId=? ORDER BY seq", (SID,))] == [
        1, 2, 3, 7, 8,
    ]
    # the resend fills the gap (7 and 8 again are ignored), and then 8 is the truth
    for seq in (4, 5, 6, 7, 8):
        log.append(SID, seq, seq, "agent_start", '{"seq": %d}' % seq)
    await log.settle(SID)
    assert log.welcome_seq(SID) == 8
    assert store.query("SELECT COUNT(*) FROM events WHERE sessionId=?", (SID,)) == [(8,)]


async def test_a_burst_is_written_in_few_transactions(lvmh, plugins, api):
    store = lvmh.bridge.store
    p = plugins(SID)
    await p.connect()
    before = store.commits
    n = 3000
    frames = []
    for seq in range(1, n + 1):
        frames.append(
            '{"v":1,"sessionId":"%s","seq":%d,"ts":1700000000000,"type":"tool_execution_update",'
            '"toolCallId":"c","toolName":"bash","partial":"line %d"}' % (SID, seq, seq)
        )
    for f in frames:
        await p.ws.send_str(f)
    evs = await api.wait_events(SID, lambda e: len(e) == 1000, timeout=30)
    assert evs[-1]["seq"] == 1000
    await until(lambda: api.events(SID, after=n - 1), timeout=30, what="the last event stored")
    await lvmh.frontends["lvmh"].log.aflush()
    assert store.query("SELECT COUNT(*) FROM events WHERE sessionId=?", (SID,)) == [(n,)]
    assert store.commits - before < n / 10  # batched: never one transaction per event


async def test_bridge_session_seqs_are_never_reused_after_a_restart(service_factory, tmp_path):
    """Deltas take seqs that are never stored; a restart mid-run must not hand those numbers out again."""
    from bridge_core.model import commands as cmd
    from tests.lvmh.helpers import Api, Browser, subscribed

    data = tmp_path / "shared"
    svc = await service_factory(adapters=("lvmh",), data_dir=data)
    conv = await svc.bridge.execute(cmd.CreateConversation(name="restart"), cmd.LOCAL)
    sid = conv.conversation_id
    b = await Browser(svc.ports["lvmh"]).open()
    api = Api(svc.ports["lvmh"])
    try:
        await b.send({"type": "subscribe", "sessionId": sid})
        await subscribed(svc, sid)  # the subscription is registered (no frame acknowledges it)
        await api.post(f"/api/sessions/{sid}/prompt", {"message": "/slow 30"})
        seen = await b.events_until(sid, lambda e: e["type"] == "message_update" and e["delta"] == " w3")
        top = max(e["seq"] for e in seen)
    finally:
        await b.close()
        await api.close()
    await svc.stop()  # mid-run: the last seqs handed out were deltas, never stored

    svc2 = await service_factory(adapters=("lvmh",), data_dir=data)
    api = Api(svc2.ports["lvmh"])
    try:
        stored = await api.events(sid)
        # the run the restart cut short is closed (its message completed, the run settled),
        # with seqs above every one handed out before the restart
        assert stored[-1]["type"] == "agent_settled"
        closing = [e for e in stored if e["seq"] > top]
        assert [e["type"] for e in closing][0] == "message_end" and "agent_end" in [e["type"] for e in closing]
        assert max(e["seq"] for e in stored if e not in closing) < top
        status, _ = await api.post(f"/api/sessions/{sid}/prompt", {"message": "after the restart"})
        assert status == 200
        evs = await api.wait_events(sid, lambda e: e and e[-1]["type"] == "agent_settled")
        new = [e for e in evs if e["seq"] > max(x["seq"] for x in stored)]
        assert new and min(e["seq"] for e in new) > top
    finally:
        await api.close()
