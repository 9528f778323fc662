"""Browser tests of the lvmh web UI: headless Debian Chromium driven by Playwright for Python.

Chromium is Debian's (/usr/bin/chromium, or $AGENT_BRIDGE_CHROMIUM), launched through
``executable_path``; Playwright's own browser downloads are never used. Both come from
scripts/install-browser.sh; without them these tests skip with the reason.
Screenshots of the main views go to test-artifacts/screenshots/ (not committed).
"""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path

import pytest

from tests.conftest import LVMH_TOKEN
from tests.peers import missing_peer

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("AGENT_BRIDGE_CHROMIUM", "/usr/bin/chromium")
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SHOTS = ROOT / "test-artifacts" / "screenshots"
TIMEOUT_MS = 20_000  # upper bound for a condition to appear; never a timing assertion


def browser_skip_reason() -> str | None:
    if not os.access(CHROMIUM, os.X_OK):
        return f"Chromium not found at {CHROMIUM} (run scripts/install-browser.sh)"
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "the playwright Python package is not installed (run scripts/install-browser.sh)"
    return None


@pytest.fixture
async def browser():
    reason = browser_skip_reason()
    if reason:
        pytest.skip(missing_peer("Chromium", reason))
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


class UI:
    """A running bridge with the lvmh front end, and pages of its web UI."""

    def __init__(self, svc, browser, service_factory, tmp_path):
        self.svc = svc
        self.browser = browser
        self.service_factory = service_factory
        self.tmp_path = tmp_path
        self.port = svc.ports["lvmh"]
        self.base = f"http://127.0.0.1:{self.port}"
        self.contexts = []
        self.foreign_requests: list[str] = []
        self.page_errors: list[str] = []
        self.console: list[str] = []  # every console message of every page, from its first load: "type: text"

    async def page(self, *, token: str | None = LVMH_TOKEN, width: int = 1280, height: int = 820, theme: str | None = None,
                   color_scheme: str = "light", path: str = "/"):
        ctx = await self.browser.new_context(
            viewport={"width": width, "height": height},
            color_scheme=color_scheme,
            accept_downloads=True,
            service_workers="block",
        )
        self.contexts.append(ctx)
        script = ""
        if token is not None:
            script += f"localStorage.setItem('lvmh.token', {token!r});"
        if theme is not None:
            script += f"localStorage.setItem('lvmh.theme', {theme!r});"
        if script:
            await ctx.add_init_script(f"try {{ if (!sessionStorage.getItem('init')) {{ {script} sessionStorage.setItem('init', '1'); }} }} catch (e) {{}}")

        async def guard(route):
            url = route.request.url
            host = urllib.parse.urlsplit(url).hostname
            if host not in ("127.0.0.1", "localhost") and not url.startswith(("blob:", "data:")):
                self.foreign_requests.append(url)
                await route.abort()
            else:
                await route.continue_()

        await ctx.route("**/*", guard)
        page = await ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda exc: self.page_errors.append(str(exc)))

        def console(msg):
            self.console.append(f"{msg.type}: {msg.text}")
            # CSP violations and module load failures; network errors of a restarting daemon are expected
            if msg.type == "error" and ("Refused to" in msg.text or "module script" in msg.text):
                self.page_errors.append(msg.text)

        page.on("console", console)
        await page.goto(self.base + path)
        return page

    async def close(self):
        for ctx in self.contexts:
            try:
                await ctx.close()
            except Exception:
                pass


@pytest.fixture
async def ui(browser, service_factory, tmp_path):
    svc = await service_factory(adapters=("lvmh",))
    u = UI(svc, browser, service_factory, tmp_path)
    yield u
    await u.close()
    assert not u.foreign_requests, f"the page tried to reach other hosts: {u.foreign_requests}"
    assert not u.page_errors, f"uncaught errors in the page: {u.page_errors}"


async def shot(page, name: str, full_page: bool = False) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    await page.screenshot(path=str(path), full_page=full_page)
    return path
