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
