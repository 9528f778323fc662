"""The lvmh web UI in headless Chromium against a real bridge (demo agent) with the lvmh front end.

Everything the page does goes through the daemon's REST API and browser WebSocket, as any client.
Conditions are awaited with Playwright's auto-waiting (an upper bound, never a timing assertion).
"""

from __future__ import annotations

import asyncio
import json
import re
import time

import aiohttp
import pytest

from bridge_core.model.commands import Origin, ResolveApproval, SendMessage
from tests.conftest import LVMH_TOKEN
from tests.waiting import until

from .conftest import TIMEOUT_MS, shot

pytestmark = pytest.mark.browser


def expect(target):
    from playwright.async_api import expect as pw_expect

    pw_expect.set_options(timeout=TIMEOUT_MS)
    return pw_expect(target)


async def open_session(page, sid: str):
    await page.click(f'[data-session-id="{sid}"] a')
    await expect(page.locator("#session-title")).to_be_visible()
    await expect(page.locator("#timeline-foot", has_text="Loading history")).to_have_count(0)


async def send(page, text: str):
    box = page.locator("#prompt-input")
    await expect(box).to_be_enabled()
    await box.fill(text)
    await box.press("Enter")
    await expect(box).to_have_value("")


def settled(page):
    return page.locator(".settled")


def pi_session(sid: str, name: str) -> dict:
    """A pi session's description as its plugin's hello carries it (the lvmh spec), in /home/dev/app."""
    return {"id": sid, "name": name, "cwd": "/home/dev/app", "model": "m", "provider": "p", "agent": False,
            "repo": None, "startedAt": int(time.time() * 1000)}


class FakePlugin:
    """A pi plugin as the spec describes it: bearer-authenticated /agent/ws, hello, then events."""

    def __init__(self, base: str, sid: str, session: dict):
        self.url = base.replace("http://", "ws://") + "/agent/ws"
        self.sid = sid
        self.session = session
        self.seq = 0
        self.received: list[dict] = []
        self.http = None
        self.ws = None
        self.reader = None
        self.welcome: asyncio.Future = None

    async def connect(self):
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(self.url, headers={"Authorization": f"Bearer {LVMH_TOKEN}"})
        self.welcome = asyncio.get_running_loop().create_future()
        self.reader = asyncio.create_task(self._read())
        await self.ws.send_str(json.dumps(
            {"v": 1, "type": "hello", "sessionId": self.sid, "seq": 0, "ts": int(time.time() * 1000), "session": self.session}))
        return await asyncio.wait_for(self.welcome, 10)

    async def _read(self):
        async for msg in self.ws:
            if msg.type != aiohttp.WSMsgType.TEXT:
                continue
            frame = json.loads(msg.data)
            if frame.get("type") == "welcome" and not self.welcome.done():
                self.welcome.set_result(frame)
            else:
                self.received.append(frame)

    async def event(self, type_: str, **payload):
        self.seq += 1
        frame = {"v": 1, "sessionId": self.sid, "seq": self.seq, "ts": int(time.time() * 1000), "type": type_, **payload}
        await self.ws.send_str(json.dumps(frame))

    async def wait_for(self, type_: str):
        try:
            return await until(lambda: next((f for f in self.received if f.get("type") == type_), None),
                               TIMEOUT_MS / 1000, f"a {type_} frame", interval=0.05)
        except AssertionError:
            raise AssertionError(f"no {type_} frame reached the plugin; got {self.received}") from None

    async def close(self):
        if self.ws is not None:
            await self.ws.close()
        if self.reader is not None:
            await asyncio.gather(self.reader, return_exceptions=True)
        if self.http is not None:
            await self.http.close()


# --- scenarios -------------------------------------------------------------------------------


async def test_token_gate_then_session_list(ui):
    ui.svc.bridge.create_conversation("Refactor the parser")
    ui.svc.bridge.create_conversation("Write release notes")
    page = await ui.page(token=None)
    gate = page.locator("#gate")
    await expect(gate).to_be_visible()
    await shot(page, "01-token-gate")

    await page.fill("#token-input", "not-the-token")
    await page.click("#token-save")
    await expect(page.locator("#gate-error")).to_have_text("That token was refused.")

    await page.fill("#token-input", LVMH_TOKEN)
    await page.click("#token-save")
    await expect(gate).to_be_hidden()
    items = page.locator(".session-item")
    await expect(items).to_have_count(2)
    await expect(page.locator(".session-list")).to_contain_text("Refactor the parser")
    await expect(page.locator(".session-list")).to_contain_text("Write release notes")
    # the bridge's own agent is named, never called "online" or "local" (issue 38)
    await expect(page.locator(".session-item .badge").first).to_have_text("Demo")
    await expect(page.locator(".session-item .dot").first).to_have_attribute("title", "Demo agent ready")
    await expect(page.locator("#conn")).to_contain_text("live")
    assert await page.evaluate("localStorage.getItem('lvmh.token')") == LVMH_TOKEN

    # a conversation created elsewhere appears live (session_list frame)
    ui.svc.bridge.create_conversation("Created while watching")
    await expect(items).to_have_count(3)
    await shot(page, "02-session-list")

    # the token is kept: a reload goes straight to the list
    await page.reload()
    await expect(items).to_have_count(3)
    await expect(gate).to_be_hidden()


async def test_watch_a_run_stream_in_then_prompt(ui):
    conv = ui.svc.bridge.create_conversation("Demo chat")
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    await expect(page.locator("#composer-reason")).to_be_hidden()

    # a slow run streams word by word: the draft grows while the run is on
    await send(page, "/slow 3")
    draft = page.locator(".msg-assistant.streaming")
    await expect(draft).to_contain_text("w3")
    await expect(page.locator('.pill[data-phase="running"]')).to_be_visible()
    await shot(page, "03-session-streaming")
    await expect(settled(page)).to_have_count(1)
    await expect(page.locator(".msg-assistant").last).to_contain_text("w30")
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("done")

    # a prompt typed in the page: echoed back, as one user and one assistant message
    await send(page, "hello from the page")
    await expect(page.locator(".msg-user .bubble").last).to_have_text("hello from the page")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: hello from the page")
    await expect(settled(page)).to_have_count(2)

    # data is text, never markup
    evil = '<img src=x onerror="window.pwned=1"><b>bold</b>'
    await send(page, evil)
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: " + evil)
    assert await page.locator("#timeline img, #timeline b").count() == 0
    assert await page.evaluate("window.pwned") is None
    await expect(settled(page)).to_have_count(3)

    # a tool call as a compact component, completed
    await send(page, "/tool grep")
    tool = page.locator('details.tool[data-status="completed"]')
    await expect(tool).to_have_count(1)
    await expect(tool.locator(".tool-name")).to_have_text("grep")
    await tool.locator("summary").click()
    await expect(tool.locator(".tool-body")).to_contain_text('"input": "demo"')
    await expect(tool.locator(".tool-body")).to_contain_text("ok")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Tool grep completed.")
    await expect(settled(page)).to_have_count(4)
    await shot(page, "04-session-desktop-light")

    # the same session after a reload is rebuilt from persisted events only, without duplicates
    await page.reload()
    await expect(settled(page)).to_have_count(4)
    await expect(page.locator(".msg-user")).to_have_count(4)
    await expect(page.locator(".msg-assistant")).to_have_count(4)
    await expect(page.locator("details.tool")).to_have_count(1)

    # dark theme via the toggle (auto -> dark)
    await page.click("#theme-btn")
    assert await page.evaluate("document.documentElement.dataset.theme") == "dark"
    await shot(page, "05-session-desktop-dark")


async def test_abort_a_slow_run(ui):
    conv = ui.svc.bridge.create_conversation("Slow one")
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    await send(page, "/slow 30")
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w2")
    abort = page.locator("#stop-run-btn")  # Stop, in place of Send while the run streams
    await expect(abort).to_be_enabled()
    await abort.click()
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_have_count(1)
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("cancelled")
    await expect(page.locator("#stop-run-btn")).to_be_hidden()
    await expect(page.locator("#send-btn")).to_be_visible()
    text = await page.locator(".msg-assistant").last.inner_text()
    assert "w300" not in text
    # the session takes prompts again
    await send(page, "after abort")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: after abort")


async def test_approvals_clarifications_attachments(ui):
    conv = ui.svc.bridge.create_conversation("Decisions")
    cid = conv.conversation_id
    page = await ui.page()
    await open_session(page, cid)

    # answered here
    await send(page, "/approve ls")
    card = page.locator("section.approval.pending")
    await expect(card).to_be_visible()
    await expect(card.locator("pre.command")).to_have_text("ls")
    await shot(page, "06-approval-pending")
    await card.locator('button[data-choice="once"]').click()
    done = page.locator("section.approval.resolved")
    await expect(done).to_contain_text("Allowed once")
    await expect(done).to_contain_text("answered here")
    await expect(page.locator('details.tool[data-status="completed"] .tool-name')).to_have_text("terminal")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Ran: ls")

    # answered first from another surface (a Pheby client): the page says who decided
    await send(page, "/approve rm -rf build")
    pending = page.locator("section.approval.pending")
    await expect(pending).to_be_visible()
    approval_id = await pending.get_attribute("data-approval-id")
    await ui.svc.bridge.execute(ResolveApproval(approval_id=approval_id, choice="deny"), Origin(surface="pheby"))
    other = page.locator(f'section.approval[data-approval-id="{approval_id}"]')
    await expect(other).to_contain_text("Denied")
    await expect(other).to_contain_text("answered from pheby")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Denied: rm -rf build")
    await shot(page, "07-approvals-resolved")

    # a clarification answered with a choice
    await send(page, "/clarify Ship it?")
    clar = page.locator("section.clarify.pending")
    await expect(clar.locator(".question")).to_have_text("Ship it?")
    await clar.locator('button[data-choice="yes"]').click()
    await expect(page.locator("section.clarify.resolved")).to_contain_text("Answer: yes")
    await expect(page.locator(".msg-assistant").last).to_contain_text('You answered: "yes"')

    # an attachment, downloaded with the bearer header through a blob URL
    await send(page, "/attach")
    att = page.locator("section.attachment")
    await expect(att.locator(".filename")).to_have_text("demo.txt")
    async with page.expect_download() as info:
        await att.locator("button.download").click()
    download = await info.value
    assert download.suggested_filename == "demo.txt"
    with open(await download.path(), "rb") as f:
        assert f.read() == b"demo attachment\n"

    # an image attachment shows a preview
    await send(page, "/image")
    img = page.locator('section.attachment img.preview')
    await expect(img).to_have_count(1)
    await page.wait_for_function("() => { const i = document.querySelector('img.preview'); return i && i.complete && i.naturalWidth === 8; }")
    await shot(page, "08-attachments")


async def test_plugin_session_appears_and_streams(ui):
    page = await ui.page()
    await expect(page.locator("#conn")).to_contain_text("live")
    sid = "pi-fake-0001"
    plugin = FakePlugin(ui.base, sid, {
        "id": sid, "name": "fix flaky test", "cwd": "/home/dev/src/widgets", "model": "glm-5.3",
        "provider": "zai-renaud", "agent": True, "repo": "tools/widgets", "startedAt": int(time.time() * 1000),
    })
    try:
        welcome = await plugin.connect()
        assert welcome["lastSeq"] == 0
        item = page.locator(f'[data-session-id="{sid}"]')
        await expect(item).to_be_visible()
        await expect(item).to_contain_text("fix flaky test")
        await expect(item).to_contain_text("tools/widgets")
        await expect(item.locator(".badge")).to_have_text("pi · container")
        await expect(item.locator(".dot.online")).to_have_count(1)
        await open_session(page, sid)
        await expect(page.locator(".chips")).to_contain_text("glm-5.3 · zai-renaud")

        # a run streams in from the plugin
        await plugin.event("agent_start")
        await plugin.event("message_start", message={"role": "user", "id": "u1"})
        await plugin.event("message_end", message={"role": "user", "id": "u1", "text": "make the test stable", "thinking": None, "toolCalls": [], "toolCallId": None})
        await plugin.event("message_start", message={"role": "assistant", "id": "a1"})
        await plugin.event("message_update", delta="Looking at ")
        await plugin.event("message_update", delta="the test.")
        await expect(page.locator(".msg-assistant.streaming")).to_contain_text("Looking at the test.")
        todo_args = {"todos": [
            {"content": "Reproduce the flake", "status": "completed"},
            {"content": "Fix the race", "status": "in_progress"},
            {"content": "Run the suite", "status": "pending"}]}
        await plugin.event("message_end", message={
            "role": "assistant", "id": "a1", "text": "Looking at the test.", "thinking": "The race is in setup.",
            "toolCalls": [{"id": "c1", "name": "todo", "argsJson": json.dumps(todo_args)},
                          {"id": "c2", "name": "bash", "argsJson": json.dumps({"command": "pytest -x tests/test_widgets.py"})}],
            "toolCallId": None})
        await plugin.event("tool_execution_start", toolCallId="c1", toolName="todo", args=todo_args)
        await plugin.event("tool_execution_end", toolCallId="c1", toolName="todo", isError=False, resultPreview="3 tasks")
        await plugin.event("tool_execution_start", toolCallId="c2", toolName="bash", args={"command": "pytest -x tests/test_widgets.py"})
        await plugin.event("tool_execution_update", toolCallId="c2", toolName="bash", partial="collected 12 items")
        await expect(page.locator('details.tool[data-tool-id="c2"][data-status="running"]')).to_be_visible()
        await plugin.event("tool_execution_end", toolCallId="c2", toolName="bash", isError=True, resultPreview="1 failed, 11 passed")
        await plugin.event("tool_execution_start", toolCallId="s1", toolName="subagent", args={"agent": "reviewer", "task": "Review the fix"})
        await plugin.event("agent_end", usage={"inputTokens": 1234, "outputTokens": 56, "totalCost": 0.0021})

        await expect(page.locator('details.tool[data-tool-id="c2"][data-status="failed"]')).to_be_visible()
        await expect(page.locator(".todo")).to_have_count(3)
        await expect(page.locator('.todo[data-status="in_progress"]')).to_have_text("▸Fix the race")
        await expect(page.locator(".sub")).to_contain_text("reviewer")
        await expect(page.locator("details.thinking")).not_to_have_attribute("open", "")
        await plugin.event("tool_execution_end", toolCallId="s1", toolName="subagent", isError=False, resultPreview="LGTM")
        await plugin.event("agent_settled", aborted=False)
        await expect(settled(page)).to_contain_text("1,234 in · 56 out")
        await expect(page.locator(".usage")).to_contain_text("1,234 in")
        await shot(page, "09-plugin-session")

        # a prompt from the page reaches the plugin
        await send(page, "also add a regression test")
        frame = await plugin.wait_for("prompt")
        assert frame["message"] == "also add a regression test"

        # the plugin goes away: offline, prompt box disabled with the reason
        await plugin.close()
        await expect(page.locator(f'[data-session-id="{sid}"] .dot.offline')).to_have_count(1)
        await expect(page.locator("#prompt-input")).to_be_disabled()
        await expect(page.locator("#composer-reason")).to_contain_text("offline")
        await shot(page, "10-plugin-offline")
    finally:
        await plugin.close()


async def test_phone_width(ui):
    conv = ui.svc.bridge.create_conversation("On the phone")
    await ui.svc.bridge.execute(SendMessage(text="/tool", conversation_id=conv.conversation_id), Origin(surface="cli"))
    page = await ui.page(width=390, height=844, color_scheme="dark")
    await expect(page.locator(".session-item")).to_have_count(1)
    await expect(page.locator("#view")).to_be_hidden()
    await shot(page, "11-phone-list-dark")
    await open_session(page, conv.conversation_id)
    await expect(page.locator("#sidebar")).to_be_hidden()
    await expect(settled(page)).to_have_count(1)
    await expect(page.locator(".msg-assistant").last).to_contain_text("Tool demo_tool completed.")
    await shot(page, "12-phone-session-dark")
    # no horizontal overflow at phone width
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await page.click("a.back")
    await expect(page.locator("#sidebar")).to_be_visible()


async def test_reconnect_after_server_restart(ui):
    conv = ui.svc.bridge.create_conversation("Survives restarts")
    cid = conv.conversation_id
    page = await ui.page()
    await open_session(page, cid)
    await send(page, "before the restart")
    await expect(settled(page)).to_have_count(1)

    port = ui.port
    await ui.svc.stop()
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    await expect(page.locator("#prompt-input")).to_be_disabled()
    await expect(page.locator("#composer-reason")).to_contain_text("Not connected to the daemon")
    await shot(page, "13-reconnecting")

    svc2 = await ui.service_factory(adapters=("lvmh",), data_dir=ui.tmp_path, lvmh_port=port)
    assert svc2.ports["lvmh"] == port
    # a run that completes before the page is back (most likely): only the refetch can show it
    await svc2.bridge.execute(SendMessage(text="while you were away", conversation_id=cid), Origin(surface="cli"))
    await until(lambda: svc2.bridge.conversations[cid].run is None, TIMEOUT_MS / 1000, "the run's end", interval=0.05)
    await expect(page.locator("#conn")).to_contain_text("live")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: while you were away")

    # re-subscribed: a run started elsewhere streams in, and the history has no duplicates
    await svc2.bridge.execute(SendMessage(text="after the restart", conversation_id=cid), Origin(surface="cli"))
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: after the restart")
    await expect(settled(page)).to_have_count(3)
    await expect(page.locator(".msg-user")).to_have_count(3)
    await expect(page.locator(".msg-assistant")).to_have_count(3)
    keys = await page.eval_on_selector_all("#timeline > *", "els => els.map(e => e.dataset.key)")
    assert len(keys) == len(set(keys))
    await send(page, "typed after the restart")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: typed after the restart")


async def test_a_restart_mid_run_shows_what_the_server_says(ui):
    """The daemon restarts while a run streams: the open page does not stay "running"; it shows
    the run failed, interrupted, exactly as a page loaded after the restart shows it."""
    conv = ui.svc.bridge.create_conversation("Restart mid-run")
    cid = conv.conversation_id
    page = await ui.page()
    await open_session(page, cid)
    await send(page, "/slow 30")
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w2")
    await expect(page.locator('.pill[data-phase="running"]')).to_be_visible()

    port = ui.port
    await ui.svc.stop()
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    svc2 = await ui.service_factory(adapters=("lvmh",), data_dir=ui.tmp_path, lvmh_port=port)
    assert svc2.ports["lvmh"] == port
    await expect(page.locator("#conn")).to_contain_text("live")
    failed = page.locator('.run-failed[data-settled="failed"]')
    await expect(failed).to_contain_text("interrupted by a restart")
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("failed")
    await expect(page.locator(".msg.streaming, .live-dot")).to_have_count(0)
    await expect(page.locator("#stop-run-btn")).to_be_hidden()
    await expect(page.locator("#prompt-input")).to_be_enabled()
    await shot(page, "17-restart-mid-run")

    fresh = await ui.page(path=f"/#/s/{cid}")
    await expect(fresh.locator('.run-failed[data-settled="failed"]')).to_contain_text("interrupted by a restart")
    timeline = "() => document.getElementById('timeline').innerText"
    assert await page.evaluate(timeline) == await fresh.evaluate(timeline)

    # the conversation goes on
    await send(page, "after the restart")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: after the restart")


async def test_spawn_from_gitlab_then_stop_container(browser, service_factory, tmp_path, monkeypatch):
    """Connect a PAT, pick a repo and branch, watch the job, see the session connect, stop its container
    (a fake Docker Engine and a fake GitLab started by the test; the daemon talks to them)."""
    fake_docker = pytest.importorskip("tests.fakes.fake_docker")
    fake_gitlab = pytest.importorskip("tests.fakes.fake_gitlab")
    from .conftest import UI

    pat = "glpat-BROWSERsecret0123456789"
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", "zai-browser-test-key")
    docker = await fake_docker.FakeDocker().start()
    gitlab = await fake_gitlab.FakeGitLab().start()
    gitlab.add_user(pat, "alice")
    gitlab.projects = [
        fake_gitlab.project("group/project", "2026-11-28T10:00:00Z", default_branch="main"),
        fake_gitlab.project("tools/widgets", "2026-11-20T10:00:00Z", default_branch="trunk"),
    ]
    plugin = None
    ui = None
    try:
        svc = await service_factory(adapters=("lvmh",), docker_url=docker.url, gitlab_url=gitlab.url)
        ui = UI(svc, browser, service_factory, tmp_path)
        page = await ui.page()
        await expect(page.locator("#conn")).to_contain_text("live")
        await page.click("#spawn-btn")
        dialog = page.locator("#spawn-dialog")
        await expect(dialog).to_be_visible()
        await page.fill("#pat-input", pat)
        await shot(page, "14-spawn-connect-gitlab")
        await page.click("#pat-connect")
        await expect(dialog).to_contain_text("@alice")
        repos = page.locator("#repo-list .repo")
        await expect(repos).to_have_count(2)
        await page.fill("#repo-filter", "widg")
        await expect(repos).to_have_count(1)
        await page.fill("#repo-filter", "")
        await expect(repos).to_have_count(2)
        await page.click('#repo-list .repo[data-repo="group/project"]')
        await expect(page.locator("#branch-input")).to_have_attribute("placeholder", "main")
        await page.fill("#branch-input", "main")
        await shot(page, "15-spawn-pick-repo")
        await page.click("#spawn-go")

        # the page goes to the new session, which waits for its agent; the job is watched live
        await expect(dialog).to_be_hidden()
        await expect(page).to_have_url(re.compile(r"#/s/"))
        sid = page.url.split("#/s/", 1)[1]
        await expect(page.locator("#waiting-session")).to_be_visible()
        job = page.locator(f'#spawn-jobs .job[data-session-id="{sid}"]')
        await expect(job).to_be_visible()
        await expect(job).to_contain_text("group/project")

        # the worker's plugin says hello with the pre-chosen id: the session shows up, open
        plugin = FakePlugin(ui.base, sid, {
            "id": sid, "name": None, "cwd": "/workspace", "model": "glm-5.3", "provider": "zai-renaud",
            "agent": True, "repo": "group/project", "startedAt": int(time.time() * 1000)})
        await plugin.connect()
        await expect(page.locator(f'[data-session-id="{sid}"] .badge')).to_have_text("pi · container")
        await expect(page.locator("#session-title")).to_have_text("group/project")
        await expect(page.locator("#waiting-session")).to_have_count(0)
        await expect(page.locator("#prompt-input")).to_be_enabled()
        await shot(page, "16-spawned-session")

        # stop the container: a second click confirms
        stop = page.locator("#stop-btn")
        await stop.click()
        await expect(stop).to_have_text("Confirm stop")
        await stop.click()
        await expect(page.locator("#toasts")).to_contain_text("Container stopped.")
        assert any(r.method == "DELETE" and "/containers/" in r.path for r in docker.requests)
        html = await page.content()
        assert pat not in html
    finally:
        if plugin is not None:
            await plugin.close()
        if ui is not None:
            await ui.close()
        await docker.stop()
        await gitlab.stop()
    assert not ui.page_errors, ui.page_errors
