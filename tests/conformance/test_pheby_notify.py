"""Pheby: unsolicited output is normal conversation content, live and in history.

"Any Hermes-originated output destined for the Pheby platform (scheduled/cron
deliveries, background completions, notifications) is pushed as normal
``message.*`` / ``run.*`` events"; ``kind: "notice"`` is only a gateway
lifecycle notice, which a client may ignore. The demo agent's ``/notify <text>``
stands for such output.
"""

from __future__ import annotations

from tests.conformance.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp


async def connected(server) -> PhebyApp:
    app = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    await app.connect()
    return app


def shown(app: PhebyApp, cid: str) -> list[str]:
    return [text for role, text in app.view(cid).transcript() if role == "assistant"]


async def test_notification_while_connected_reaches_every_client_as_content(server):
    a = await connected(server)
    b = await connected(server)
    try:
        cid = await a.create("Cron")
        run_id = (await a.chat(cid, "/notify nightly build passed"))["run_id"]
        for app in (a, b):
            done = await app.wait_frame(lambda f: f["type"] == "message.complete" and f["text"] == "nightly build passed")
            assert "kind" not in done  # content, not a notice a client may ignore
            assert set(done) >= {"conversation_id", "message_id", "text"} and done["conversation_id"] == cid
            i = app.conn_frames.index(done)
            start = app.conn_frames[i - 1]
            assert start["type"] == "message.start" and start["message_id"] == done["message_id"], start
            fin = next(j for j, f in enumerate(app.conn_frames) if f["type"] == "run.finished" and f["run_id"] == run_id)
            assert fin < i - 1  # after the run that asked for it finished
            assert "nightly build passed" in shown(app, cid) and app.view(cid).notices == []
            assert app.violations == []
        hist = await b.open(cid)
        assert [m["text"] for m in hist["messages"]][-1] == "nightly build passed"
        assert all(m["role"] in ("user", "assistant") for m in hist["messages"])
        assert shown(b, cid).count("nightly build passed") == 1  # after the resync, still once
    finally:
        await a.close()
        await b.close()


async def test_notification_while_offline_is_in_history_after_reconnect(server):
    a = await connected(server)
    b = await connected(server)
    try:
        cid = await a.create("Background")
        await b.wait_frame(lambda f: f["type"] == "conversation.updated" and f["conversation_id"] == cid)
        await b.disconnect()  # the phone is in a pocket
        await a.chat(cid, "/notify export finished")
        await a.wait_frame(lambda f: f["type"] == "message.complete" and f["text"] == "export finished")
        await b.reconnect([cid])
        assert "export finished" in shown(b, cid)
        assert shown(b, cid) == shown(a, cid)  # the same conversation on both screens
        assert b.view(cid).run is None and b.violations == [] and a.violations == []
    finally:
        await a.close()
        await b.close()
