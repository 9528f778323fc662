"""Pheby: an app that loses its socket mid-run resyncs by snapshot and misses nothing.

The spec's "Unsolicited messages & reconnect behavior": reconnect, redo hello,
re-open the conversations shown, replace local state with the snapshot, then
consume live events. Also across a clean restart of the server and a kill -9.
"""

from __future__ import annotations

from tests.conformance.conftest import PHEBY_SECRET
from tests.conformance.pheby_client import PhebyApp


def slow_text(words: int) -> str:
    return " ".join(f"w{i + 1}" for i in range(words))


async def app_for(server) -> PhebyApp:
    app = PhebyApp(server.url("pheby", "/ws", "ws"), PHEBY_SECRET)
    await app.connect()
    return app


async def test_disconnect_mid_run_then_reconnect_misses_nothing(server):
    app = await app_for(server)
    watcher = await app_for(server)  # stays connected throughout: what the user should end up seeing
    try:
        cid = await app.create("Slow")
        accepted = await app.chat(cid, "/slow 1.5")
        run_id = accepted["run_id"]
        mid = await app.wait_until(lambda: (app.view(cid).run or {}).get("message_id"))
        await app.wait_until(lambda: app.view(cid).messages[mid]["text"])  # some text is on screen
        await app.disconnect()

        await app.reconnect([cid])
        view = app.view(cid)
        # the snapshot shows the run still going, with its draft so far (or already finished)
        if view.run is not None:
            assert view.run["run_id"] == run_id and view.messages[mid]["done"] is False
            assert slow_text(15).startswith(view.messages[mid]["text"])
        await app.wait_until(lambda: app.view(cid).run is None and run_id in watcher.view(cid).finished, 15)
        await watcher.wait_until(lambda: run_id in watcher.view(cid).finished, 15)

        assert view.messages[mid] == {"role": "assistant", "text": slow_text(15), "done": True}
        assert [t for _, t in view.transcript()] == ["/slow 1.5", slow_text(15)]  # nothing missed, nothing twice
        assert view.open_bubbles() == [] and view.approvals == {} and view.clarifications == {}
        assert watcher.view(cid).messages[mid]["text"] == slow_text(15)
        assert watcher.view(cid).finished[run_id]["status"] == "completed"
        # a fresh open agrees: the run is over, nothing is stuck "running"
        hist = await app.open(cid)
        assert hist["run"] is None and hist["approvals"] == [] and hist["clarifications"] == []
        assert app.violations == [] and watcher.violations == []
    finally:
        await app.close()
        await watcher.close()


async def test_clean_restart_mid_run_keeps_what_was_said(server):
    app = await app_for(server)
    try:
        cid = await app.create("Restart")
        await app.chat(cid, "/slow 30")
        mid = await app.wait_until(lambda: (app.view(cid).run or {}).get("message_id"))
        seen = await app.wait_until(lambda: app.view(cid).messages[mid]["text"])
        assert server.stop() == 0  # SIGTERM, as a service manager would
        server.start()

        await app.reconnect([cid], url=server.url("pheby", "/ws", "ws"))
        view = app.view(cid)
        assert view.run is None  # nothing stuck running
        final = view.messages[mid]
        assert final["done"] and final["text"].startswith(seen)  # what the user saw is still there
        assert view.approvals == {} and view.clarifications == {}
        # and the conversation takes a new message
        again = await app.chat(cid, "hello again")
        assert again["type"] == "run.accepted", again
        await app.wait_until(lambda: again["run_id"] in app.view(cid).finished)
        assert app.view(cid).transcript()[-1] == ("assistant", "Echo: hello again")
        assert app.violations == []
    finally:
        await app.close()


async def test_kill9_mid_run_with_pending_decisions_closes_everything(server):
    app = await app_for(server)
    try:
        slow = await app.create("Slow")
        ask = await app.create("Ask")
        clarify = await app.create("Clarify")
        await app.chat(slow, "/slow 30")
        await app.chat(ask, "/approve rm -rf /tmp/build-output")
        await app.chat(clarify, "/clarify Staging or production?")
        await app.wait_until(lambda: app.view(ask).approvals and app.view(clarify).clarifications)
        mid = await app.wait_until(lambda: (app.view(slow).run or {}).get("message_id"))
        await app.wait_until(lambda: app.view(slow).messages[mid]["text"])
        (approval_id,) = app.view(ask).approvals
        (clarify_id,) = app.view(clarify).clarifications
        server.kill9()
        server.start()

        await app.reconnect([slow, ask, clarify], url=server.url("pheby", "/ws", "ws"))
        for cid in (slow, ask, clarify):
            view = app.view(cid)
            assert view.run is None, (cid, view.run)  # the interrupted runs ended
            assert view.open_bubbles() == []  # every started message completed
            assert view.approvals == {} and view.clarifications == {}  # no decision left pending
        # the interrupted message is in the history, completed with what was said before the crash
        kept = app.view(slow).messages[mid]
        assert kept["done"] and kept["text"] and slow_text(300).startswith(kept["text"]), kept
        # answering a decision the restart resolved: refused as the spec's stale id
        late = await app.request("approval.respond", approval_id=approval_id, choice="once")
        assert late["type"] == "error" and late["error"]["code"] == "approval_not_found", late
        late = await app.request("clarify.respond", clarify_id=clarify_id, response="staging")
        assert late["type"] == "error" and late["error"]["code"] == "clarify_not_found", late
        # nothing is stuck: each conversation takes a new message
        for cid in (slow, ask, clarify):
            again = await app.chat(cid, "still there?")
            assert again["type"] == "run.accepted", again
            await app.wait_until(lambda: again["run_id"] in app.view(cid).finished)
        assert app.violations == []
    finally:
        await app.close()


async def test_a_fresh_client_after_kill9_finds_the_run_closed(server):
    """An app installed after the crash opens the conversation: the run is over, nothing pending, nothing twice."""
    app = await app_for(server)
    try:
        cid = await app.create("Ask")
        await app.chat(cid, "/approve reboot")
        await app.wait_until(lambda: app.view(cid).approvals)
        server.kill9()
        server.start()
        # the bridge closed the run on start; a fresh app opening the conversation sees it over
        fresh = await app_for(server)
        try:
            hist = await fresh.open(cid)
            assert hist["run"] is None and hist["approvals"] == []
            texts = [m["text"] for m in hist["messages"]]
            assert texts[0] == "/approve reboot"
            assert len(texts) == len(set(m["message_id"] for m in hist["messages"]))  # nothing twice
        finally:
            await fresh.close()
    finally:
        await app.close()
