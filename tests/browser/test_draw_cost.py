"""The virtual list keeps where each item starts from one draw to the next (virtual.js, docs/web-ui.md "What is
drawn"): after older pages landed in front, items measured, live events at the end, a scroll to the middle and
back, the kept sums are those a fresh sum over every item gives, and the key index holds every item at its place."""

from __future__ import annotations

import pytest

from .test_long import STATE, _changed, filled
from .test_web_ui import expect
from tests.waiting import until

pytestmark = pytest.mark.browser

SID = "01a22693-a4c3-719c-9d1e-0000000000e1"
TIMEOUT_S = 60

FRESH = """() => { const vl = window.lvmhApp.app.rendered.vlist; const items = vl.items;
  const guess = (item) => { const s = vl.kinds.get(vl.kindOf(item)); return s && s[1] ? s[0] / s[1] : vl.estimateOf(item); };
  let y = 0, worst = 0, misplaced = 0;
  for (let i = 0; i <= items.length; i += 1) {
    worst = Math.max(worst, Math.abs(vl.off(i) - y));
    if (i === items.length) break;
    const key = String(vl.keyOf(items[i]));
    if (vl.index.get(key) !== i) misplaced += 1;
    const h = vl.heights.get(key);
    y += (h === undefined ? guess(items[i]) : h) + vl.gap;
  }
  return { items: items.length, worst, misplaced, indexed: vl.index.size, measured: vl.heights.size }; }"""


async def _sums_hold(page) -> dict:
    await page.wait_for_function("() => !window.lvmhApp.app.renderTimer")
    got = await page.evaluate(FRESH)
    assert got["worst"] < 0.01 and got["misplaced"] == 0 and got["indexed"] == got["items"], got
    return got


async def test_the_kept_sums_are_the_fresh_sums_through_pages_measures_and_live_events(ui):
    p = await filled(ui, SID, 150)
    try:
        page = await ui.page(path=f"/#/s/{SID}")
        await expect(page.locator(".msg-assistant", has_text="tok149x")).to_be_in_viewport()
        first = await _sums_hold(page)
        for _ in range(20):  # up to the first message: older pages put in front of what is held
            state = await page.evaluate(STATE)
            if not state["hasOlder"] and not state["loading"]:
                break
            await page.evaluate("document.getElementById('timeline-wrap').scrollTop = 0")
            # settled, not just landed: a page merged but not yet drawn is put in front keeping the reader's place,
            # which takes the scroll above away from the top (the next page is asked by the next scroll up)
            await until(lambda s=state: _changed(page, s), TIMEOUT_S, "the next older page")
        whole = await _sums_hold(page)
        assert whole["items"] > first["items"] and whole["measured"] > first["measured"], (first, whole)
        # the middle, then live events at the end while the reader is there, then back to the newest
        await page.evaluate("() => { const w = document.getElementById('timeline-wrap'); w.scrollTop = w.scrollHeight / 2; }")
        await _sums_hold(page)
        for t in ("x", "y"):
            await p.event("message_start", message={"role": "assistant", "id": f"live-{t}"})
            await p.event("message_end", message={"role": "assistant", "id": f"live-{t}", "text": f"live {t} " + "word " * 80,
                                                  "thinking": None, "toolCalls": [], "toolCallId": None})
        await page.wait_for_function("(n) => window.lvmhApp.app.rendered.vlist.items.length >= n", arg=whole["items"] + 2)
        await _sums_hold(page)
        await page.click("#jump-btn")
        await expect(page.locator(".msg-assistant", has_text="live y")).to_be_in_viewport()
        last = await _sums_hold(page)
        assert last["items"] == whole["items"] + 2
    finally:
        await p.close()

