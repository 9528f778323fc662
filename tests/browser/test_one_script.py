"""A page load fetches one script for the web UI's modules (lvmh_adapter/webbundle.py): in headless Chromium,
every request of a page opened on a conversation succeeds, no module is fetched on its own, and what the
bundled libraries do (markdown, sanitising, highlighting) is on screen. The CSP is the page's usual one: a
violation or a module that fails to load is an error of the page (the ``ui`` fixture fails on it)."""

from __future__ import annotations

import pytest

from lvmh_adapter.web import CSP, app_bundle

from .test_long import filled
from .test_web_ui import expect

pytestmark = pytest.mark.browser

SID = "01a22693-a4c3-719c-9d1e-0000000000d1"


async def test_a_page_load_fetches_one_script_and_nothing_fails(ui):
    plugin = await filled(ui, SID, 3)
    text = "Some **bold** <img src=x onerror=alert(1)>\n\n```python\ndef f(x):\n    return x\n```"
    await plugin.event("message_start", message={"role": "assistant", "id": "md"})
    await plugin.event("message_end", message={"role": "assistant", "id": "md", "text": text, "thinking": None,
                                               "toolCalls": [], "toolCallId": None})
    page = await ui.page(path=f"/#/s/{SID}")
    last = page.locator(".msg-assistant").last
    await expect(last.locator("code .hljs-keyword").first).to_have_text("def")  # the first load done
    seen: list = []
    page.on("response", lambda r: seen.append(r))
    failed: list = []
    page.on("requestfailed", lambda r: failed.append(r.url))
    await page.reload()  # a whole load, recorded from its first request
    await expect(last.locator("strong")).to_have_text("bold")  # marked
    await expect(last.locator("code .hljs-keyword").first).to_have_text("def")  # highlight.js and a grammar
    assert await last.locator("img").count() == 0  # DOMPurify took the handler's element out
    assert await page.evaluate("() => typeof window.lvmhApp.app") == "object"

    statuses = {r.url.removeprefix(ui.base): r.status for r in seen}
    assert not failed and all(s < 400 for s in statuses.values()), (failed, statuses)
    scripts = {r.url.removeprefix(ui.base): r for r in seen if r.request.resource_type == "script"}
    grammars = {u for u in scripts if u.startswith("/static/vendor/hljs-") and not u.endswith("hljs-core.min.js")}
    assert set(scripts) - grammars == {"/static/boot.js", "/static/app.js"}, sorted(scripts)
    assert grammars, sorted(scripts)
    for url, r in scripts.items():
        assert (await r.all_headers())["content-type"].startswith("text/javascript"), url
    page_script = scripts["/static/app.js"]
    if page_script.status == 200:  # a reload may revalidate it (304): its bytes are then the browser's copy
        assert await page_script.body() == app_bundle()[0]
    assert (await page_script.all_headers())["content-security-policy"] == CSP
    await plugin.close()
