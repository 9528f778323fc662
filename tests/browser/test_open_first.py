"""What a page opened on a conversation does before its first paint (docs/performance.md, "Long
conversations"): highlight.js's grammars are not on the way (they load once the conversation is
drawn, and a code block drawn before them is drawn again, highlighted)."""

from __future__ import annotations

import pytest

from .test_long import filled
from .test_web_ui import expect

pytestmark = pytest.mark.browser

SID = "01a22693-a4c3-719c-9d1e-0000000000c1"

TIMES = """() => { const r = performance.getEntriesByType('resource');
  const first = r.find((x) => x.name.includes('/events?before=latest'));
  return { firstPage: first ? first.responseEnd : null,
           grammars: r.filter((x) => /hljs-(?!core)[a-z]+\\.min\\.js$/.test(x.name)).map((x) => x.fetchStart),
           core: r.filter((x) => x.name.endsWith('hljs-core.min.js')).map((x) => x.fetchStart) }; }"""


async def test_grammars_load_after_the_first_paint_and_code_is_highlighted_then(ui):
    plugin = await filled(ui, SID, 3)
    await plugin.event("message_start", message={"role": "assistant", "id": "code"})
    await plugin.event("message_end", message={"role": "assistant", "id": "code", "text": "```python\ndef f(x):\n    return x\n```",
                                               "thinking": None, "toolCalls": [], "toolCallId": None})
    page = await ui.page(path=f"/#/s/{SID}")
    block = page.locator(".msg-assistant").last.locator(".code-block")
    await expect(block.locator(".code-lang")).to_have_text("python")
    await expect(block.locator("code .hljs-keyword").first).to_have_text("def")  # drawn again once they came
    await expect(block.locator("code")).to_have_text("def f(x):\n    return x")
    times = await page.evaluate(TIMES)
    assert times["core"] == [] and len(times["grammars"]) == 13, times  # the core comes in the page's one script
    assert times["firstPage"] is not None and min(times["grammars"]) >= times["firstPage"], times
    await plugin.close()


# every frame from the moment the hash changes, until the newest message is on screen: what the page shows then
WATCH_FIRST_PAINT = """([sid, text]) => { window.__first = null;
  const look = () => {
    const els = document.querySelectorAll('#timeline .msg-assistant');
    const el = els[els.length - 1];
    if (el && el.textContent.includes(text)) {
      const top = document.getElementById('timeline-wrap').getBoundingClientRect().top;
      const items = [...document.querySelectorAll('#timeline > *')];
      window.__first = { items: items.length, above: items.filter((n) => n.getBoundingClientRect().bottom < top).length };
    } else requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
  location.hash = '#/s/' + sid; }"""
SETTLED = """() => { const top = document.getElementById('timeline-wrap').getBoundingClientRect().top;
  const items = [...document.querySelectorAll('#timeline > *')];
  return { items: items.length, above: items.filter((n) => n.getBoundingClientRect().bottom < top).length }; }"""


async def test_the_first_paint_draws_the_screen_and_the_margin_follows(ui):
    """A conversation's first frame holds what is on screen (at most one item wholly above it, where the
    estimated heights were short); the margin around the screen (at least 80 items) is drawn in the frames
    after. The parent drew the 800 px above the screen too: 18 items, 10 of them above."""
    plugin = await filled(ui, SID, 120)
    page = await ui.page()
    await page.evaluate(WATCH_FIRST_PAINT, [SID, "tok119x"])
    first = await (await page.wait_for_function("() => window.__first")).json_value()
    assert first["items"] >= 2 and first["above"] <= 1, first
    settled = await (await page.wait_for_function(f"() => {{ const s = ({SETTLED})(); return s.items >= 80 && s; }}")).json_value()
    assert settled["above"] > 0, settled
    await plugin.close()


# from a page's first script on: when the first locale formatter is made (the page's Intl set-up), and what the
# frame that first shows the newest message holds
WATCH_OPENING = """(text) => { window.__intl = null; window.__first = null;
  const first = () => { if (window.__intl === null) window.__intl = performance.now(); };
  for (const name of ['DateTimeFormat', 'NumberFormat', 'RelativeTimeFormat']) {
    const Real = Intl[name];
    Intl[name] = new Proxy(Real, { construct: (t, args) => { first(); return new t(...args); },
                                   apply: (t, self, args) => { first(); return t(...args); } });
  }
  for (const [proto, key] of [[Date.prototype, 'toLocaleString'], [Date.prototype, 'toLocaleTimeString'],
                              [Date.prototype, 'toLocaleDateString'], [Number.prototype, 'toLocaleString']]) {
    const real = proto[key];
    proto[key] = function (...args) { first(); return real.apply(this, args); };
  }
  const look = () => {
    const els = document.querySelectorAll('#timeline .msg-assistant');
    const el = els[els.length - 1];
    if (el && el.textContent.includes(text)) {
      const times = document.querySelectorAll('#timeline time.rel');
      window.__first = { at: performance.now(), listed: document.querySelectorAll('#session-list > .session-item').length,
                         times: times.length, titled: [...times].filter((t) => t.title).length };
    } else requestAnimationFrame(look);
  };
  requestAnimationFrame(look); }"""
AFTER = """() => { const times = [...document.querySelectorAll('#timeline time.rel')];
  return { listed: document.querySelectorAll('#session-list > .session-item').length, times: times.length,
           titled: times.filter((t) => t.title && t.title.length > 10).length }; }"""


async def test_the_first_paint_waits_for_no_list_nor_locale_set_up_and_they_follow(ui):
    """A page opened on a conversation draws its newest messages before the sessions list and before any locale
    formatter (the first one costs the page tens of milliseconds): in the frame that first shows the newest message
    the list is empty and the timestamps have no tooltip yet; the frames after, the list is drawn and every
    timestamp has its full date as its tooltip."""
    plugin = await filled(ui, SID, 30)
    page = await ui.page()
    await page.context.add_init_script(f"({WATCH_OPENING})('tok29x')")
    await page.goto("about:blank")
    await page.goto(f"{ui.base}/#/s/{SID}")
    first = await (await page.wait_for_function("() => window.__first")).json_value()
    intl = await page.evaluate("() => window.__intl")
    assert first["times"] > 0, first
    if first["at"] < 500:  # else the list may be drawn by its bound (app.js, LIST_LATER_MS: 500 ms after init at most)
        assert first["titled"] == 0 and first["listed"] == 0, first
        assert intl is None or intl > first["at"], (intl, first)
    after = await (await page.wait_for_function(
        f"() => {{ const a = ({AFTER})(); return a.listed > 0 && a.titled === a.times && a.times > 0 && a; }}")).json_value()
    assert after["listed"] == 1, after
    await plugin.close()


# every frame from the moment the hash changes: the first one whose timeline holds anything, what it shows
WATCH_FIRST_ITEMS = """([sid, text]) => { window.__firstItems = null;
  const look = () => {
    const items = [...document.querySelectorAll('#timeline > *')];
    if (items.length) {
      const box = document.getElementById('timeline-wrap').getBoundingClientRect();
      const shown = items.filter((n) => { const r = n.getBoundingClientRect(); return r.bottom > box.top && r.top < box.bottom; });
      window.__firstItems = { items: items.length, shown: shown.length, height: Math.round(box.height),
                              newest: shown.some((n) => n.classList.contains('msg-assistant') && n.textContent.includes(text)) };
    } else requestAnimationFrame(look);
  };
  requestAnimationFrame(look);
  location.hash = '#/s/' + sid; }"""


@pytest.mark.parametrize("width, height", [(390, 844), (800, 900), (1280, 800)])
async def test_the_first_frame_of_a_conversation_shows_its_screen_and_its_newest_message(ui, width, height):
    """The first frame with anything of the conversation in it shows the screen's items, the newest message among
    them, at every width. At 1,024 px and less the timeline was placed, the task panel hidden, in the grid's
    auto row: as tall as what it held when the first page came (52 px on a phone), so the first paint drew one
    item and the newest message came a frame later with the margin's draw."""
    plugin = await filled(ui, SID, 60)
    page = await ui.page(width=width, height=height)
    await page.evaluate(WATCH_FIRST_ITEMS, [SID, "tok59x"])
    first = await (await page.wait_for_function("() => window.__firstItems")).json_value()
    assert first["newest"] and first["shown"] >= 3 and first["height"] > height / 2, first
    await plugin.close()
