"""Long conversations and many of them in headless Chromium (docs/web-ui.md, "Long conversations").

A conversation opens at its newest page with only what is on screen in the DOM; scrolling up loads
older pages and keeps the reader's place; find asks the server and shows the history around a hit;
a change of the list reaches the page as one entry; the sidebar holds a screenful of a long list and
loads the rest as it scrolls. The conversations are pi sessions a fake plugin fills over the real
plugin socket (fast); the bridge's own conversations page the same way (tests/lvmh/test_history.py).
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from tests.waiting import until

from .conftest import TIMEOUT_MS, shot
from .test_web_ui import FakePlugin, expect

pytestmark = pytest.mark.browser

DOM_NODES = "document.getElementsByTagName('*').length"
# `loading`: a page is on its way, or what arrived is not drawn yet
STATE = """() => { const a = window.lvmhApp.app; const st = a.states.get(a.current);
  return {items: st.items.length, hasOlder: st.hasOlder, oldestSeq: st.oldestSeq,
          loading: Boolean(st.loadingOlder || a.renderTimer)}; }"""


async def filled(ui, sid: str, turns: int, *, name: str = "long pi", running: bool = False) -> FakePlugin:
    """A pi session of ``turns`` turns (a question, a tool call, an answer with a unique word ``tok<i>x``),
    every event stored. ``running``: a last run still going, with 150 tool calls so far."""
    p = FakePlugin(ui.base, sid, {"id": sid, "name": name, "cwd": "/work/app", "model": "m", "provider": "p",
                                  "agent": False, "repo": None, "startedAt": int(time.time() * 1000)})
    await p.connect()
    for t in range(turns):
        await p.event("message_start", message={"role": "user", "id": f"u{t}"})
        await p.event("message_end", message={"role": "user", "id": f"u{t}", "text": f"question {t}" + "\n\nmore words" * (t % 3)})
        await p.event("agent_start")
        await p.event("tool_execution_start", toolCallId=f"c{t}", toolName="bash", args={"command": f"ls dir{t}"})
        await p.event("tool_execution_end", toolCallId=f"c{t}", toolName="bash", isError=False, resultPreview=f"file{t}")
        await p.event("message_start", message={"role": "assistant", "id": f"a{t}"})
        await p.event("message_end", message={"role": "assistant", "id": f"a{t}", "text": f"answer {t} tok{t}x " + "word " * (t % 40),
                                              "thinking": None, "toolCalls": [], "toolCallId": None})
        await p.event("agent_end", usage={"inputTokens": 10, "outputTokens": 5})
        await p.event("agent_settled", aborted=False)
    if running:
        await p.event("agent_start")
        for i in range(150):
            await p.event("tool_execution_start", toolCallId=f"r{i}", toolName="bash", args={"command": f"step {i}"})
            await p.event("tool_execution_end", toolCallId=f"r{i}", toolName="bash", isError=False, resultPreview="ok")
    last = p.seq
    log = ui.svc.frontends["lvmh"].log
    await until(lambda: log.committed.get(sid, 0) >= last, 60, "every event stored")
    return p


async def test_a_long_conversation_opens_at_its_newest_message_with_few_nodes(ui):
    sid = "pi-long-open"
    p = await filled(ui, sid, 600)
    try:
        requests: list[str] = []
        page = await ui.page()
        page.on("request", lambda r: requests.append(r.url))
        await page.goto(f"{ui.base}/#/s/{sid}")
        await expect(page.locator(".msg-assistant", has_text="answer 599 tok599x")).to_be_in_viewport()
        assert await page.evaluate(DOM_NODES) < 3000
        state = await page.evaluate(STATE)
        assert state["hasOlder"] and state["items"] < 200  # the newest page, not 5,400 events
        # the newest page was asked for once (while the modules loaded: boot.js), and no forward read of the history
        assert len([u for u in requests if f"/{sid}/events?before=latest" in u]) == 1, [u.split("/", 3)[-1] for u in requests]
        assert not [u for u in requests if "/events?after=0" in u]
        await shot(page, "50-long-conversation")
        # a phone opens it the same way
        phone = await ui.page(width=390, height=844, path=f"/#/s/{sid}")
        await expect(phone.locator(".msg-assistant", has_text="answer 599 tok599x")).to_be_in_viewport()
        assert await phone.evaluate(DOM_NODES) < 3000
    finally:
        await p.close()


async def test_scrolling_up_loads_older_pages_and_keeps_the_place(ui):
    sid = "pi-long-scroll"
    p = await filled(ui, sid, 250)
    try:
        page = await ui.page(path=f"/#/s/{sid}")
        await expect(page.locator(".msg-assistant", has_text="answer 249 tok249x")).to_be_in_viewport()
        first = await page.evaluate(STATE)
        # to the top of what is held: the page above is asked for (held here until the place is read),
        # and once it lands, what was on screen stays where it was
        held: list = []
        release = asyncio.Event()

        async def hold(route):
            held.append(route.request.url)
            await release.wait()
            await route.continue_()

        await page.route("**/events?before=*", hold)
        await page.evaluate("document.getElementById('timeline-wrap').scrollTop = 0")
        await until(lambda: held, TIMEOUT_MS / 1000, "the older page asked for")
        place = """() => { const w = document.getElementById('timeline-wrap'); const top = w.getBoundingClientRect().top;
          const el = [...document.querySelectorAll('#timeline > [data-key]')].find((e) => e.getBoundingClientRect().bottom > top + 1);
          return [el.dataset.key, el.getBoundingClientRect().top - top]; }"""
        key, offset = await page.evaluate(place)
        release.set()
        await until(lambda: _more(page, first["items"]), TIMEOUT_MS / 1000, "the older page")
        await page.unroute("**/events?before=*", hold)
        node = page.locator(f'#timeline > [data-key="{key}"]')
        await expect(node).to_be_in_viewport()
        moved = await page.evaluate("""(key) => { const w = document.getElementById('timeline-wrap');
          const el = document.querySelector(`#timeline > [data-key="${key}"]`);
          return el.getBoundingClientRect().top - w.getBoundingClientRect().top; }""", key)
        assert abs(moved - offset) <= 1, (key, offset, moved)
        assert "before=" + str(first["oldestSeq"]) in held[0]
        # on up to the first message: every page, then the beginning
        for _ in range(40):
            state = await page.evaluate(STATE)
            if not state["hasOlder"] and not state["loading"]:
                break
            await page.evaluate("document.getElementById('timeline-wrap').scrollTop = 0")
            await until(lambda s=state: _changed(page, s), TIMEOUT_MS / 1000, "the next older page")
        await page.evaluate("document.getElementById('timeline-wrap').scrollTop = 0")
        await expect(page.locator(".msg-user", has_text="question 0")).to_be_in_viewport()
        await expect(page.locator("#timeline-head")).to_have_text("Beginning of the conversation")
        assert await page.evaluate(DOM_NODES) < 3000
        # every turn is there once, in order, though only a screenful is drawn
        keys = await page.evaluate("""() => { const a = window.lvmhApp.app; return a.states.get(a.current).items
          .filter((i) => i.kind === 'message' && i.role === 'user').map((i) => i.id); }""")
        assert keys == [f"u{t}" for t in range(250)]
        tools = await page.evaluate("""() => { const a = window.lvmhApp.app; return a.states.get(a.current).items
          .filter((i) => i.kind === 'tool' && i.status !== 'completed').length; }""")
        assert tools == 0  # a tool started on one page and ended on the next is one completed row
        # a screen reader hears what arrives live, not the pages read as the reader scrolls (a feed, aria-busy)
        assert await page.get_attribute("#timeline", "role") == "feed"
        await expect(page.locator("#timeline")).to_have_attribute("aria-busy", "false")
        await expect(page.locator("#timeline-live p")).to_have_count(0)
        await p.event("message_start", message={"role": "assistant", "id": "late"})
        await p.event("message_end", message={"role": "assistant", "id": "late", "text": "a late answer",
                                              "thinking": None, "toolCalls": [], "toolCallId": None})
        await expect(page.locator("#timeline-live p")).to_have_text(["Agent: a late answer"])
    finally:
        await p.close()


async def _more(page, than: int) -> bool:
    state = await page.evaluate(STATE)
    return state["items"] > than and not state["loading"]


async def _changed(page, before: dict) -> bool:
    state = await page.evaluate(STATE)
    return not state["loading"] and (state["oldestSeq"] != before["oldestSeq"] or not state["hasOlder"])


async def test_find_asks_the_server_and_shows_the_history_around_a_hit(ui):
    sid = "pi-long-find"
    p = await filled(ui, sid, 700)
    try:
        page = await ui.page(path=f"/#/s/{sid}")
        searches: list[str] = []
        page.on("request", lambda r: searches.append(r.url) if "/search?" in r.url else None)
        await expect(page.locator(".msg-assistant", has_text="answer 699 tok699x")).to_be_in_viewport()
        await page.keyboard.press("Control+f")
        await expect(page.locator("#find-input")).to_be_focused()
        await page.fill("#find-input", "TOK12X")
        hit = page.locator("#timeline > .found")
        await expect(hit).to_contain_text("answer 12 tok12x")
        await expect(hit).to_be_in_viewport()
        await expect(page.locator("#find-status")).to_have_text("1 of 1")
        assert searches and "q=TOK12X" in searches[0]
        assert await page.evaluate(DOM_NODES) < 3000
        await shot(page, "51-find-in-conversation")
        # several hits: the newest first, Enter goes to earlier ones
        await page.fill("#find-input", "question 69")
        await expect(page.locator("#find-status")).to_have_text("1 of 11")
        await expect(hit).to_contain_text("question 699")
        await page.press("#find-input", "Enter")
        await expect(page.locator("#find-status")).to_have_text("2 of 11")
        await expect(hit).to_contain_text("question 698")
        # back to the latest message; Esc closes the bar
        await page.fill("#find-input", "tok3x")
        await expect(hit).to_contain_text("answer 3 tok3x")
        await page.click("#jump-btn")
        await expect(page.locator(".msg-assistant", has_text="answer 699 tok699x")).to_be_in_viewport()
        await page.press("#find-input", "Escape")
        await expect(page.locator("#findbar")).to_be_hidden()
        await expect(page.locator(".found")).to_have_count(0)
    finally:
        await p.close()


async def test_a_run_going_on_past_the_newest_page_shows_as_running(ui):
    sid = "pi-long-running"
    p = await filled(ui, sid, 3, running=True)
    try:
        page = await ui.page(path=f"/#/s/{sid}")
        await expect(page.locator('details.tool[data-tool-id="r149"]')).to_be_visible()
        assert (await page.evaluate(STATE))["hasOlder"]  # its agent_start is on an older page
        await expect(page.locator('.pill[data-phase="running"]')).to_be_visible()
    finally:
        await p.close()


async def test_a_long_list_holds_a_screenful_and_changes_arrive_as_one_entry(ui):
    for i in range(300):
        ui.svc.bridge.create_conversation(f"chat {i:03d}")
    at = min(c.created_at for c in ui.svc.bridge.conversations.values())
    for c in ui.svc.bridge.conversations.values():  # all in one millisecond (a dozen are, on a fast machine)
        c.created_at = at
    page = await ui.page()
    # the first load's socket opened before the watch starts: only the reload's socket is counted
    await expect(page.locator("#conn")).to_contain_text("live")
    frames: list[dict] = []

    def watch(ws):
        ws.on("framereceived", lambda payload: frames.append(json.loads(payload)) if isinstance(payload, str) else None)

    page.on("websocket", watch)
    await page.reload()
    await expect(page.locator("#conn")).to_contain_text("live")
    await expect(page.locator("#session-count")).to_have_text("300")
    items = page.locator(".session-item")
    assert await items.count() < 120  # a screenful and a margin, not 300
    assert await page.evaluate(DOM_NODES) < 3000
    first = [f for f in frames if f["type"] == "session_list"]
    assert len(first) == 1 and len(first[0]["sessions"]) == 50 and first[0]["total"] == 300

    # a conversation created elsewhere: one entry, at the top
    seen = len(frames)
    ui.svc.bridge.create_conversation("Created while watching")
    await expect(items.first).to_contain_text("Created while watching")
    await expect(page.locator("#session-count")).to_have_text("301")
    arrived = frames[seen:]
    # one entry: its "added" (under load the conversation's next change may follow in a frame of its own)
    assert {f["type"] for f in arrived} == {"session_entry"} and arrived[0]["change"] == "added"
    assert {f["session"]["id"] for f in arrived} == {arrived[0]["session"]["id"]}
    assert all(len(json.dumps(f)) < 2048 for f in arrived)

    # the sidebar scrolled to its end: the next pages load, each entry once
    loaded = await page.evaluate("window.lvmhApp.book.entries.length")
    while await page.evaluate("Boolean(window.lvmhApp.book.next)"):
        await page.evaluate("document.getElementById('sidebar').scrollTop = 1e9")
        await until(lambda n=loaded: _grew(page, n), TIMEOUT_MS / 1000, "the next page of the list")
        loaded = await page.evaluate("window.lvmhApp.book.entries.length")
    ids = await page.evaluate("window.lvmhApp.book.entries.map((s) => s.id)")
    assert len(ids) == 301 and len(set(ids)) == 301
    # the list's end, once the last rows' heights are measured (the end moves as they are). The last row is the
    # list's, not "chat 000": conversations created in one millisecond (a dozen here) are ordered by id
    last = await page.evaluate("String(window.lvmhApp.book.entries.at(-1).id)")
    await until(lambda: _at_the_end(page, last), TIMEOUT_MS / 1000, "the list scrolled to its last row")
    await expect(page.locator(f'.session-item[data-session-id="{last}"]')).to_be_in_viewport()
    assert await items.count() < 120
    assert await page.locator('.session-item[aria-setsize="301"]').count() == await items.count()

    # searched on the server
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if "/api/sessions?" in r.url and "q=" in r.url else None)
    await page.fill("#session-search", "chat 12")
    await expect(items).to_have_count(10)  # chat 120..129
    assert asked
    assert not [f for f in frames[seen:] if f["type"] == "session_list"]


async def _at_the_end(page, key: str) -> bool:
    """Whether the list's last row (session ``key``) is in the sidebar's view; if not, scroll the sidebar to
    its end again (the end moves while the last rows' heights are measured)."""
    return await page.evaluate("""(key) => {
        const bar = document.getElementById('sidebar');
        const last = [...bar.querySelectorAll('.session-item')].find((n) => n.dataset.sessionId === key);
        if (last) {
            const r = last.getBoundingClientRect(), b = bar.getBoundingClientRect();
            if (r.bottom > b.top && r.top < b.bottom) return true;
        }
        bar.scrollTop = 1e9;
        return false;
    }""", key)


async def _grew(page, than: int) -> bool:
    return await page.evaluate("window.lvmhApp.book.entries.length") > than


async def test_a_page_of_the_list_answered_before_a_change_keeps_the_count_the_socket_gave(ui):
    """The sidebar's next page, asked before a conversation is created and answered after the socket's entry for
    it, counts the list as it was: the count stays the socket's (CI, under load: 300 shown where 301 were)."""
    for i in range(120):
        ui.svc.bridge.create_conversation(f"chat {i:03d}")
    page = await ui.page()
    count = page.locator("#session-count")
    await expect(count).to_have_text("120")
    answered: list = []
    release = asyncio.Event()

    async def hold(route):  # the first next page (asked at once when the first one's rows reach the screen's end)
        response = await route.fetch()  # the daemon answers now, before the change
        answered.append(response)
        if len(answered) == 1:
            await release.wait()
        await route.fulfill(response=response)

    await page.route(lambda url: "/api/sessions?" in url and "cursor=" in url, hold)
    await page.reload()
    await expect(count).to_have_text("120")
    await page.evaluate("document.getElementById('sidebar').scrollTop = 1e9")
    await until(lambda: answered, TIMEOUT_MS / 1000, "the next page answered")
    assert (await answered[0].json())["total"] == 120
    ui.svc.bridge.create_conversation("Created while a page was on its way")
    await expect(count).to_have_text("121")
    assert await page.evaluate("window.lvmhApp.book.entries[0].name") == "Created while a page was on its way"
    release.set()
    await until(lambda: _grew(page, 100), TIMEOUT_MS / 1000, "the held page drawn")
    await expect(count).to_have_text("121")
    assert await page.evaluate("window.lvmhApp.book.total") == 121
