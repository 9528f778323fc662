"""kill -9 of the bridge in the middle of a run, then a restart on the same data directory.

What must hold afterwards:
- the database opens cleanly (``PRAGMA integrity_check`` is ``ok``);
- every durable event a Loomi device received (task created, user messages,
  completed runs) is still there after the restart; ``hello.ok`` carries the
  device's ``last_seq`` and every frame after it is above it; nothing it was
  sent is lost (the replay window is in the database), so not ``truncated``;
- the interrupted run is reported as failed on every surface, never left
  running: Pheby ``conversation.open`` has ``run: null`` and the transcript up
  to the last completed message plus a notice; Loomi replays
  ``run.completed {status: failed}`` + ``run.failed``; lvmh shows
  ``agent_end {status: failed}``; the runs table says ``failed``;
- every lvmh plugin event acknowledged through ``welcome.lastSeq`` is persisted.
"""

from __future__ import annotations

import sqlite3

import pytest

from .clients import LoomiClient, PhebyClient, all_events, lvmh_api, lvmh_plugin
from .proc import wait_rows
from .summary import SUMMARY

pytestmark = pytest.mark.hardening

INTERRUPTED = "interrupted by a restart"


def integrity(db_path: str) -> str:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        conn.close()


async def plugin_events(plugin, start: int, count: int) -> int:
    """``count`` persisted (non-delta) events from seq ``start``; returns the last seq sent."""
    seq = start
    for _ in range(count):
        seq += 1
        if seq % 3 == 0:  # message_update: streamed, never persisted
            await plugin.event("message_update", seq=seq, delta=f" d{seq}")
        else:
            await plugin.event("tool_execution_update", seq=seq, toolCallId="c1", toolName="bash", partial=f"p{seq}")
    plugin.seq = seq
    return seq


def persisted_seqs(events: list) -> list:
    return [e["seq"] for e in events]


async def test_kill9_mid_run_then_restart(bridge_factory):
    srv = bridge_factory("crash", config={"demo": {"approval_timeout": 60}})
    ports = srv.ports

    # --- before the crash: a completed run, a Loomi device watching, a plugin streaming ---------------
    pheby = await PhebyClient.connect(ports["pheby"])
    device, loomi = await LoomiClient.pair(ports["loomi"])
    cid = await pheby.create("crash test")
    done = await pheby.run(cid, "hello before the crash")
    assert done[-1]["status"] == "completed"

    plugin_sid = "hardening-plugin-session-crash"
    plugin = lvmh_plugin(ports["lvmh"], plugin_sid)
    welcome = await plugin.connect()
    assert welcome["lastSeq"] == 0
    sent = await plugin_events(plugin, 0, 300)
    await plugin.close()
    plugin = lvmh_plugin(ports["lvmh"], plugin_sid)
    acked = (await plugin.connect())["lastSeq"]  # acknowledged: everything up to here is persisted
    assert acked == max(s for s in range(1, sent + 1) if s % 3 != 0), acked
    # more events in flight when the process dies: these may or may not be persisted
    sent = await plugin_events(plugin, sent, 600)

    # the interrupted run: streaming when the process is killed
    await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/slow 30", "request_id": "slow"})
    started = await pheby.until(lambda f: f["type"] == "run.accepted" and f["conversation_id"] == cid)
    run_id = started[-1]["run_id"]
    await pheby.until(lambda f: f["type"] == "message.delta" and f["conversation_id"] == cid and len(f["text"].split()) >= 3)
    await loomi.until(lambda f: f["type"] == "run.delta" and f["payload"]["run_id"] == run_id)
    # the draft as saved so far is committed (the restart completes the message with it)
    await wait_rows(srv.db_path(), "SELECT count(*) FROM messages WHERE conversation_id=? AND role='assistant' "
                    "AND text LIKE 'w1%'", (cid,), 1)

    srv.kill9()
    SUMMARY.fault("kill -9 mid-run")
    for c in (pheby, loomi):
        try:
            await c.close()
        except Exception:
            pass
    try:
        await plugin.close()
    except Exception:
        pass

    received = list(loomi.frames)
    last_seq = loomi.last_seq
    assert integrity(srv.db_path()) == "ok"

    # --- restart -----------------------------------------------------------------------------------------
    ports = srv.start()
    assert integrity(srv.db_path()) == "ok"

    # Loomi: seq continues above last_seq; nothing sent was lost; durable events are still there
    loomi2 = await LoomiClient.connect(ports["loomi"], device, last_seq=last_seq)
    ok = loomi2.hello_ok
    assert ok["seq"] == last_seq
    assert ok["payload"]["truncated"] is False  # every event it was sent is in the stored window
    replayed = [f for f in loomi2.frames[1:]]
    failed = await loomi2.until(lambda f: f["type"] == "run.failed" and f["payload"]["run_id"] == run_id, timeout=10)
    replayed += failed
    assert all(f["seq"] > last_seq for f in replayed)
    completed = [f for f in replayed if f["type"] == "run.completed" and f["payload"]["run_id"] == run_id]
    assert completed and completed[0]["payload"]["status"] == "failed"
    assert INTERRUPTED in completed[0]["payload"]["error"]
    tasks = await loomi2.request("task.list", {})
    task_ids = {t["task_id"] for t in tasks["payload"]["tasks"]}
    task = next(t for t in tasks["payload"]["tasks"] if t["task_id"] == cid)
    assert task["status"] == "idle"

    pheby2 = await PhebyClient.connect(ports["pheby"])
    hist = await pheby2.open(cid)
    assert hist["run"] is None
    texts = [(m["role"], m["text"]) for m in hist["messages"]]
    assert texts[:3] == [("user", "hello before the crash"), ("assistant", "Echo: hello before the crash"),
                         ("user", "/slow 30")]
    # the interrupted message, completed with its draft as saved before the crash, then the notice
    assert len(texts) == 5 and texts[3][0] == "assistant" and texts[3][1].startswith("w1"), texts
    assert INTERRUPTED in texts[4][1]  # the notice: the run did not finish

    # everything durable the device saw before the crash is still there
    durable = 0
    lost = 0
    history_texts = {m["text"] for m in hist["messages"]}
    for f in received:
        t = f["type"]
        p = f.get("payload", {})
        if t == "session.message":
            durable += 1
            lost += p["text"] not in history_texts
        elif t == "run.completed" and p.get("status") == "completed":
            durable += 1
            lost += p["text"] not in history_texts
        elif t == "task.created":
            durable += 1
            lost += p["task"]["task_id"] not in task_ids
    seqs = [f["seq"] for f in received + loomi2.frames[1:]]  # hello.ok repeats last_seq
    dups = len(seqs) - len(set(seqs))
    SUMMARY.events(durable, lost, dups)
    assert durable >= 4 and lost == 0 and dups == 0

    # the runs table: failed, never running
    rows = sqlite3.connect(srv.db_path()).execute("SELECT status, error FROM runs WHERE run_id=?", (run_id,)).fetchall()
    assert rows == [("failed", INTERRUPTED)]

    # lvmh: the bridge conversation's interrupted run ends as failed
    api = lvmh_api(ports["lvmh"])
    try:
        evs = await api.wait_events(cid, lambda es: any(e["type"] == "agent_end" and e.get("runId") == run_id for e in es))
        end = next(e for e in evs if e["type"] == "agent_end" and e.get("runId") == run_id)
        assert end["status"] == "failed"
        # the plugin session: everything acknowledged through welcome.lastSeq is persisted
        plugin2 = lvmh_plugin(ports["lvmh"], plugin_sid)
        last = (await plugin2.connect())["lastSeq"]
        assert last >= acked
        stored = persisted_seqs(await all_events(api, plugin_sid))
        expected = [s for s in range(1, last + 1) if s % 3 != 0]
        missing = sorted(set(expected) - set(stored))
        SUMMARY.events(len(expected), len(missing), len(stored) - len(set(stored)))
        assert not missing and len(stored) == len(set(stored))
        # the plugin resends what was not acknowledged; each event is stored once
        await plugin_events(plugin2, last, sent - last)
        await plugin2.close()
        plugin3 = lvmh_plugin(ports["lvmh"], plugin_sid)
        final = (await plugin3.connect())["lastSeq"]
        await plugin3.close()
        stored = persisted_seqs(await all_events(api, plugin_sid))
        assert final == max(s for s in range(1, sent + 1) if s % 3 != 0)
        assert stored == [s for s in range(1, sent + 1) if s % 3 != 0]
    finally:
        await api.close()
    await loomi2.close()
    await pheby2.close()
    assert srv.stop() == 0
    assert integrity(srv.db_path()) == "ok"
    SUMMARY.fault("restart after kill -9")


async def test_kill9_right_after_a_device_received_a_message(bridge_factory):
    """The narrowest window: the process dies the moment a device received a durable event."""
    srv = bridge_factory("crash2")
    device, loomi = await LoomiClient.pair(srv.ports["loomi"])
    rounds = 3
    checked = lost = 0
    for i in range(rounds):
        text = f"durable message {i}"
        await loomi.send("session.send", {"text": text, "request_id": f"m{i}"})
        got = await loomi.until(lambda f: f["type"] == "session.message" and f["payload"]["text"] == text)
        srv.kill9()
        try:
            await loomi.close()
        except Exception:
            pass
        task_id = got[-1]["task_id"]
        last_seq = loomi.last_seq
        srv.start()
        loomi = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=last_seq)
        assert loomi.hello_ok["seq"] == last_seq
        pheby = await PhebyClient.connect(srv.ports["pheby"])
        hist = await pheby.open(task_id)
        await pheby.close()
        checked += 1
        lost += text not in [m["text"] for m in hist["messages"]]
        SUMMARY.fault("kill -9 after delivery")
    await loomi.close()
    SUMMARY.events(checked, lost)
    assert lost == 0
    assert integrity(srv.db_path()) == "ok"


async def test_kill9_with_the_replay_rows_only_in_the_journal(bridge_factory):
    """A device's replay rows reach the database in batches; until then they are in the journal
    (docs/loomi.md, "Seq across restarts"). A crash before a batch committed must lose none of them:
    here the rows are taken out of the tables after the kill (the state a crash a moment after the
    frames left leaves), so every frame replayed after the restart comes from the journal."""
    import os

    srv = bridge_factory("crash-journal")
    device, loomi = await LoomiClient.pair(srv.ports["loomi"])
    await loomi.send("session.send", {"text": "/bench 200", "request_id": "b1"})
    await loomi.until(lambda f: f["type"] == "run.completed", timeout=30)
    srv.kill9()
    await loomi.close()
    from loomi_adapter.journal import decode

    journal = os.path.join(srv.data_dir, "loomi-journal.1")
    with open(journal, "rb") as f:
        assert len(decode(f.read())[0]) >= 200  # the run's events are in it
    conn = sqlite3.connect(srv.db_path())
    try:
        conn.execute("DELETE FROM loomi_events")
        conn.execute("DELETE FROM loomi_segments")
        conn.commit()
    finally:
        conn.close()
    received = [f for f in loomi.frames[1:] if "seq" in f and f["type"] != "ping"]
    deltas = [f for f in received if f["type"] == "run.delta"]
    assert len(deltas) == 200
    since = deltas[0]["seq"] - 1
    srv.start()
    loomi2 = await LoomiClient.connect(srv.ports["loomi"], device, last_seq=since)
    assert not loomi2.hello_ok["payload"].get("truncated")
    last = received[-1]["seq"]
    await loomi2.until(lambda f: f.get("seq") == last, timeout=10)
    replayed = {f["seq"]: {k: v for k, v in f.items() if k != "replayed"}  # the replay's own marker
                for f in loomi2.frames[1:] if f.get("seq", 0) <= last}
    expected = {f["seq"]: f for f in received if f["seq"] > since and f["type"] not in ("ack", "error", "pong")}
    diff = [(expected[s], replayed.get(s)) for s in expected if replayed.get(s) != expected[s]]
    assert expected and not diff, repr(diff[:1])
    await loomi2.close()
    assert srv.stop() == 0
    assert not [f for f in os.listdir(srv.data_dir) if f.startswith("loomi-journal")]  # a clean shutdown
    # committed what the journal held and removed it
    assert integrity(srv.db_path()) == "ok"
