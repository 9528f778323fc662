"""The lvmh web UI and its browser socket in headless Chromium through nginx (configured from
docs/remote-access.md), logged in with ``agent-bridge lvmh open``'s link to the public URL.
Marked ``browser``: run it singly (``pytest tests/remote/test_proxy_browser.py``)."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import TIMEOUT_MS, browser  # noqa: F401  (the headless Chromium fixture)
from tests.hardening.proc import LVMH_TOKEN
from tests.loomi.test_cli import cli

from .certs import make_cert
from .proxies import PROXY_HOST, Nginx
from .test_proxies import start_bridge

pytestmark = pytest.mark.browser


async def test_web_ui_and_its_socket_through_nginx(browser, tmp_path):  # noqa: F811
    from playwright.async_api import expect

    cert = make_cert(str(tmp_path / "certs"), names=(PROXY_HOST,))
    proxy = Nginx(str(tmp_path / "nginx"), cert.cert, cert.key)
    bridge = start_bridge(str(tmp_path / "bridge"), proxy.public_url_option(), ["--public-fp", f"loomi={cert.fp}"])
    proxy.start(bridge.wanted)
    try:
        bridge.start()
        rc, out, err = await cli("lvmh", "open", "--data-dir", bridge.data_dir, LVMH_TOKEN=LVMH_TOKEN)
        assert rc == 0, err
        link = re.search(r"https://\S+", out).group(0)
        assert link.startswith(proxy.url("lvmh") + "/#token=")  # the login link is the public URL
        ctx = await browser.new_context(ignore_https_errors=True, service_workers="block")  # the test's own CA
        errors: list[str] = []
        page = await ctx.new_page()
        page.set_default_timeout(TIMEOUT_MS)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        await page.goto(link)
        await expect(page.locator("#conn")).to_contain_text("live")  # the browser socket, through nginx
        assert "#token=" not in page.url  # the page keeps the token and clears the fragment
        # a conversation made elsewhere reaches the page over that socket
        rc, out, err = await cli("doctor", "--json", "--ca", cert.cert, "--data-dir", bridge.data_dir,
                                 LVMH_TOKEN=LVMH_TOKEN, PHEBY_SECRET="hardening-pheby-secret-7f3a9c1e5b2d4f60")
        assert rc == 0, out
        import aiohttp

        async with aiohttp.ClientSession() as http:
            async with http.post(proxy.url("lvmh") + "/api/conversations", json={"name": "From the phone"},
                                 headers={"Authorization": f"Bearer {LVMH_TOKEN}"}, ssl=False) as r:
                assert r.status in (200, 201), await r.text()
        await expect(page.locator(".session-list")).to_contain_text("From the phone")
        assert not errors, errors
        await ctx.close()
        with open(proxy.access_log) as f:
            assert LVMH_TOKEN not in f.read()
    finally:
        try:
            assert bridge.stop() == 0
        finally:
            proxy.stop()
