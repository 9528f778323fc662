"""No lost text: a browser subscribing mid-message gets the text so far (the ``inflight`` frame, lvmh_adapter/inflight.py).

Over real sockets: the text of the ``inflight`` frame, followed by the deltas with a
higher seq, is exactly the message's final text, for a pi plugin session and for the
bridge's own (demo) conversation; nothing streams, no frame.
"""

from __future__ import annotations

from bridge_core.model import commands as cmd
from tests.lvmh.helpers import message
from tests.waiting import until

SID = "01a22693-a4c3-719c-9d1e-dddddddddddd"


async def _rebuild(b, sid: str, inflight: dict) -> tuple[str, str]:
    """inflight text + later deltas, and the message_end text, read from the stream."""
    text = inflight["text"]
    while True:
        frame = await b.recv(10)
        if frame["type"] != "events" or frame["sessionId"] != sid:
            continue
        for e in frame["events"]:
            if e["type"] == "message_update" and e["seq"] > inflight["seq"]:
                text += e["delta"]
            if e["type"] == "message_end" and e["message"]["role"] == "assistant":
                return text, e["message"]["text"]


async def test_plugin_session_mid_message(lvmh, plugins, browsers):
    p = plugins(SID)
    await p.connect()
    watcher = await browsers()
    await watcher.send({"type": "subscribe", "sessionId": SID})
    await p.event("agent_start")
    await p.event("message_start", message={"role": "assistant", "id": "a1"})
    await p.event("message_update", delta="one")
    # a message of another role ending meanwhile (a steered prompt) leaves the assistant's open
    await p.event("message_start", message={"role": "user", "id": "u2"})
    await p.event("message_end", message=message("user", "u2", "steer"))
    last = await p.event("message_update", delta=" two")
    await watcher.events_until(SID, lambda e: e["seq"] == last)  # the daemon has both deltas

    late = await browsers()
    await late.send({"type": "subscribe", "sessionId": SID})
    inflight = await late.recv_until(lambda f: f["type"] == "inflight")
    assert inflight == {"type": "inflight", "sessionId": SID, "seq": last,
                        "message": {"role": "assistant", "id": "a1"}, "text": "one two"}
    await p.event("message_update", delta=" three")
    await p.event("message_end", message=message("assistant", "a1", "one two three"))
    rebuilt, final = await _rebuild(late, SID, inflight)
    assert rebuilt == final == "one two three"

    # between messages, a subscriber gets no inflight frame
    again = await browsers()
    await again.send({"type": "subscribe", "sessionId": SID})
    await again.send("{not json")  # answered with an error frame, after the subscribe
    frames = []
    while not any(f["type"] == "error" for f in frames):
        frames.append(await again.recv())
    assert not any(f["type"] == "inflight" for f in frames)


async def test_demo_conversation_mid_stream(lvmh, browsers):
    conv = await lvmh.bridge.execute(cmd.CreateConversation(name="inflight"), cmd.LOCAL)
    cid = conv.conversation_id
    await lvmh.bridge.execute(cmd.SendMessage(text="/slow 1", conversation_id=cid), cmd.LOCAL)
    # streamed with nobody watching
    await until(lambda: len((conv.run.text if conv.run else "").split()) >= 3, what="three words streamed")
    assert conv.run is not None
    b = await browsers()
    await b.send({"type": "subscribe", "sessionId": cid})
    inflight = await b.recv_until(lambda f: f["type"] == "inflight")
    assert inflight["text"].startswith("w1 w2 w3")
    assert inflight["message"]["role"] == "assistant"
    rebuilt, final = await _rebuild(b, cid, inflight)
    assert rebuilt == final
    assert final.split()[-1] == "w10"
