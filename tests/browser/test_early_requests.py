"""The page's first requests started by boot.js (api.js takeEarly) answer the page's first requests only
(docs/web-ui.md, "Long conversations"). boot.js is an async script: with the web UI in one script, app.js may
run before it (under load, often). Its early list was then never taken at load and waited: a search cleared
minutes later was answered with the page load's list, and a pi session connected since vanished from the
sidebar until the next change or a reload. Here app.js is made to run first (boot.js held until the page
asked for the list itself)."""

from __future__ import annotations

import asyncio

import pytest

from .test_web_ui import FakePlugin, pi_session, expect

pytestmark = pytest.mark.browser

LIST = "/api/sessions?limit=50"
SETTLED = "async () => { const e = window.lvmhEarly; if (e) await Promise.all([...e.responses.values()]); }"


async def test_a_search_cleared_shows_the_list_as_it_is_now_when_boot_ran_after_the_page(ui):
    ui.svc.bridge.create_conversation("A local chat")
    page = await ui.page()
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url) if r.url.endswith(LIST) else None)
    app_asked = asyncio.Event()

    async def boot_after_app(route):
        await app_asked.wait()
        await route.continue_()

    page.on("request", lambda r: app_asked.set() if r.url.endswith(LIST) else None)
    await page.route("**/static/boot.js", boot_after_app)
    await page.reload()  # the load event waits for boot.js: it has run when this returns
    await page.evaluate(SETTLED)  # whatever boot.js asked for is answered, before the session below exists
    sid = "pi-after-load"
    plugin = FakePlugin(ui.base, sid, pi_session(sid, "pi work"))
    try:
        await plugin.connect()
        items = page.locator(".session-item")
        await expect(items).to_have_count(2)
        await page.fill("#session-search", "dev/app")
        await expect(items).to_have_count(1)
        await page.fill("#session-search", "")
        await expect(items).to_have_count(2)
        await expect(items.filter(has_text="pi work")).to_have_count(1)
        # the list's first page was asked for once at load (app.js's own request; boot.js, later, asked nothing)
        assert len(asked) == 2, asked  # that one, and the search cleared
    finally:
        await plugin.close()
