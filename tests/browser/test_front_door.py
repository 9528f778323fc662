"""The web UI as a front door (headless Chromium against a real bridge with the demo agent).

A newcomer's first minute through the login link, conversations (new, rename, delete,
search), true run states, markdown with sanitization against script injection through
every field that reaches the page, a reload mid-stream that loses no text, comfort
(jump to latest, Enter/Shift+Enter, title badge), WCAG AA contrast in both themes, and
/bench 5000. Screenshots of the main states go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import json
import re
import time

import pytest

from bridge_core.model.commands import DeleteConversation, Origin, SendMessage
from cli.main import main
from tests.conftest import LVMH_TOKEN
from tests.waiting import until

from .conftest import TIMEOUT_MS, shot
from .test_web_ui import FakePlugin, pi_session, expect, open_session, send, settled

pytestmark = pytest.mark.browser

XSS_FLAG = "window.__xss"


async def no_injection(page):
    """No injected script ran and no injected element exists anywhere in the page's body: the
    conversation view, the list, the dialogs and the toasts (the page's own forms excepted)."""
    assert await page.evaluate(f"typeof {XSS_FLAG}") == "undefined"
    injected = await page.evaluate("""() => {
      const forms = 'form:not(#composer):not(.free-form):not(#token-form):not(#new-form):not(#confirm-form)';
      return [
        ...document.querySelectorAll(`body script, body iframe, body object, body embed, body svg, body math, body style, body link, body meta, body base, body ${forms}`),
        ...[...document.querySelectorAll('body *')].filter(e => [...e.attributes].some(a => a.name.startsWith('on'))),
        ...document.querySelectorAll('body img:not(.preview), body [href^="javascript" i], body [src^="javascript" i], body [href^="data:" i], body [style*="expression"]'),
      ].map(e => e.outerHTML.slice(0, 120)); }""")
    assert injected == []


async def run_over(ui, cid: str) -> None:
    """Until the conversation has no active run."""

    async def idle():
        return ui.svc.bridge.conversations[cid].run is None

    await until(idle, TIMEOUT_MS / 1000, "the run's end", interval=0.05)


# --- 1. the newcomer's first minute ----------------------------------------------------------


async def test_newcomer_first_minute(ui, monkeypatch, capsys):
    # the terminal way in: `agent-bridge lvmh open` prints a login link, token in the fragment
    monkeypatch.setenv("LVMH_TOKEN", LVMH_TOKEN)
    assert main(["lvmh", "open", "--data-dir", ui.svc.cfg.data_dir]) == 0
    link = next(line.strip() for line in capsys.readouterr().out.splitlines() if "#token=" in line)
    assert link.startswith(ui.base + "/#token=")

    page = await ui.page(token=None, path=link[len(ui.base):])
    await expect(page.locator("#gate")).to_be_hidden()
    await expect(page.locator("#conn")).to_contain_text("live")
    # the fragment is gone from the address bar; the token is kept in this browser
    assert await page.evaluate("location.hash") == ""
    assert page.url == ui.base + "/"
    assert await page.evaluate("localStorage.getItem('lvmh.token')") == LVMH_TOKEN
    await expect(page.locator(".empty-list")).to_contain_text("New conversation")
    await shot(page, "20-empty")

    # "New conversation": a dialog with the demo agent's model and reasoning pickers
    await page.click("#start-btn")
    dialog = page.locator("#new-dialog")
    await expect(dialog).to_be_visible()
    await expect(page.locator("#new-model option")).to_have_count(2)
    await expect(page.locator("#new-model")).to_contain_text("demo-small")
    await expect(page.locator("#new-reasoning")).to_have_value("medium")
    await page.fill("#new-name", "My first chat")
    await shot(page, "21-new-conversation")
    await page.click("#new-create")
    await expect(dialog).to_be_hidden()
    await expect(page.locator("#session-title")).to_have_text("My first chat")
    await expect(page.locator(".session-item")).to_have_count(1)

    # type, Enter, and the demo agent answers
    box = page.locator("#prompt-input")
    await expect(box).to_be_focused()
    await box.type("Hello, agent")
    await box.press("Enter")
    await expect(page.locator(".msg-user .bubble").last).to_have_text("Hello, agent")
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: Hello, agent")
    await expect(page.locator('.settled[data-settled="done"]')).to_have_count(1)
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("done")
    await shot(page, "22-first-answer")
    assert page.url.startswith(ui.base + "/#/s/")


async def test_new_conversation_with_another_model_and_effort(ui):
    # an agent whose runs use the effort (the demo's do not: test_newcomer_first_minute) gets the picker
    ui.svc.bridge.default_source.uses_reasoning = True
    page = await ui.page()
    await expect(page.locator("#conn")).to_contain_text("live")
    await page.click("#new-conv-btn")
    await expect(page.locator("#new-model option")).to_have_count(2)
    await page.select_option("#new-model", label="demo-large · Demo")
    await page.select_option("#new-reasoning", "high")
    await page.press("#new-name", "Enter")  # Enter in the name field starts it
    await expect(page.locator("#session-title")).to_have_text("New chat")
    sid = page.url.split("#/s/", 1)[1]
    src = ui.svc.bridge.default_source
    assert src.current_model(sid).model == "demo-large"
    assert src.reasoning(sid).effort == "high"
    await expect(page.locator(".chips")).to_contain_text("demo-large")


# --- rename, delete, search ---------------------------------------------------------------


async def test_rename_delete_and_search(ui):
    for name in ("Refactor the parser", "Release notes", "Parser benchmarks"):
        ui.svc.bridge.create_conversation(name)
    page = await ui.page()
    items = page.locator(".session-item")
    await expect(items).to_have_count(3)

    await page.fill("#session-search", "parser")
    await expect(items).to_have_count(2)
    await page.fill("#session-search", "nothing like it")
    await expect(items).to_have_count(0)
    await expect(page.locator(".empty-list")).to_contain_text("No conversation matches")
    await page.fill("#session-search", "")
    await expect(items).to_have_count(3)

    target = page.locator(".session-item", has_text="Release notes")
    sid = await target.get_attribute("data-session-id")
    await open_session(page, sid)
    await page.click("#rename-btn")
    await expect(page.locator("#new-title")).to_have_text("Rename conversation")
    await expect(page.locator("#new-pickers")).to_be_hidden()
    await page.fill("#new-name", "Release notes 2.0")
    await page.click("#new-create")
    await expect(page.locator("#session-title")).to_have_text("Release notes 2.0")
    await expect(page.locator(f'[data-session-id="{sid}"]')).to_contain_text("Release notes 2.0")
    assert ui.svc.bridge.conversations[sid].name == "Release notes 2.0"

    # delete asks first; cancel keeps it
    await page.click("#delete-btn")
    confirm = page.locator("#confirm-dialog")
    await expect(confirm).to_be_visible()
    await expect(confirm).to_contain_text("Release notes 2.0")
    await shot(page, "23-delete-confirm")
    await page.click("#confirm-cancel")
    await expect(confirm).to_be_hidden()
    assert sid in ui.svc.bridge.conversations
    await page.click("#delete-btn")
    await page.click("#confirm-ok")
    await expect(items).to_have_count(2)
    await expect(page.locator("#session-title")).to_have_count(0)  # back to the list
    assert sid not in ui.svc.bridge.conversations

    # deleted from another client while open here: the page says so and goes back to the list
    other = await items.first.get_attribute("data-session-id")
    await open_session(page, other)
    await ui.svc.bridge.execute(DeleteConversation(conversation_id=other), Origin(surface="pheby"))
    await expect(page.locator("#toasts")).to_contain_text("was deleted")
    await expect(page.locator("#session-title")).to_have_count(0)
    await expect(items).to_have_count(1)


async def test_plugin_sessions_offer_no_rename_or_delete(ui):
    ui.svc.bridge.create_conversation("A local chat")
    page = await ui.page()
    sid = "pi-front-door-1"
    plugin = FakePlugin(ui.base, sid, pi_session(sid, "pi work"))
    try:
        await plugin.connect()
        # search finds pi sessions too, by name, repo or working directory
        items = page.locator(".session-item")
        await expect(items).to_have_count(2)
        await page.fill("#session-search", "dev/app")
        await expect(items).to_have_count(1)
        await expect(items).to_contain_text("pi work")
        await page.fill("#session-search", "")
        await expect(items).to_have_count(2)
        await open_session(page, sid)
        await expect(page.locator("#session-title")).to_have_text("pi work")
        await expect(page.locator("#rename-btn")).to_have_count(0)
        await expect(page.locator("#delete-btn")).to_have_count(0)
    finally:
        await plugin.close()


# --- true states --------------------------------------------------------------------------


async def test_failed_and_cancelled_runs_say_so(ui):
    conv = ui.svc.bridge.create_conversation("States")
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    await send(page, "/fail")
    failed = page.locator('.run-failed[data-settled="failed"]')
    await expect(failed).to_have_count(1)
    await expect(failed).to_contain_text("Failed")
    await expect(failed).to_contain_text("demo failure")
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("failed")
    await expect(page.locator('.settled[data-settled="done"]')).to_have_count(0)
    # no empty agent bubble
    assert await page.locator(".msg-assistant").count() == 0
    await shot(page, "24-failed-run")

    # a prompt while a run is active: the page says a run is active (not "offline")
    await send(page, "/slow 30")
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w2")
    box = page.locator("#prompt-input")
    await box.fill("are you there?")
    await box.press("Enter")
    await expect(page.locator("#toasts")).to_contain_text(re.compile(r"run is (already )?active", re.I))
    await expect(page.locator("#toasts")).not_to_contain_text("offline")
    await page.click("#stop-run-btn")
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_have_count(1)
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_contain_text("Cancelled")
    await expect(page.locator('.pill[data-phase="done"]')).to_have_text("cancelled")
    await shot(page, "36-cancelled-run")  # with the "a run is active" toast of the prompt sent during the run

    # after a reload the same states come back from the persisted events
    await page.reload()
    await expect(page.locator('.run-failed[data-settled="failed"]')).to_contain_text("demo failure")
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_have_count(1)


async def test_no_console_errors_on_a_normal_load_and_no_token_in_the_console(ui):
    conv = ui.svc.bridge.create_conversation("Console")
    messages: list[str] = []
    page = await ui.page(path="/")
    page.on("console", lambda m: messages.append(f"{m.type}: {m.text} {m.location.get('url', '')}"))
    await page.reload()
    await expect(page.locator("#conn")).to_contain_text("live")
    await open_session(page, conv.conversation_id)
    await send(page, "hello")
    await expect(settled(page)).to_have_count(1)
    assert [m for m in messages if m.startswith("error")] == []

    # the daemon goes away and comes back: reconnect attempts never print the token
    port = ui.port
    await ui.svc.stop()
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    await page.locator("#conn button").click()  # "retry now" while it is down
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    svc2 = await ui.service_factory(adapters=("lvmh",), data_dir=ui.tmp_path, lvmh_port=port)
    await expect(page.locator("#conn")).to_contain_text("live")
    assert svc2.ports["lvmh"] == port
    assert not any(LVMH_TOKEN in m for m in messages), [m for m in messages if LVMH_TOKEN in m]


async def _gitlab_with_a_repo(pat: str, user: str = "alice"):
    fake_gitlab = pytest.importorskip("tests.fakes.fake_gitlab")
    gitlab = await fake_gitlab.FakeGitLab().start()
    gitlab.add_user(pat, user)
    gitlab.projects = [fake_gitlab.project("group/project", "2026-11-28T10:00:00Z", default_branch="main")]
    return gitlab


async def test_spawn_dialog_says_docker_is_unreachable_and_why(browser, service_factory, tmp_path):
    """No Docker engine listens where the daemon looks: "New agent" says so, with the daemon's reason;
    the page loads and opens the dialog without a console error (no 503 logged)."""
    from .conftest import UI

    pat = "glpat-NODOCKERsecret0123456789"
    dead = f"unix://{tmp_path}/no-docker-here.sock"  # nothing listens on it
    gitlab = await _gitlab_with_a_repo(pat)
    ui = None
    try:
        svc = await service_factory(adapters=("lvmh",), docker_url=dead, gitlab_url=gitlab.url)
        ui = UI(svc, browser, service_factory, tmp_path)
        page = await ui.page()
        await expect(page.locator("#conn")).to_contain_text("live")
        await page.click("#spawn-btn")
        dialog = page.locator("#spawn-dialog")
        banner = dialog.locator("#spawn-unavailable")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("Docker cannot be reached")
        await expect(banner.locator("#spawn-reason")).to_have_text(f"Docker engine not reachable at {dead}")
        await expect(banner).to_contain_text("New conversation works without Docker")
        await expect(dialog.locator("#spawn-dialog-jobs")).to_have_text("No spawn jobs.")
        assert await page.evaluate(CONTRAST_JS) == []
        await shot(page, "34-spawn-docker-unreachable")
        # a normal load, and opening the dialog, log no console error (the status call is a 200)
        assert [m for m in ui.console if m.startswith("error")] == [], ui.console

        # GitLab can still be connected, but "Spawn agent" stays off while Docker is away
        await page.fill("#pat-input", pat)
        await page.click("#pat-connect")
        await expect(dialog).to_contain_text("@alice")
        await page.click('#repo-list .repo[data-repo="group/project"]')
        await expect(page.locator("#spawn-go")).to_be_disabled()
        await expect(banner).to_be_visible()
        # "Check again" asks the daemon again: still unreachable, still said
        await page.click("#spawn-recheck")
        await expect(banner.locator("#spawn-reason")).to_have_text(f"Docker engine not reachable at {dead}")
        assert [m for m in ui.console if m.startswith("error")] == [], ui.console

        # the same dialog in the dark theme, at phone width: readable, targets big enough
        phone = await ui.page(width=390, height=844, theme="dark")
        await expect(phone.locator("#conn")).to_contain_text("live")
        await phone.click("#spawn-btn")
        await expect(phone.locator("#spawn-unavailable")).to_be_visible()
        await expect(phone.locator("#spawn-recheck")).to_be_visible()
        assert await phone.evaluate(CONTRAST_JS) == []
        assert await phone.evaluate(SMALL_TARGETS_JS) == []
        await shot(phone, "35-phone-spawn-docker-unreachable-dark")
    finally:
        if ui is not None:
            await ui.close()
        await gitlab.stop()
    assert not ui.page_errors, ui.page_errors
    assert not ui.foreign_requests, ui.foreign_requests


async def test_spawn_dialog_says_so_when_docker_goes_away(browser, service_factory, tmp_path):
    """The engine answered when the dialog opened, then stopped: the spawn's 503 reason is shown.
    What GitLab says (a user name, a project's name and default branch) reaches the dialog as text."""
    fake_docker = pytest.importorskip("tests.fakes.fake_docker")
    from tests.fakes.fake_gitlab import project

    from .conftest import UI

    pat = "glpat-GOESAWAYsecret0123456789"
    evil = '<img src=x onerror="window.__xss=1">'
    docker = await fake_docker.FakeDocker().start()
    gitlab = await _gitlab_with_a_repo(pat, user="alice" + evil)
    gitlab.projects.append(project("tools/widgets", "2026-11-20T10:00:00Z", default_branch=evil, name=evil))
    ui = None
    try:
        svc = await service_factory(adapters=("lvmh",), docker_url=docker.url, gitlab_url=gitlab.url)
        ui = UI(svc, browser, service_factory, tmp_path)
        page = await ui.page()
        await page.click("#spawn-btn")
        await page.fill("#pat-input", pat)
        await page.click("#pat-connect")
        await expect(page.locator("#spawn-dialog")).to_contain_text("@alice" + evil)
        await expect(page.locator("#toasts")).to_contain_text("GitLab connected as alice" + evil)
        await expect(page.locator("#repo-list .repo")).to_have_count(2)
        await expect(page.locator('#repo-list .repo[data-repo="tools/widgets"]')).to_contain_text(evil)
        await no_injection(page)
        await page.click('#repo-list .repo[data-repo="group/project"]')
        await expect(page.locator("#spawn-go")).to_be_enabled()
        await expect(page.locator("#spawn-unavailable")).to_have_count(0)
        await docker.stop()
        await page.click("#spawn-go")
        await expect(page.locator("#spawn-reason")).to_have_text(f"Docker engine not reachable at {docker.url}")
        await expect(page.locator("#spawn-go")).to_be_disabled()
        await expect(page.locator("#spawn-dialog")).to_be_visible()
        await no_injection(page)
    finally:
        if ui is not None:
            await ui.close()
        await docker.stop()
        await gitlab.stop()
    assert not ui.page_errors, ui.page_errors


# --- markdown and sanitization ------------------------------------------------------------


async def test_markdown_code_highlighting_and_copy(ui):
    conv = ui.svc.bridge.create_conversation("Markdown")
    page = await ui.page()
    await page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await open_session(page, conv.conversation_id)
    await send(page, "**bold** and `code` and a [link](https://example.com/x)\n\n```python\ndef f(x):\n    return x + 1\n```")
    # the user's own message is markdown too, in the user's bubble; its copy button gives the source
    mine = page.locator(".msg-user").last
    await expect(mine.locator(".bubble .md strong")).to_have_text("bold")
    await expect(mine.locator(".md a")).to_have_attribute("href", "https://example.com/x")
    await expect(mine.locator(".code-block code .hljs-keyword").first).to_have_text("def")
    await mine.locator(".msg-meta .copy-btn").click()
    assert (await page.evaluate("navigator.clipboard.readText()")).startswith("**bold** and `code`")
    msg = page.locator(".msg-assistant").last
    await expect(msg.locator(".md strong")).to_have_text("bold")
    await expect(msg.locator(".md code").first).to_have_text("code")
    link = msg.locator(".md a")
    await expect(link).to_have_attribute("href", "https://example.com/x")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    block = msg.locator(".code-block")
    await expect(block.locator(".code-lang")).to_have_text("python")
    await expect(block.locator("code .hljs-keyword").first).to_have_text("def")
    await expect(block.locator("code")).to_have_text("def f(x):\n    return x + 1")
    await block.locator(".copy-btn").click()
    await expect(block.locator(".copy-btn")).to_have_text("Copied")
    assert await page.evaluate("navigator.clipboard.readText()") == "def f(x):\n    return x + 1"
    await msg.locator(".msg-meta .copy-btn").click()
    copied = await page.evaluate("navigator.clipboard.readText()")
    assert copied.startswith("Echo: **bold** and `code`")
    # relative time, with the full timestamp on hover
    t = msg.locator("time.rel")
    await expect(t).to_have_text("just now")
    assert (await t.get_attribute("title")) and (await t.get_attribute("datetime")).endswith("Z")
    await shot(page, "25-markdown")


XSS = [
    '<img src=x onerror="window.__xss=1">',
    '<script>window.__xss=1</script>',
    '<svg onload="window.__xss=1"></svg>',
    '<iframe src="javascript:window.__xss=1"></iframe>',
    '[click me](javascript:window.__xss=1)',
    '![img](x" onerror="window.__xss=1)',
    '<a href="javascript:window.__xss=1">a</a>',
    '<div class="approval pending" style="position:fixed;inset:0">fake</div>',
    '<details open ontoggle="window.__xss=1">x</details>',
    # markdown's own ways to a script: autolinks, reference links, encoded schemes, data: URLs
    '<javascript:window.__xss=1>',
    '[ref][evil]\n\n[evil]: javascript:window.__xss=1\n\n',
    '[enc](&#106;avascript:window.__xss=1)',
    '[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX194c3M9MTwvc2NyaXB0Pg==)',
    '![pic](javascript:window.__xss=1)',
]


async def safe_links(page):
    """Every link a message holds goes to http(s), mailto or an anchor."""
    hrefs = await page.eval_on_selector_all("#app .md a[href]", "els => els.map(e => e.getAttribute('href'))")
    assert all(re.match(r"^(https?:|mailto:|#)", h) for h in hrefs), hrefs


async def test_script_injection_through_every_field(ui):
    evil = " ".join(XSS)
    # session name (a bridge conversation) and message text
    conv = ui.svc.bridge.create_conversation(evil[:190])
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    await expect(page.locator("#session-title")).to_contain_text("<img src=x")
    await send(page, evil)
    await expect(settled(page)).to_have_count(1)
    await expect(page.locator(".msg-assistant").last).to_contain_text("<script>window.__xss=1</script>")
    # the user's own message, rendered as markdown like the agent's: the tags are shown as text
    mine = page.locator(".msg-user").last
    await expect(mine.locator(".bubble .md")).to_contain_text('<img src=x onerror="window.__xss=1">')
    await expect(mine.locator(".bubble .md")).to_contain_text("<script>window.__xss=1</script>")
    await no_injection(page)
    await safe_links(page)
    # a user message typed on another surface arrives through the stream, and again from history on reload
    await ui.svc.bridge.execute(SendMessage(text="from the terminal: " + evil, conversation_id=conv.conversation_id),
                                Origin(surface="cli"))
    await expect(settled(page)).to_have_count(2)
    await expect(page.locator(".msg-user").last).to_contain_text("from the terminal: <img src=x")
    await no_injection(page)
    await page.reload()
    await expect(page.locator(".msg-user")).to_have_count(2)
    await expect(settled(page)).to_have_count(2)
    await no_injection(page)
    await safe_links(page)
    # a tool name through the demo agent
    await send(page, "/tool <img/src/onerror=window.__xss=1>")
    await expect(settled(page)).to_have_count(3)
    await no_injection(page)
    # an approval's command, denied with a reason; a question, answered in free text
    one_line = " ".join(x for x in XSS if "\n" not in x)
    await send(page, "/approve " + one_line)
    card = page.locator("section.approval.pending")
    await expect(card.locator("pre.command")).to_contain_text("<script>window.__xss=1</script>")
    await no_injection(page)
    await card.locator("input.reason").fill(one_line)
    await card.locator('button[data-choice="deny"]').click()
    await expect(page.locator("section.approval.resolved")).to_contain_text("Reason: <img src=x")
    await expect(settled(page)).to_have_count(4)
    await send(page, "/clarify " + one_line)
    question = page.locator("section.clarify.pending")
    await expect(question.locator(".question")).to_contain_text("<svg onload=")
    await no_injection(page)
    await question.locator("input.free").fill(one_line)
    await question.locator("form.free-form button").click()
    await expect(page.locator("section.clarify.resolved")).to_contain_text("Answer: <img src=x")
    await expect(settled(page)).to_have_count(5)
    await no_injection(page)
    await safe_links(page)
    # the session name in the rename and delete dialogs
    await page.click("#rename-btn")
    await expect(page.locator("#new-name")).to_have_value(evil[:190])
    await no_injection(page)
    await page.click("#new-cancel")
    await page.click("#delete-btn")
    await expect(page.locator("#confirm-text")).to_contain_text("<img src=x")
    await no_injection(page)
    await page.click("#confirm-cancel")

    # a pi plugin session: its name, tool arguments and results, thinking, an attachment's name, a notification
    sid = "pi-xss-0001"
    plugin = FakePlugin(ui.base, sid, {"id": sid, "name": '<img src=x onerror="window.__xss=1">pi', "cwd": "/w",
                                       "model": "<b>m</b>", "provider": "p", "agent": True,
                                       "repo": "<script>window.__xss=1</script>", "startedAt": int(time.time() * 1000)})
    try:
        await plugin.connect()
        await open_session(page, sid)
        # the user's message as pi reports it (typed in pi's terminal)
        await plugin.event("message_start", message={"role": "user", "id": "u1"})
        await plugin.event("message_end", message={"role": "user", "id": "u1", "text": evil})
        await expect(page.locator('.msg-user[data-id="u1"] .md')).to_contain_text("<script>window.__xss=1</script>")
        await no_injection(page)
        await plugin.event("agent_start")
        await plugin.event("message_start", message={"role": "assistant", "id": "a1"})
        await plugin.event("message_update", delta=evil)
        await expect(page.locator(".msg-assistant.streaming")).to_contain_text("<script>")
        await no_injection(page)
        await plugin.event("message_end", message={"role": "assistant", "id": "a1", "text": evil, "thinking": evil,
                                                    "toolCalls": [{"id": "c1", "name": "<b>x</b>", "argsJson": json.dumps({"command": evil})}],
                                                    "toolCallId": None})
        await plugin.event("tool_execution_start", toolCallId="c1", toolName="<img src=x onerror=window.__xss=1>", args={"command": evil})
        await plugin.event("tool_execution_end", toolCallId="c1", toolName="x", isError=True, resultPreview=evil)
        await plugin.event("attachment_added", attachment={"id": "f1", "filename": '<img src=x onerror="window.__xss=1">.png',
                                                           "mimeType": "text/html", "size": 3, "url": "javascript:window.__xss=1"})
        await plugin.event("notification", title="<script>window.__xss=1</script>", text=evil)
        await plugin.event("agent_end", usage={})
        await plugin.event("agent_settled", aborted=False)
        await expect(settled(page)).to_have_count(1)
        tool = page.locator('details.tool[data-tool-id="c1"]')
        await tool.locator("summary").click()
        await expect(tool.locator(".tool-body")).to_contain_text("<script>window.__xss=1</script>")
        await page.locator("details.thinking summary").click()
        await expect(page.locator("section.attachment .filename")).to_have_text('<img src=x onerror="window.__xss=1">.png')
        await expect(page.locator(f'[data-session-id="{sid}"]')).to_contain_text("<img src=x")
        await no_injection(page)
        await safe_links(page)
        await shot(page, "26-xss-attempts")
    finally:
        await plugin.close()
    # the session name in a toast: the conversation is deleted from another surface while open here
    await open_session(page, conv.conversation_id)
    await ui.svc.bridge.execute(DeleteConversation(conversation_id=conv.conversation_id), Origin(surface="pheby"))
    await expect(page.locator("#toasts")).to_contain_text("was deleted")
    await expect(page.locator("#toasts")).to_contain_text("<img src=x")
    await no_injection(page)


# --- no lost text ---------------------------------------------------------------------------


async def test_reload_mid_stream_shows_the_whole_text_so_far(ui):
    conv = ui.svc.bridge.create_conversation("Mid-stream")
    cid = conv.conversation_id
    watcher = await ui.page()  # a client that never leaves
    await open_session(watcher, cid)
    await ui.svc.bridge.execute(SendMessage(text="/slow 4", conversation_id=cid), Origin(surface="cli"))
    await expect(watcher.locator(".msg-assistant.streaming")).to_contain_text("w3")
    await shot(watcher, "27-streaming")

    # a page opened mid-stream (nobody else watching it yet) and one reloaded mid-stream
    late = await ui.page(path=f"/#/s/{cid}")
    draft = late.locator(".msg-assistant.streaming")
    await expect(draft).to_contain_text("w1 w2 w3")

    draft_js = """() => { const a = window.lvmhApp.app; const st = a.states.get(a.current);
        const m = st && [...st.items].reverse().find((i) => i.kind === 'message' && i.role === 'assistant');
        return m ? [m.text, Boolean(m.streaming)] : ['', false]; }"""

    async def consistent(pages):
        # both pages hold a prefix of the same text, every time they are looked at, while it streams
        texts = [await p.evaluate(draft_js) for p in pages]
        (a, a_streaming), (b, b_streaming) = texts
        assert a.startswith(b) or b.startswith(a), (a, b)
        seen.append((a, b, a_streaming, b_streaming))
        return a == b and a_streaming and b_streaming

    seen: list = []
    await until(lambda: consistent([watcher, late]), TIMEOUT_MS / 1000, "both pages showing the same stream", interval=0.05)
    assert seen[-1][0].startswith("w1 w2 w3")
    await late.reload()
    await expect(late.locator(".msg-assistant.streaming")).to_contain_text("w1 w2 w3")
    await until(lambda: consistent([watcher, late]), TIMEOUT_MS / 1000, "both pages showing the same stream", interval=0.05)

    await expect(settled(watcher)).to_have_count(1)
    await expect(settled(late)).to_have_count(1)
    final = await watcher.locator(".msg-assistant").last.inner_text()
    assert final == await late.locator(".msg-assistant").last.inner_text()
    assert "w1 w2 w3" in final and "w40" in final


# --- comfort -------------------------------------------------------------------------------


async def test_jump_to_latest_enter_and_shift_enter(ui):
    conv = ui.svc.bridge.create_conversation("Long one")
    cid = conv.conversation_id
    for i in range(12):
        await ui.svc.bridge.execute(SendMessage(text=f"message {i}\n" + "line\n" * 6, conversation_id=cid), Origin(surface="cli"))
        await run_over(ui, cid)
    page = await ui.page(height=700)
    await open_session(page, cid)
    await expect(settled(page)).to_have_count(12)

    # Shift+Enter is a new line, Enter sends
    box = page.locator("#prompt-input")
    await box.type("first line")
    await box.press("Shift+Enter")
    await box.type("second line")
    await expect(box).to_have_value("first line\nsecond line")
    await box.press("Enter")
    await expect(page.locator(".msg-user .bubble").last).to_have_text("first line\nsecond line", use_inner_text=True)
    await expect(settled(page)).to_have_count(13)

    # scrolled up, new content lands below: "jump to latest" appears and brings it into view
    await page.evaluate("document.getElementById('timeline-wrap').scrollTop = 0")
    jump = page.locator("#jump-btn")
    await expect(jump).to_be_hidden()
    await ui.svc.bridge.execute(SendMessage(text="while you read", conversation_id=cid), Origin(surface="cli"))
    await expect(jump).to_be_visible()
    await shot(page, "28-jump-to-latest")
    await jump.click()
    await expect(jump).to_be_hidden()
    await expect(page.locator(".msg-assistant").last).to_be_in_viewport()
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: while you read")


async def test_waiting_approval_badges_the_title(ui):
    conv = ui.svc.bridge.create_conversation("Needs me")
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    # notifications are never asked for on load
    assert await page.evaluate("Notification.permission") == "default"
    await send(page, "/approve make deploy")
    await expect(page.locator("section.approval.pending")).to_be_visible()
    await expect(page).to_have_title("(1) Approval needed · Needs me · lvmh")
    await shot(page, "29-approval-waiting")
    await page.locator('section.approval.pending button[data-choice="once"]').click()
    await expect(settled(page)).to_have_count(1)
    await expect(page).to_have_title("Needs me · lvmh")
    # a question waiting says so in the title too
    await send(page, "/clarify Proceed?")
    await expect(page.locator("section.clarify.pending")).to_be_visible()
    await expect(page).to_have_title("(1) Question waiting · Needs me · lvmh")
    await page.locator('section.clarify.pending button[data-choice="yes"]').click()
    await expect(settled(page)).to_have_count(2)
    await expect(page).to_have_title("Needs me · lvmh")
    # the bell asks for permission on a click (granted here): it then shows as on
    await page.context.grant_permissions(["notifications"])
    await page.click("#notify-btn")
    await expect(page.locator("#notify-btn")).to_have_attribute("aria-pressed", "true")


# --- phone width, dark mode, touch targets, contrast -----------------------------------------

CONTRAST_JS = """() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = ([r, g, b]) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const blend = (top, under) => { const a = top[3]; return [0, 1, 2].map((i) => top[i] * a + under[i] * (1 - a)).concat(1); };
  const bgOf = (el) => { const layers = []; for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    let bg = [255, 255, 255, 1]; if (layers.length && layers[layers.length - 1][3] >= 1) bg = layers.pop();
    else { bg = parse(getComputedStyle(document.body).backgroundColor) || bg; }
    for (const l of layers.reverse()) bg = blend(l, bg); return bg; };
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const el = n.parentElement; if (!el || seen.has(el) || !n.textContent.trim()) continue; seen.add(el);
    const r = el.getBoundingClientRect(); if (!r.width || !r.height) continue;
    const st = getComputedStyle(el); if (st.visibility === 'hidden' || st.display === 'none') continue;
    let opacity = 1; for (let e = el; e; e = e.parentElement) opacity *= Number(getComputedStyle(e).opacity);
    if (opacity < 0.99) continue; // disabled controls are exempt (WCAG 1.4.3)
    if (el.closest('button:disabled, textarea:disabled, input:disabled, [aria-hidden="true"], .brand-mark, .placeholder-mark')) continue;
    const fg0 = parse(st.color); if (!fg0) continue; const bg = bgOf(el); const fg = blend(fg0, bg);
    const [a, b] = [lum(fg), lum(bg)]; const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(st.fontSize); const bold = Number(st.fontWeight) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    if (ratio < need) out.push(`${ratio.toFixed(2)} < ${need}: "${n.textContent.trim().slice(0, 40)}" (${el.tagName.toLowerCase()}.${el.className})`);
  }
  return out;
}"""


async def _rich_session(ui):
    conv = ui.svc.bridge.create_conversation("Contrast check")
    cid = conv.conversation_id
    for text in ("hello **world** and `code`\n\n```python\nprint('x')  # note\n```", "/tool", "/fail", "/attach",
                 "/clarify Proceed?"):
        await ui.svc.bridge.execute(SendMessage(text=text, conversation_id=cid), Origin(surface="cli"))
        if not text.startswith("/clarify"):
            await run_over(ui, cid)
    return cid


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_wcag_aa_contrast(ui, theme):
    cid = await _rich_session(ui)
    page = await ui.page(theme=theme)
    await open_session(page, cid)
    await expect(page.locator("section.clarify.pending")).to_be_visible()
    await expect(page.locator(".run-failed")).to_have_count(1)
    failures = await page.evaluate(CONTRAST_JS)
    assert failures == [], "\n".join(failures)
    await shot(page, f"30-contrast-{theme}")
    # the dialogs and the gate too
    await page.click("#new-conv-btn")
    await expect(page.locator("#new-model option")).to_have_count(2)
    assert await page.evaluate(CONTRAST_JS) == []
    await page.click("#new-cancel")
    await page.click("#signout-btn")
    await expect(page.locator("#gate")).to_be_visible()
    assert await page.evaluate(CONTRAST_JS) == []
    if theme == "dark":
        await shot(page, "31-gate-dark")


SMALL_TARGETS_JS = """() => [...document.querySelectorAll('button, a[href], select, input, textarea, summary')]
    .filter((e) => { const r = e.getBoundingClientRect(); return r.width > 0 && r.height > 0 &&
                     getComputedStyle(e).visibility !== 'hidden' && !e.closest('[inert]') && (r.height < 44 || r.width < 44); })
    .map((e) => `${e.tagName.toLowerCase()}#${e.id}.${e.className} ${Math.round(e.getBoundingClientRect().width)}x${Math.round(e.getBoundingClientRect().height)}`)"""


async def test_phone_width_touch_targets_and_dark_mode(ui):
    cid = await _rich_session(ui)
    page = await ui.page(width=390, height=844, color_scheme="dark")
    await expect(page.locator(".session-item")).to_have_count(1)
    await shot(page, "32-phone-list-dark")
    await open_session(page, cid)
    await expect(page.locator("section.clarify.pending")).to_be_visible()
    await shot(page, "33-phone-session-dark")
    assert await page.evaluate(SMALL_TARGETS_JS) == []
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # the dialogs too
    await page.click(".back")
    await page.click("#new-conv-btn")
    await expect(page.locator("#new-model option")).to_have_count(2)
    assert await page.evaluate(SMALL_TARGETS_JS) == []
    await page.click("#new-cancel")


# --- performance guard ------------------------------------------------------------------------


async def test_bench_5000_renders(ui):
    conv = ui.svc.bridge.create_conversation("Bench")
    page = await ui.page()
    await open_session(page, conv.conversation_id)
    await send(page, "/bench 5000")
    await expect(settled(page)).to_have_count(1)
    text = await page.locator(".msg-assistant").last.locator(".md").inner_text()
    assert text.count("tok") == 5000
