"""One run seen on three surfaces on three nodes (issue "Beyond one machine", "What must hold"):
three `agent-bridge serve` processes on one private PostgreSQL and one private Redis, a Pheby
client on n1, a Loomi phone on n2 (paired with a token of `agent-bridge loomi pair` against n3)
and an lvmh browser on n3, all spec-model clients over real sockets (tests/conformance/*_client.py).

An approval raised by a run on n1 is answered over lvmh REST on n3, every surface is told who
decided and shows the same reply; then n1 is killed (`kill -9`) in the middle of a slow run:
within the contract's 15 s the phone and the browser see the run closed, and every client
recovers on another node through its own protocol's means (Pheby `conversation.open`, Loomi
`last_seq` replay, lvmh event refetch), each holding the same text for every message."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest

from tests.conformance.loomi_client import LoomiApp, close_all
from tests.conformance.lvmh_client import Browser, Rest
from tests.conformance.pheby_client import PhebyApp
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, ROOT, BridgeProcess
from tests.waiting import until

GONE = "This run was interrupted: the bridge node running it stopped."
CONTRACT = 15.0  # s: the others notice a dead node and close its runs (docs/scale-out.md "Several live nodes")


@pytest.fixture
def nodes(serve_nodes):
    """Three nodes of one bridge with every front end, started one after the other."""
    return serve_nodes("n1", "n2", "n3", adapters="pheby,loomi,lvmh")


def _pheby(p: BridgeProcess) -> str:
    return f"ws://127.0.0.1:{p.ports['pheby']}/ws"


def _loomi(p: BridgeProcess) -> str:
    return f"ws://127.0.0.1:{p.ports['loomi']}/ws"


def _lvmh(p: BridgeProcess) -> str:
    return f"http://127.0.0.1:{p.ports['lvmh']}"


async def _pair_token(p: BridgeProcess) -> dict:
    """The QR payload `agent-bridge loomi pair --json` prints against this node."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "loomi", "pair", "--json", "--data-dir", p.data_dir, cwd=ROOT, env=p.env,
        stdin=subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return json.loads(out.decode().strip().splitlines()[-1])


def _live(browser: Browser, sid: str) -> list[dict]:
    """The persisted kinds of events of ``sid`` as the browser's socket delivered them, in order."""
    return [e for f in browser.frames if f.get("type") == "events" and f["sessionId"] == sid
            for e in f["events"] if e["type"] != "message_update"]  # fmt: skip


def _loomi_messages(phone: LoomiApp, cid: str) -> list[tuple[str, str]]:
    """(role, text) of every message of ``cid`` the phone holds, in seq order: the user's messages
    (`session.message`), each run's final text (`run.completed`), notices (`notification`)."""
    out = []
    for f in phone.events:
        if f.get("task_id") != cid:
            continue
        p = f["payload"]
        if f["type"] == "session.message":
            out.append((p["role"], p["text"]))
        elif f["type"] == "run.completed" and p["text"]:
            out.append(("assistant", p["text"]))
        elif f["type"] == "notification":
            out.append(("assistant", p["text"]))
    return out


def _lvmh_messages(events: list[dict]) -> list[tuple[str, str]]:
    """(role, text) of every message of a session's events: each ``message_end``, and the notices
    (a run interrupted) that come as ``notification`` events with the message's id."""
    out = []
    for e in events:
        if e["type"] == "message_end":
            out.append((e["message"]["role"], e["message"]["text"]))
        elif e["type"] == "notification" and e.get("messageId"):
            out.append(("assistant", e["text"]))
    return out


def _streamed(browser: Browser, sid: str, run_id: str) -> bool:
    """The browser has seen some text of ``run_id`` streamed (a `message_update` after its `agent_start`)."""
    started = False
    for e in browser.view(sid).events:
        if e["type"] == "agent_start":
            started = e.get("runId") == run_id
        elif started and e["type"] == "message_update" and e.get("delta"):
            return True
    return False


@pytest.mark.hardening  # a crash; waits for the dead node's liveness to expire (about 10 s)
async def test_pheby_on_n1_loomi_on_n2_a_browser_on_n3_see_one_run_and_recover_from_kill_9(nodes):
    n1, n2, n3 = nodes
    app = PhebyApp(_pheby(n1), PHEBY_SECRET)
    phone = LoomiApp("Pixel 9")
    browser = Browser(_lvmh(n3), LVMH_TOKEN)
    rest2 = Rest(_lvmh(n2), LVMH_TOKEN)
    try:
        await app.connect()
        qr = await _pair_token(n3)
        assert qr["url"] == _loomi(n3), qr
        await phone.pair(dict(qr, url=_loomi(n2)))  # a token of n3, redeemed on n2
        await browser.connect()
        cid = await app.create("Three surfaces")
        await until(lambda: browser.listed(cid), what="the conversation in the browser's session list on n3")
        await browser.subscribe(cid)
        await phone.until(lambda: [f for f in phone.events if f["type"] == "task.created" and f["task_id"] == cid])

        # --- an approval raised by a run on n1, answered over lvmh REST on n3 -----------------------
        accepted = await app.chat(cid, "/approve ls")
        assert accepted["type"] == "run.accepted", accepted
        run1 = accepted["run_id"]
        (aid,) = await app.wait_until(lambda: list(app.view(cid).approvals))
        required = await phone.wait_for("approval.required", run_id=run1)
        assert required["payload"]["approval_id"] == aid and required["payload"]["command"] == "ls"
        asked = await until(lambda: [e for e in browser.view(cid).events if e["type"] == "approval_request"],
                            what="the approval request in the browser on n3")  # fmt: skip
        assert [e["approvalId"] for e in asked] == [aid] and asked[0]["runId"] == run1
        status, body = await browser.rest.call("POST", f"/api/approvals/{aid}", {"choice": "once"})
        assert status == 200 and body["ok"] is True and body["accepted"] is True, (status, body)

        fin = await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run1)
        assert fin["status"] == "completed"
        done = await phone.wait_for("run.completed", run_id=run1)
        await until(lambda: not browser.view(cid).running() and "agent_settled" in browser.view(cid).types(),
                    what="the approved run settled in the browser on n3")  # fmt: skip
        # every surface is told who decided: the lvmh REST answer, from afar
        (resolved,) = [f for f in app.conn_frames if f["type"] == "approval.resolved"]
        assert (resolved["approval_id"], resolved["choice"], resolved["accepted"]) == (aid, "once", True), resolved
        assert (resolved["decided_by"], resolved["surface"]) == ("remote", "lvmh"), resolved
        (told,) = phone.find("approval.resolved")
        assert told["payload"] == {"approval_id": aid, "choice": "once", "decided_by": "remote", "accepted": True,
                                   "surface": "lvmh"}, told  # fmt: skip
        (seen,) = [e for e in browser.view(cid).events if e["type"] == "approval_resolved"]
        assert (seen["approvalId"], seen["choice"], seen["accepted"]) == (aid, "once", True), seen
        assert (seen["decidedBy"], seen["surface"]) == ("remote", "lvmh"), seen
        # and the same final text on all three
        (mid,) = [f["message_id"] for f in app.conn_frames if f["type"] == "message.start" and f["run_id"] == run1]
        (complete,) = [f for f in app.conn_frames if f["type"] == "message.complete" and f["message_id"] == mid]
        assert complete["text"] == "Ran: ls"
        assert done["payload"]["status"] == "completed" and done["payload"]["text"] == "Ran: ls"
        assert phone.run_text(run1) == "Ran: ls"
        assert browser.view(cid).texts() == ["Ran: ls"]
        assert app.view(cid).approvals == {} and browser.view(cid).pending_decisions() == []

        # --- a slow run on n1; n1 killed mid-stream -------------------------------------------------
        accepted = await app.chat(cid, "/slow 30")
        assert accepted["type"] == "run.accepted", accepted
        run2 = accepted["run_id"]
        draft = (await app.wait_frame(lambda f: f["type"] == "message.start" and f["run_id"] == run2))["message_id"]
        await app.wait_frame(lambda f: f["type"] == "message.delta" and f["message_id"] == draft
                             and len(f["text"].split()) >= 3)  # fmt: skip
        await phone.wait_for("run.delta", run_id=run2)
        await until(lambda: _streamed(browser, cid, run2), what="text of the slow run in the browser on n3")
        n1.kill9()
        killed = time.monotonic()
        drafts = [f["text"] for f in app.frames if f["type"] == "message.delta" and f["message_id"] == draft]

        def left() -> float:
            return max(0.1, CONTRACT - (time.monotonic() - killed))

        closed = await phone.wait_for("run.completed", run_id=run2, timeout=left())
        await until(lambda: not browser.view(cid).running()
                    and _lvmh_messages(browser.view(cid).persisted())[-1:] == [("assistant", GONE)],
                    timeout=left(), what="the interrupted run closed in the browser on n3")  # fmt: skip
        await phone.until(lambda: [f for f in phone.find("notification") if f["task_id"] == cid], timeout=left())
        assert time.monotonic() - killed < CONTRACT
        said = phone.run_text(run2)  # what the run said until n1 died, as the phone got it delta by delta
        assert said.startswith("w1") and len(said.split()) < 300, said
        assert closed["payload"]["status"] == "failed" and closed["payload"]["finished"] is False, closed
        assert closed["payload"]["text"] == said
        assert said.startswith(drafts[-1])  # the Pheby client on n1 saw some of it before n1 died
        assert [f["payload"]["status"] for f in phone.find("run.failed", run_id=run2)] == ["failed"]
        assert [f["payload"]["text"] for f in phone.find("notification") if f["task_id"] == cid] == [GONE]
        tasks = await phone.request("task.list", {"limit": 10}, answer="task.list.result")
        assert [t["status"] for t in tasks["payload"]["tasks"] if t["task_id"] == cid] == ["idle"], tasks
        view = browser.view(cid)
        assert view.open_messages() == [] and view.pending_decisions() == [], view.types()
        (end,) = [e for e in view.events if e["type"] == "agent_end" and e.get("runId") == run2]
        assert end["status"] == "failed", end
        assert view.texts() == ["Ran: ls", said]
        closers = [p.stderr().count("node n1 is gone: closing its run") for p in (n2, n3)]
        assert sorted(closers) == [0, 1]  # one survivor closed it

        # --- the Pheby client, whose node died, recovers on n2 --------------------------------------
        await app.reconnect(url=_pheby(n2))
        want = [("user", "/approve ls"), ("assistant", "Ran: ls"), ("user", "/slow 30"), ("assistant", said),
                ("assistant", GONE)]  # fmt: skip
        assert app.view(cid).transcript() == want
        assert app.view(cid).run is None and app.view(cid).open_bubbles() == [] and app.view(cid).approvals == {}

        # while the phone is away, a run on n2 (no run is left active on the conversation)
        last_seq = phone.processed
        await phone.disconnect()
        accepted = await app.chat(cid, "after the crash")
        assert accepted["type"] == "run.accepted", accepted
        run3 = accepted["run_id"]
        await app.wait_frame(lambda f: f["type"] == "run.finished" and f["run_id"] == run3)
        want += [("user", "after the crash"), ("assistant", "Echo: after the crash")]

        # --- the phone comes back on n3 with its last_seq: the run it missed, once, nothing else ----
        ok = await phone.connect(_loomi(n3))
        assert ok["seq"] == last_seq and ok["payload"]["truncated"] is False, ok
        await phone.wait_for("run.completed", run_id=run3)
        got = phone.connections[-1][1:]  # the seqs this connection delivered after hello.ok
        assert got and got == sorted(set(got)) and got[0] > last_seq, (last_seq, got)
        assert phone.dropped == []
        seqs = phone.seqs()
        assert seqs == sorted(set(seqs)), seqs
        replayed = [f for f in phone.events if f.get("replayed")]
        assert {f["run_id"] for f in replayed} - {None} == {run3}, [(f["type"], f["run_id"]) for f in replayed]
        for run in (run1, run2, run3):
            assert len(phone.find("run.started", run_id=run)) == 1 and len(phone.completed(run)) == 1, run
        assert phone.run_text(run3) == "Echo: after the crash"

        # --- the browser refetches from n2: the events it saw live on n3, with the same seqs --------
        await until(lambda: browser.view(cid).texts()[-1:] == ["Echo: after the crash"]
                    and not browser.view(cid).running(), what="the run on n2 in the browser on n3")  # fmt: skip
        live = _live(browser, cid)
        refetched = await rest2.events(cid)
        assert [e["seq"] for e in refetched] == [e["seq"] for e in live]
        assert refetched == live == browser.view(cid).persisted()
        assert browser.twice == []

        # --- every message holds the same text on the three surfaces --------------------------------
        assert app.view(cid).transcript() == want
        await app.open(cid)
        assert app.view(cid).transcript() == want
        assert _loomi_messages(phone, cid) == want
        assert _lvmh_messages(live) == want
        assert app.violations == []
    finally:
        await close_all()
        await app.close()
        await browser.close()
        await rest2.close()
