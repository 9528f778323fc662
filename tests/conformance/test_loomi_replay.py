"""Loomi §2 from the app's side: seq order, drop below processed, reconnect with last_seq, replay.

The assertion is always the user's: nothing missed, nothing twice, nothing stuck, the final text
exact. Rows of docs/conformance.md ("Loomi") point here.
"""

from __future__ import annotations

import pytest

from .loomi_client import LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


def ws_url(server) -> str:
    return server.url("loomi", "/ws", scheme="ws")


async def paired(server, name: str = "Pixel 9") -> LoomiApp:
    app = LoomiApp(name)
    await app.pair(server.pair_payload())
    return app


def slow_text(seconds: float) -> str:
    """The demo agent's /slow text (README.md "The demo agent")."""
    return " ".join(f"w{i + 1}" for i in range(int(round(seconds * 10))))


def assert_clean(app: LoomiApp) -> None:
    """Nothing dropped by the §2 rule, nothing processed twice, and each connection strictly increasing."""
    assert app.dropped == [], app.dropped[:3]
    seqs = app.seqs()
    assert len(seqs) == len(set(seqs)), "an event was processed twice"
    for conn in app.connections:
        assert conn == sorted(set(conn)), f"seqs of one connection do not strictly increase: {conn[:20]}"


async def start(app: LoomiApp, text: str, task_id=None) -> tuple[str, str]:
    payload = {"text": text}
    if task_id is not None:
        payload["task_id"] = task_id
    ack = await app.request("session.send", payload)
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    return ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]


async def test_hello_ok_carries_last_seq_and_the_replay_follows_in_order(server):
    app = await paired(server)
    first = app.hellos[-1]
    assert first["type"] == "hello.ok" and first["v"] == 1 and first["event_id"] == f"e_{first['seq']}"
    p = first["payload"]
    assert {"device_id", "credential", "server_name", "server_version", "protocol_version", "server_time",
            "truncated", "home_channel"} <= set(p)
    assert p["protocol_version"] == 1 and p["truncated"] is False and isinstance(p["server_time"], float)
    _, run_id = await start(app, "first words")
    await app.wait_for("run.completed", run_id=run_id)
    await app.disconnect()
    processed = app.processed

    other = await paired(server, "Other phone")
    _, run2 = await start(other, "while the first phone was away")
    await other.wait_for("run.completed", run_id=run2)

    ok = await app.connect(ws_url(server))
    assert ok["seq"] == processed and ok["payload"]["truncated"] is False and "credential" not in ok["payload"]
    done = await app.wait_for("run.completed", run_id=run2)
    replayed = [f for f in app.events if f.get("replayed")]
    assert replayed and replayed[-1] is done and all(f["seq"] > processed for f in replayed)
    assert app.run_text(run2) == done["payload"]["text"] == "Echo: while the first phone was away"
    assert [f["type"] for f in replayed if f["type"].startswith("run.")] == (
        ["run.started"] + ["run.delta"] * 7 + ["run.completed"])
    # live frames come after the replay, never marked
    pong_before = len(app.connections[-1])
    await app.send("ping")
    await app.until(lambda: len(app.connections[-1]) > pong_before)
    assert_clean(app)
    await app.disconnect()
    await other.disconnect()


async def test_disconnect_mid_run_and_reconnect_twice_misses_nothing(server):
    app = await paired(server)
    watcher = await paired(server, "Tablet")
    _, run_id = await start(app, "/slow 3")
    await app.until(lambda: "w3" in app.run_text(run_id))
    await app.disconnect()  # mid-run
    await watcher.until(lambda: "w10" in watcher.run_text(run_id))
    await app.connect(ws_url(server))  # still mid-run: the replay, then live frames
    await app.until(lambda: "w15" in app.run_text(run_id))
    await app.disconnect()
    await watcher.wait_for("run.completed", run_id=run_id)
    await app.connect(ws_url(server))  # after the end
    done = await app.wait_for("run.completed", run_id=run_id)
    assert app.run_text(run_id) == done["payload"]["text"] == slow_text(3)
    assert len(app.completed(run_id)) == 1 and done["payload"]["status"] == "completed"
    assert not any(h["payload"]["truncated"] for h in app.hellos)
    assert_clean(app)
    await app.disconnect()
    await watcher.disconnect()


async def _missed_across_restart(server, hard: bool) -> None:
    app = await paired(server)
    watcher = await paired(server, "Tablet")
    _, run_id = await start(app, "/bench 120 60")  # 120 deltas of "tok " over 2 s
    await app.until(lambda: app.run_text(run_id).count("tok") >= 10)
    await app.disconnect()
    await watcher.wait_for("run.completed", run_id=run_id)
    server.restart(hard=hard)
    ok = await app.connect(ws_url(server))
    assert ok["payload"]["truncated"] is False  # 120 events missed: all of them in the window
    done = await app.wait_for("run.completed", run_id=run_id)
    assert app.run_text(run_id) == done["payload"]["text"] == "tok " * 120
    assert len(app.completed(run_id)) == 1
    assert_clean(app)
    # and the numbering goes on above everything, on the next live frame
    n = len(app.connections[-1])
    await app.send("ping")
    await app.until(lambda: len(app.connections[-1]) > n)
    assert app.connections[-1][-1] > max(app.seqs())
    await app.disconnect()


async def test_events_missed_before_a_clean_restart_are_replayed_after_it(server):
    await _missed_across_restart(server, hard=False)


async def test_events_missed_before_a_kill_9_are_replayed_after_it(server):
    await _missed_across_restart(server, hard=True)


async def test_kill_9_mid_run_keeps_everything_that_was_sent(server):
    app = await paired(server)
    _, run_id = await start(app, "/bench 400 100")
    await app.until(lambda: app.run_text(run_id).count("tok") >= 20)
    server.kill9()
    await app.until(lambda: not app.connected)
    seen = app.run_text(run_id)
    processed = app.processed
    server.start()
    ok = await app.connect(ws_url(server))
    assert ok["seq"] == processed and ok["payload"]["truncated"] is False
    # the interrupted run is closed, never left running; what the app had stays a prefix of it
    done = await app.wait_for("run.completed", run_id=run_id)
    assert done["payload"]["status"] in ("failed", "cancelled")
    text = app.run_text(run_id)
    assert text.startswith(seen) and text == "tok " * text.count("tok ")
    assert_clean(app)
    tasks = await app.request("task.list", {}, answer="task.list.result")
    assert all(t["status"] == "idle" for t in tasks["payload"]["tasks"])
    await app.disconnect()


async def test_events_raised_while_offline_are_replayed_and_notify_once(server):
    app = await paired(server)
    await app.disconnect()
    other = await paired(server, "Other phone")
    task_id, run_id = await start(other, "hello from the other phone")
    await other.wait_for("run.completed", run_id=run_id)
    _, note_run = await start(other, "/notify build finished", task_id=task_id)
    await other.wait_for("notification", text="build finished")
    before = app.processed

    await app.connect(ws_url(server))
    note = await app.wait_for("notification", text="build finished")
    assert note["replayed"] is True and note["payload"]["category"] in ("result", "diagnostic")
    assert app.find("task.created") and app.find("run.completed", run_id=run_id)
    assert app.run_text(run_id) == "Echo: hello from the other phone"
    assert [n["payload"]["text"] for n in app.notified] == ["build finished"]
    assert_clean(app)
    # the app crashed before it stored how far it got: the same events come again, marked replayed,
    # and it does not notify twice
    await app.disconnect()
    app.processed = before
    await app.connect(ws_url(server))
    await app.until(lambda: len(app.find("notification", text="build finished")) == 2)
    assert all(f["replayed"] for f in app.find("notification", text="build finished"))
    assert [n["payload"]["text"] for n in app.notified] == ["build finished"]
    await app.disconnect()
    await other.disconnect()


async def test_truncated_only_when_the_window_was_passed(server):
    app = await paired(server)
    other = await paired(server, "Other phone")
    await app.disconnect()
    # about 400 events missed: within the 512 kept, nothing is gone
    _, run1 = await start(other, "/bench 400")
    await other.wait_for("run.completed", run_id=run1)
    ok = await app.connect(ws_url(server))
    assert ok["payload"]["truncated"] is False and app.task_lists == []
    done = await app.wait_for("run.completed", run_id=run1)
    assert app.run_text(run1) == done["payload"]["text"] == "tok " * 400
    await app.disconnect()
    # about 700 missed: more than the window, so truncated, and the app fetches the task list again
    before = app.processed
    _, run2 = await start(other, "/bench 700")
    await other.wait_for("run.completed", run_id=run2)
    ok = await app.connect(ws_url(server))
    assert ok["payload"]["truncated"] is True and ok["seq"] == before
    assert len(app.task_lists) == 1 and app.task_lists[0]
    done = await app.wait_for("run.completed", run_id=run2)
    assert done["payload"]["text"] == "tok " * 700
    replayed = [f for f in app.events if f.get("replayed") and f["seq"] > before]
    assert len(replayed) == 512  # the newest 512 events, in order
    assert_clean(app)
    await app.disconnect()
    await other.disconnect()
