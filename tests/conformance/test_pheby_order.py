"""Pheby: a request's reply comes before the broadcasts it causes; each change is told once.

The spec's examples order them: ``conversation.created`` then the broadcast
``conversation.updated``; ``conversation.renamed`` with the request_id, then the
broadcast without it; ``model.changed`` with it, then the broadcast; and
``conversation.delete`` shows only its reply.
"""

from __future__ import annotations

from tests.conformance.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp


async def connected(server) -> PhebyApp:
    app = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    await app.connect()
    return app


async def settle(app: PhebyApp) -> list[dict]:
    """Everything this connection received up to a ping's pong (a barrier: frames are in order)."""
    pong = await app.request("ping")
    assert pong["type"] == "pong"
    return app.conn_frames[: app.conn_frames.index(pong)]


def without_ts(frames: list[dict]) -> list[dict]:
    return [{k: v for k, v in f.items() if k != "ts"} for f in frames]


async def run_to_end(app: PhebyApp, name: str, text: str) -> tuple[str, dict, int]:
    """A new conversation, ``text`` sent in it and its run finished: the conversation, the request's
    answer (``run.accepted``) and where this connection's frames of the request begin."""
    cid = await app.create(name)
    await settle(app)
    start = len(app.conn_frames)
    accepted = await app.chat(cid, text)
    assert accepted["type"] == "run.accepted", accepted
    await app.wait_until(lambda: accepted["run_id"] in app.view(cid).finished)
    return cid, accepted, start


def cumulative(drafts: list[str], final: str) -> bool:
    """Each draft the text so far (it replaces the bubble), and the final text extends the last one."""
    return all(later.startswith(earlier) for earlier, later in zip(drafts, drafts[1:] + [final]))


async def test_replies_come_before_their_broadcasts(server):
    a = await connected(server)
    b = await connected(server)
    try:
        start = len(a.conn_frames)
        created = await a.request("conversation.create", name="New chat")
        cid = created["conversation_id"]
        assert len(cid) == 32 and all(c in "0123456789abcdef" for c in cid)
        got = (await settle(a))[start:]
        assert got == [
            {"type": "conversation.created", "conversation_id": cid, "name": "New chat", "request_id": created["request_id"]},
            {"type": "conversation.updated", "conversation_id": cid, "name": "New chat"},
        ]
        assert (await settle(b))[-1:] == [{"type": "conversation.updated", "conversation_id": cid, "name": "New chat"}]
        unnamed = await a.request("conversation.create")  # name is optional
        assert unnamed["type"] == "conversation.created" and isinstance(unnamed["name"], str)
        await settle(a)
        await settle(b)

        start, start_b = len(a.conn_frames), len(b.conn_frames)
        renamed = await a.request("conversation.rename", conversation_id=cid, name="Renamed")
        got = (await settle(a))[start:]
        assert got == [
            {"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed", "request_id": renamed["request_id"]},
            {"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed"},
        ]
        assert (await settle(b))[start_b:] == [{"type": "conversation.renamed", "conversation_id": cid, "name": "Renamed"}]

        start, start_b = len(a.conn_frames), len(b.conn_frames)
        changed = await a.request("model.set", model="demo-large", conversation_id=cid)
        got = without_ts((await settle(a))[start:])
        assert [f["type"] for f in got] == ["model.changed", "model.changed"], got
        assert got[0]["request_id"] == changed["request_id"] and "request_id" not in got[1]
        assert got[0]["model"] == got[1]["model"] == "demo-large" and got[0]["scope"] == "conversation"
        other = without_ts((await settle(b))[start_b:])
        assert [f["type"] for f in other] == ["model.changed"] and "request_id" not in other[0]
    finally:
        await a.close()
        await b.close()


async def test_delete_is_one_frame_for_each_client(server):
    a = await connected(server)
    b = await connected(server)
    try:
        cid = await a.create("Short-lived")
        await settle(a)
        await settle(b)
        start, start_b = len(a.conn_frames), len(b.conn_frames)
        reply = await a.request("conversation.delete", conversation_id=cid)
        assert (await settle(a))[start:] == [
            {"type": "conversation.deleted", "conversation_id": cid, "request_id": reply["request_id"]}
        ]
        assert (await settle(b))[start_b:] == [{"type": "conversation.deleted", "conversation_id": cid}]
        listing = await b.request("conversation.list")
        assert cid not in [c["conversation_id"] for c in listing["conversations"]]
    finally:
        await a.close()
        await b.close()


async def test_chat_send_answers_run_accepted_first(server):
    a = await connected(server)
    try:
        cid, accepted, start = await run_to_end(a, "Chat", "hello there")
        assert accepted["conversation_id"] == cid
        assert a.conn_frames[start] is accepted  # the first frame after the request is its answer
        drafts = [f["text"] for f in a.conn_frames[start:] if f["type"] == "message.delta"]
        final = a.view(cid).transcript()[-1][1]
        # cumulative drafts: each one the text so far (replace the bubble), the final supersedes them
        assert cumulative(drafts, final)
        frames = [f for f in a.conn_frames[start:] if f["type"] != "message.delta"]
        mid = frames[1]["message_id"]
        assert without_ts(frames) == [
            {"type": "run.accepted", "conversation_id": cid, "run_id": accepted["run_id"], "request_id": accepted["request_id"]},
            {"type": "message.start", "conversation_id": cid, "run_id": accepted["run_id"], "message_id": mid},
            {"type": "message.complete", "conversation_id": cid, "message_id": mid, "text": "Echo: hello there"},
            {"type": "run.finished", "conversation_id": cid, "run_id": accepted["run_id"], "status": "completed"},
        ]
        busy = await a.chat(cid, "/slow 5")
        assert busy["type"] == "run.accepted", busy
        again = await a.chat(cid, "me too")
        assert again["type"] == "error" and again["error"]["code"] == "run_active", again
    finally:
        await a.close()


async def test_a_long_answer_arriving_fast_ends_as_its_whole_text(server):
    """The spec: drafts are cumulative (replace the bubble), the completion's text supersedes them. However
    few drafts a long, fast answer gets (the pacing is the server's), each is a prefix of the final text,
    and ``message.complete`` carries all of it (README.md "The demo agent": ``/bench n`` appends ``tok `` n times)."""
    a = await connected(server)
    try:
        cid, accepted, start = await run_to_end(a, "Long", "/bench 20000")
        got = a.conn_frames[start:]
        drafts = [f["text"] for f in got if f["type"] == "message.delta"]
        (final,) = [f["text"] for f in got if f["type"] == "message.complete"]
        assert final == "tok " * 20000
        assert drafts and cumulative(drafts, final)
        assert a.view(cid).transcript()[-1][1] == final
    finally:
        await a.close()
