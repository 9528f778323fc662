"""The web UI's "Sign out" takes this browser's push subscription back (docs/push.md): the bridge
deletes it (nothing more is pushed to it) and the page unsubscribes its ``pushManager``; another
client's subscription is untouched and still pushed.

Headless Chromium (Debian's, no network) has no push service to subscribe with, so the page's
``PushManager`` hands out a subscription whose endpoint is the loopback push service
(tests/push/receivers.py) and records ``unsubscribe``; everything between the page and the
bridge is the real web UI over real sockets."""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import CHROMIUM, LAUNCH_ARGS, TIMEOUT_MS, browser_skip_reason
from tests.conftest import LVMH_TOKEN
from tests.peers import missing_peer
from tests.pheby.client import PhebyClient
from tests.push.conftest import Rest, write_push_config
from tests.push.receivers import PushService
from tests.waiting import until

pytestmark = pytest.mark.browser

# the page's push service: one subscription (the loopback endpoint and the test subscriber's keys)
FAKE_PUSH_MANAGER = """(() => {
  const sub = %s;
  window.__push = { subscribed: false, unsubscribed: 0 };
  const held = {
    endpoint: sub.endpoint,
    toJSON: () => ({ endpoint: sub.endpoint, expirationTime: null, keys: sub.keys }),
    unsubscribe: async () => { window.__push.unsubscribed += 1; window.__push.subscribed = false; return true; },
  };
  PushManager.prototype.subscribe = async function () { window.__push.subscribed = true; return held; };
  PushManager.prototype.getSubscription = async function () { return window.__push.subscribed ? held : null; };
})();"""


async def test_sign_out_deletes_this_browsers_subscription_and_unsubscribes_it(service_factory, tmp_path):
    reason = browser_skip_reason()
    if reason:
        pytest.skip(missing_peer("Chromium", reason))
    from playwright.async_api import async_playwright

    config = write_push_config(str(tmp_path / "push.toml"), {"grace_seconds": 0, "allow_insecure_endpoints": True})
    svc = await service_factory(("pheby", "lvmh"), config=config)
    base = f"http://127.0.0.1:{svc.ports['lvmh']}"
    service = await PushService().start()
    rest = Rest(svc)
    pheby = await PhebyClient.connect(svc.ports["pheby"])
    browser_sub, phone = service.subscribe("chromium"), service.subscribe("phone")
    subscriptions = svc.notifier.deliveries.subscriptions
    try:
        service.vapid_key = await rest.vapid()
        await rest.subscribe(phone)  # another client's: it stays
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
            try:
                ctx = await browser.new_context(service_workers="allow")
                await ctx.grant_permissions(["notifications"], origin=base)
                await ctx.add_init_script(f"localStorage.setItem('lvmh.token', {LVMH_TOKEN!r});")
                await ctx.add_init_script(FAKE_PUSH_MANAGER % json.dumps(
                    {"endpoint": browser_sub.endpoint, "keys": browser_sub.keys}))  # fmt: skip
                page = await ctx.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                await page.goto(base + "/")
                await page.click("#notify-btn")  # registers the worker, subscribes, and tells the bridge
                await until(lambda: {s.endpoint for s in subscriptions.values()} == {phone.endpoint,
                                                                                    browser_sub.endpoint},
                            what="the browser's subscription registered")  # fmt: skip

                await page.click("#signout-btn")
                await page.wait_for_selector("#gate:not([hidden])")
                await until(lambda: {s.endpoint for s in subscriptions.values()} == {phone.endpoint},
                            what="the browser's subscription deleted")  # fmt: skip
                assert await page.evaluate("window.__push") == {"subscribed": False, "unsubscribed": 1}
                assert not await page.evaluate("localStorage.getItem('lvmh.token')")  # signed out
                assert not errors, errors
            finally:
                await browser.close()

        # the next approval reaches the other client only
        cid = await rest.conversation("Deploy box")
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve make deploy"})
        request = await pheby.recv_type("approval.request")
        msg = (await until(lambda: service.messages("phone"), what="the approval pushed to the phone"))[0]
        assert msg["decision_id"] == request["approval_id"]
        await until(lambda: svc.notifier.deliveries.queued() == 0, what="every push out")
        assert {name for name, _ in service.attempts} == {"phone"}
        await svc.bridge.store.aflush()
        assert svc.bridge.store.query("SELECT endpoint FROM push_subscriptions") == [(phone.endpoint,)]
    finally:
        await pheby.close()
        await rest.close()
        await service.stop()
