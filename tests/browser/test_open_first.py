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
    assert times["core"] and len(times["grammars"]) == 13, times
    assert times["firstPage"] is not None and min(times["grammars"]) >= times["firstPage"], times
    await plugin.close()
