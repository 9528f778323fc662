"""The web UI's rough edges for a newcomer (issue 38, item 4), in headless Chromium against a real bridge.

What waits for an answer is visible from anywhere (the conversation's badge, the tab's title and
icon, a banner in the other conversations, with its expiry); the sidebar lives (order, times,
previews, running); Stop stands in place of Send while a run streams, and Esc stops it too; the
empty state lists what the agent can do (from the daemon); a reload mid-run keeps the message's
time; the bridge's own agent is "ready", not "online"; a phone's header is one row; the demo
offers no reasoning levels it would ignore. Screenshots go to test-artifacts/screenshots/.
"""

from __future__ import annotations

import re
import time

import pytest

from bridge_core.model.commands import Origin, SendMessage
from bridge_core.bridge.demo import COMMANDS

from .conftest import shot
from .test_front_door import CONTRAST_JS, SMALL_TARGETS_JS, run_over
from .test_web_ui import FakePlugin, pi_session, expect, open_session, send, settled

pytestmark = pytest.mark.browser

ELSEWHERE = Origin(surface="pheby")  # a message sent from another client, not from this page

FAVICON_JS = "() => { const l = document.getElementById('favicon'); return [l.getAttribute('href'), l.dataset.count || '0']; }"


async def _chats(ui, *names):
    return [ui.svc.bridge.create_conversation(n).conversation_id for n in names]


# --- an approval waiting in another conversation ------------------------------------------------


async def test_an_approval_waiting_elsewhere_is_seen_from_anywhere(ui):
    deploy, chat = await _chats(ui, "Deploy", "Chat")
    page = await ui.page()
    await open_session(page, chat)
    await send(page, "hello")
    await expect(settled(page)).to_have_count(1)
    await expect(page).to_have_title("Chat · lvmh")
    assert (await page.evaluate(FAVICON_JS))[1] == "0"

    # another client asks the demo for something that needs approval, in "Deploy"
    await ui.svc.bridge.execute(SendMessage(text="/approve make deploy", conversation_id=deploy), ELSEWHERE)
    item = page.locator(f'[data-session-id="{deploy}"]')
    await expect(item.locator(".waiting-badge")).to_have_text("1 approval")
    await expect(page.locator(".session-item").first).to_have_attribute("data-session-id", deploy)  # moved up
    await expect(page).to_have_title("(1) Approval needed · Deploy · lvmh")
    href, count = await page.evaluate(FAVICON_JS)
    assert href.startswith("data:image/svg+xml,") and count == "1"
    banner = page.locator("#attention")
    await expect(banner).to_contain_text("Approval needed in Deploy")
    await expect(banner).to_contain_text("make deploy")
    # the demo denies it by itself after 300 s ([demo] approval_timeout): the banner says when
    await expect(banner.locator("time.until")).to_contain_text(re.compile(r"denied automatically in (5 min|4 min|\d+ s)"))
    await shot(page, "40-approval-elsewhere")

    # a page opened now sees it at once (from its first session list)
    fresh = await ui.page()
    await expect(fresh.locator(f'[data-session-id="{deploy}"] .waiting-badge')).to_have_text("1 approval")
    await expect(fresh).to_have_title("(1) Approval needed · Deploy · lvmh")

    # the banner leads there; there the card waits, and no banner (nothing waits elsewhere)
    await banner.locator("a.attention-link").click()
    await expect(page.locator("#session-title")).to_have_text("Deploy")
    card = page.locator("section.approval.pending")
    await expect(card).to_be_visible()
    await expect(card.locator(".expiry")).to_contain_text("denied automatically in")
    await expect(page.locator("#attention")).to_have_count(0)
    await expect(page).to_have_title("(1) Approval needed · Deploy · lvmh")
    await card.locator('button[data-choice="once"]').click()
    await expect(settled(page)).to_have_count(1)
    await expect(page).to_have_title("Deploy · lvmh")
    assert await page.evaluate(FAVICON_JS) == ["/static/icon.svg", "0"]
    await expect(item.locator(".waiting-badge")).to_have_count(0)
    await expect(fresh.locator(f'[data-session-id="{deploy}"] .waiting-badge')).to_have_count(0)
    await expect(fresh).to_have_title(re.compile(r"^lvmh · agent conversations$"))

    # a question waiting elsewhere says so too
    await ui.svc.bridge.execute(SendMessage(text="/clarify Ship it?", conversation_id=chat), ELSEWHERE)
    await expect(page).to_have_title("(1) Question waiting · Chat · lvmh")
    await expect(page.locator("#attention")).to_contain_text("Question in Chat")
    await expect(page.locator(f'[data-session-id="{chat}"] .waiting-badge')).to_have_text("1 question")


async def test_phone_sees_what_waits_elsewhere_with_a_one_row_header(ui):
    deploy, chat = await _chats(ui, "Deploy to production", "A chat with a rather long name that will not fit")
    await ui.svc.bridge.execute(SendMessage(text="/tool", conversation_id=chat), ELSEWHERE)
    await run_over(ui, chat)
    page = await ui.page(width=390, height=844, color_scheme="dark")
    await open_session(page, chat)
    await expect(settled(page)).to_have_count(1)
    # the conversation's header is one row under nothing: the top bar is hidden while connected
    await expect(page.locator(".topbar")).to_be_hidden()
    bottom = await page.evaluate("document.getElementById('session-head').getBoundingClientRect().bottom")
    assert bottom <= 100, f"the header ends {bottom}px down"
    # the rarer actions are behind "⋯"
    await expect(page.locator("#rename-btn")).to_be_hidden()
    await page.click("#head-menu-btn")
    await expect(page.locator("#rename-btn")).to_be_visible()
    await expect(page.locator("#delete-btn")).to_be_visible()
    assert await page.evaluate(SMALL_TARGETS_JS) == []
    await page.click("#session-title")  # a click elsewhere closes it
    await expect(page.locator("#rename-btn")).to_be_hidden()

    await ui.svc.bridge.execute(SendMessage(text="/approve make deploy", conversation_id=deploy), ELSEWHERE)
    banner = page.locator("#attention")
    await expect(banner).to_contain_text("Approval needed in Deploy to production")
    await expect(page).to_have_title("(1) Approval needed · Deploy to production · lvmh")
    assert await page.evaluate(SMALL_TARGETS_JS) == []
    assert await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    await shot(page, "41-phone-approval-elsewhere-dark")
    await banner.locator("a.attention-link").click()
    await expect(page.locator("section.approval.pending")).to_be_visible()
    await shot(page, "42-phone-approval-dark")
    # the list: the conversation carries its badge
    await page.click("a.back")
    await expect(page.locator(f'[data-session-id="{deploy}"] .waiting-badge')).to_have_text("1 approval")

    # the daemon away: the top bar comes back to say so
    port = ui.port
    await page.click(f'[data-session-id="{chat}"] a')
    await ui.svc.stop()
    await expect(page.locator(".topbar")).to_be_visible()
    await expect(page.locator("#conn")).to_contain_text("reconnecting")
    await ui.service_factory(adapters=("lvmh",), data_dir=ui.tmp_path, lvmh_port=port)
    await expect(page.locator(".topbar")).to_be_hidden()


# --- Stop in place of Send, Esc ------------------------------------------------------------------


async def test_stop_stands_in_place_of_send_and_esc_stops_too(ui):
    [cid] = await _chats(ui, "Long run")
    page = await ui.page()
    await open_session(page, cid)
    send_btn, stop_btn = page.locator("#send-btn"), page.locator("#stop-run-btn")
    await expect(send_btn).to_be_visible()
    await expect(stop_btn).to_be_hidden()
    before = await send_btn.bounding_box()

    await send(page, "/slow 30")
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w2")
    await expect(send_btn).to_be_hidden()
    await expect(stop_btn).to_be_visible()
    await expect(stop_btn).to_have_text("Stop")
    box = await stop_btn.bounding_box()
    assert abs(box["x"] + box["width"] - (before["x"] + before["width"])) <= 1  # in Send's place, at the row's end
    await shot(page, "43-stop-in-place-of-send")
    # Enter during the run keeps the text in the box (the demo takes one run at a time)
    await page.fill("#prompt-input", "next question")
    await page.press("#prompt-input", "Enter")
    await expect(page.locator("#toasts")).to_contain_text("A run is already active")
    await expect(page.locator("#prompt-input")).to_have_value("next question")
    await stop_btn.click()
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_have_count(1)
    await expect(stop_btn).to_be_hidden()
    await expect(send_btn).to_be_visible()
    await page.press("#prompt-input", "Enter")  # the kept text goes now
    await expect(page.locator(".msg-assistant").last).to_contain_text("Echo: next question")

    # Esc stops a run, wherever the focus is, but not while a dialog is open (Esc closes that)
    await send(page, "/slow 30")
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w2")
    await page.click("#rename-btn")
    await expect(page.locator("#new-dialog")).to_be_visible()
    await page.keyboard.press("Escape")
    await expect(page.locator("#new-dialog")).to_be_hidden()
    await expect(page.locator(".msg-assistant.streaming")).to_contain_text("w5")  # still streaming
    assert ui.svc.bridge.conversations[cid].run is not None
    await page.locator("#session-title").click()
    await page.keyboard.press("Escape")
    await expect(page.locator('.settled[data-settled="cancelled"]')).to_have_count(2)
    await expect(send_btn).to_be_visible()
    text = await page.locator(".msg-assistant").last.inner_text()
    assert "w300" not in text

    # Esc in another field (a deny reason being typed) is not a Stop: the decision still waits
    await send(page, "/approve rm -rf build")
    reason = page.locator("section.approval.pending input.reason")
    await reason.fill("not now")
    await reason.press("Escape")
    assert await stop_btn.text_content() == "Stop"  # a stop would have said "Stopping…" at once, in the key's handler
    assert await stop_btn.is_visible()
    assert ui.svc.bridge.conversations[cid].approvals
    await page.locator('section.approval.pending button[data-choice="deny"]').click()
    await expect(page.locator("section.approval.resolved")).to_contain_text("Denied")
    await expect(send_btn).to_be_visible()


async def test_a_pi_session_takes_a_message_during_its_run_and_its_run_can_be_stopped(ui):
    page = await ui.page()
    sid = "pi-stop-0001"
    plugin = FakePlugin(ui.base, sid, pi_session(sid, "pi run"))
    try:
        await plugin.connect()
        await open_session(page, sid)
        await expect(page.locator("#presence")).to_have_text("pi · connected")
        await plugin.event("agent_start")
        await plugin.event("message_start", message={"role": "assistant", "id": "a1"})
        await plugin.event("message_update", delta="Working on it")
        await expect(page.locator("#stop-run-btn")).to_be_visible()
        # pi queues a message sent during its run (typed-ahead input): Enter delivers it
        await send(page, "also check the docs")
        frame = await plugin.wait_for("prompt")
        assert frame["message"] == "also check the docs"
        await page.keyboard.press("Escape")
        await plugin.wait_for("abort")
        await expect(page.locator("#stop-run-btn")).to_have_text("Stopping…")
        await plugin.event("message_end", message={"role": "assistant", "id": "a1", "text": "Working on it", "thinking": None,
                                                    "toolCalls": [], "toolCallId": None, "stopReason": "aborted"})
        await plugin.event("agent_end", usage={})
        await plugin.event("agent_settled", aborted=True)
        await expect(page.locator("#send-btn")).to_be_visible()
        await plugin.close()
        await expect(page.locator("#presence")).to_have_text("pi · not connected")
    finally:
        await plugin.close()


# --- the sidebar lives ---------------------------------------------------------------------------


async def test_the_sidebar_keeps_order_times_and_previews_live(ui):
    first, second = await _chats(ui, "First", "Second")
    page = await ui.page()
    await open_session(page, first)
    await send(page, "hello from here")
    await expect(settled(page)).to_have_count(1)
    items = page.locator(".session-item")
    await expect(items.first).to_have_attribute("data-session-id", first)
    await expect(items.first.locator(".session-preview")).to_have_text("Echo: hello from here")
    await expect(items.first.locator("time.when")).to_have_text("just now")

    # another client talks in "Second": it comes to the top, with its preview, running while it runs
    await page.focus(f'[data-session-id="{first}"] a')  # a keyboard user on the list keeps their place
    await ui.svc.bridge.execute(SendMessage(text="/slow 2", conversation_id=second), ELSEWHERE)
    other = page.locator(f'[data-session-id="{second}"]')
    await expect(items.first).to_have_attribute("data-session-id", second)
    await expect(other).to_have_attribute("data-status", "running")
    await expect(other.locator(".when.running")).to_have_text("running")
    await expect(other.locator(".session-preview")).to_have_text("/slow 2")
    await expect(page.locator(f'[data-session-id="{first}"] a')).to_be_focused()
    await page.locator("#prompt-input").focus()
    await shot(page, "44-sidebar-live")
    await expect(other).to_have_attribute("data-status", "idle")
    await expect(other.locator(".session-preview")).to_contain_text("w1 w2")
    await expect(other.locator("time.when")).to_have_text("just now")
    # the open conversation's own timeline was never touched by the other's events
    await expect(page.locator(".msg-assistant")).to_have_count(1)


# --- the empty state, the reasoning picker -------------------------------------------------------


async def test_the_empty_state_lists_what_the_agent_can_do(ui):
    page = await ui.page()
    intro = page.locator("#agent-intro")
    await expect(intro).to_contain_text("Demo agent's commands")
    for c in COMMANDS:  # the daemon's list (GET /api/agent), not one written into the page
        await expect(intro).to_contain_text(c.usage)
        await expect(intro).to_contain_text(c.description)
    await shot(page, "45-empty-with-commands")

    # the demo ignores reasoning: "New conversation" offers no levels (none up to "ultra")
    await page.click("#new-conv-btn")
    await expect(page.locator("#new-model option")).to_have_count(2)
    await expect(page.locator("#new-reasoning")).to_be_hidden()
    await page.fill("#new-name", "Trying things")
    await page.click("#new-create")
    await expect(page.locator("#session-title")).to_have_text("Trying things")
    sid = page.url.split("#/s/", 1)[1]
    assert ui.svc.bridge.default_source.reasoning(sid).scope == "global"  # nothing was set for it

    # an empty conversation lists them as buttons that fill the box
    pick = page.locator('#agent-intro button[data-command="/clarify"]')
    await expect(pick).to_have_text("/clarify <question>")
    await pick.click()
    box = page.locator("#prompt-input")
    await expect(box).to_have_value("/clarify ")
    await expect(box).to_be_focused()
    await box.type("Proceed?")
    await box.press("Enter")
    await expect(page.locator("section.clarify.pending .question")).to_have_text("Proceed?")
    await expect(page.locator("#agent-intro")).to_have_count(0)  # the conversation has begun
    # a command without arguments is whole: it can be sent as it is
    [other] = await _chats(ui, "Another")
    await open_session(page, other)
    await page.click('#agent-intro button[data-command="/attach"]')
    await expect(box).to_have_value("/attach")


# --- a reload mid-run keeps the message's time ---------------------------------------------------


async def test_a_reload_mid_run_keeps_the_message_time(ui):
    [cid] = await _chats(ui, "Timed")
    watcher = await ui.page()
    await open_session(watcher, cid)
    await ui.svc.bridge.execute(SendMessage(text="/slow 6", conversation_id=cid), ELSEWHERE)
    streaming = ".msg-assistant.streaming"
    await expect(watcher.locator(streaming)).to_contain_text("w3")
    seen = await watcher.locator(f"{streaming} .msg-meta time").get_attribute("data-ts")
    assert seen

    late = await ui.page(path=f"/#/s/{cid}")
    await expect(late.locator(streaming)).to_contain_text("w3")
    await late.reload()
    await expect(late.locator(streaming)).to_contain_text("w4")
    await expect(late.locator(f"{streaming} .msg-meta time")).to_have_attribute("data-ts", seen)
    await expect(late.locator(f"{streaming} .msg-meta time")).to_have_text("just now")


# --- labels: the bridge's own agent is not "online" ----------------------------------------------


async def test_a_local_chat_is_labelled_by_its_agent_not_online(ui):
    [cid] = await _chats(ui, "Local chat")
    page = await ui.page()
    await open_session(page, cid)
    await expect(page.locator("#presence")).to_have_text("Demo agent · ready")
    await expect(page.locator(f'[data-session-id="{cid}"] .badge')).to_have_text("Demo")
    for where in ("#session-head", "#sidebar"):
        assert "online" not in (await page.locator(where).inner_text()).lower(), where
    await expect(page.locator(".chips")).to_contain_text("demo-small · demo")


# --- contrast of what is new ---------------------------------------------------------------------


@pytest.mark.parametrize("theme", ["light", "dark"])
async def test_the_new_pieces_meet_wcag_aa_contrast(ui, theme):
    deploy, chat = await _chats(ui, "Deploy", "Chat")
    await ui.svc.bridge.execute(SendMessage(text="/approve make deploy", conversation_id=deploy), ELSEWHERE)
    page = await ui.page(theme=theme)
    await open_session(page, chat)
    await expect(page.locator("#attention")).to_be_visible()  # the banner
    await expect(page.locator(".waiting-badge")).to_be_visible()  # the badge
    await expect(page.locator("#agent-intro button").first).to_be_visible()  # the commands
    assert await page.evaluate(CONTRAST_JS) == []
    await send(page, "/slow 30")
    await expect(page.locator("#stop-run-btn")).to_be_visible()  # Stop, the sidebar's "running"
    await expect(page.locator(f'[data-session-id="{chat}"] .when.running')).to_be_visible()
    assert await page.evaluate(CONTRAST_JS) == []
    await page.keyboard.press("Escape")
    await expect(page.locator("#send-btn")).to_be_visible()
