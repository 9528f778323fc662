"""Loomi §2 and §4 from the app's side: the text a phone shows is its ``run.delta`` texts added up, and that is
exactly the ``run.completed`` text, for a phone that stayed and for one that reconnected mid-run with
``last_seq`` and got the rest replayed (the deltas a node fills in before an end exist to keep this true:
docs/scale-out.md, "Loomi fills deltas lost mid-run"). Every frame of the run is checked field by field
against the spec's envelope and payload. Rows of docs/conformance.md ("Loomi") point here.
"""

from __future__ import annotations

import pytest

from .loomi_client import LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


# §2: the envelope of every server frame; a replayed one carries "replayed": true besides
ENVELOPE = {"v", "seq", "ts", "type", "task_id", "run_id", "event_id", "payload"}
# §4: the payload of each frame of a text run
PAYLOADS = {
    "run.started": {"run_id", "task_id", "session_id", "surface", "model", "provider", "started_at", "title"},
    "run.delta": {"run_id", "text", "kind", "iteration"},
    "run.completed": {"run_id", "status", "text", "error", "finished"},
}


async def paired(server, name: str) -> LoomiApp:
    app = LoomiApp(name)
    await app.pair(server.pair_payload())
    return app


def run_frames(app: LoomiApp, run_id: str) -> list[dict]:
    """The run's frames of the types above (others of it, such as the user's message, an app may ignore: §6)."""
    return [f for f in app.events if f["run_id"] == run_id and f["type"] in PAYLOADS]


def check_run_frames(app: LoomiApp, task_id: str, run_id: str) -> None:
    """Each frame of the run as the spec has it: envelope, ``event_id``, the run's ids, its payload's fields."""
    frames = run_frames(app, run_id)
    assert [f["type"] for f in frames] == ["run.started"] + ["run.delta"] * (len(frames) - 2) + ["run.completed"]
    for f in frames:
        assert set(f) - {"replayed"} == ENVELOPE, f
        assert f.get("replayed", True) is True, f
        assert f["v"] == 1 and f["event_id"] == f"e_{f['seq']}" and isinstance(f["ts"], float), f
        assert (f["task_id"], f["run_id"], f["payload"]["run_id"]) == (task_id, run_id, run_id), f
        assert set(f["payload"]) == PAYLOADS[f["type"]], f
    for f in frames[1:-1]:
        assert f["payload"]["kind"] == "text" and isinstance(f["payload"]["text"], str), f
        assert isinstance(f["payload"]["iteration"], int), f
    end = frames[-1]["payload"]
    assert (end["status"], end["error"], end["finished"]) == ("completed", None, True), end


def added_up(app: LoomiApp, run_id: str) -> str:
    return "".join(f["payload"]["text"] for f in run_frames(app, run_id) if f["type"] == "run.delta")


@pytest.mark.parametrize(("command", "expected"), [
    ("/slow 6", " ".join(f"w{i + 1}" for i in range(60))),  # a word every 100 ms (README.md "The demo agent")
    ("/bench 600 100", "tok " * 600),  # 600 deltas of "tok " at 100 a second
], ids=["slow", "bench"])  # fmt: skip
async def test_the_deltas_add_up_to_the_completed_text_also_after_a_reconnect_mid_run(server, command, expected):
    stays, leaves = await paired(server, "Pixel 9"), await paired(server, "Tablet")
    ack = await stays.request("session.send", {"text": command})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    task_id, run_id = ack["payload"]["result"]["task_id"], ack["payload"]["result"]["run_id"]
    await leaves.until(lambda: len(added_up(leaves, run_id)) >= len(expected) // 10)
    await leaves.disconnect()  # mid-run
    last_seq = leaves.processed
    gone = len(added_up(leaves, run_id))
    await stays.until(lambda: len(added_up(stays, run_id)) >= gone + len(expected) // 5)  # more it has not got

    ok = await leaves.connect()  # hello with last_seq: what it missed replayed, then the live frames
    assert ok["type"] == "hello.ok" and ok["seq"] == last_seq and ok["payload"]["truncated"] is False, ok
    assert stays.completed(run_id) == [], "the run ended before the phone was back: not mid-run"
    for app in (stays, leaves):
        await app.wait_for("run.completed", run_id=run_id)
        check_run_frames(app, task_id, run_id)
        (done,) = app.completed(run_id)
        assert added_up(app, run_id) == done["payload"]["text"] == expected
        assert app.dropped == [] and len(app.seqs()) == len(set(app.seqs()))
    assert not any(f.get("replayed") for f in run_frames(stays, run_id))

    back = [f for f in run_frames(leaves, run_id) if f["seq"] > last_seq]
    replayed = [f for f in back if f.get("replayed")]
    live = back[len(replayed):]  # the replay first, every frame of it marked; then live frames, never marked
    assert replayed and all(f["type"] == "run.delta" for f in replayed), back[:3]
    assert live and not any(f.get("replayed") for f in live) and live[-1]["type"] == "run.completed", live[-3:]
    since = [f["seq"] for f in leaves.events if f["seq"] > last_seq]
    assert since[:len(back)] == list(range(last_seq + 1, last_seq + 1 + len(back)))  # none missed, none twice
