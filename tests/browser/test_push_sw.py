"""The web UI's service worker in headless Chromium: a push (delivered with the DevTools
protocol's ``ServiceWorker.deliverPushMessage``, carrying the message the bridge really sent
to a loopback push service) shows a notification with the conversation's name and what waits;
its click opens the conversation, its "Approve once" answers the approval."""

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

NOTIFICATIONS = """async () => {
  const reg = await navigator.serviceWorker.ready;
  return (await reg.getNotifications()).map((n) => ({title: n.title, body: n.body, tag: n.tag,
    actions: n.actions.map((a) => a.title), url: n.data && n.data.url}));
}"""

# until the worker is active (a push reaches only an activated worker)
ACTIVATED = """() => new Promise((resolve) => {
  const check = () => (self.registration.active && self.registration.active.state === "activated" ? resolve(true)
                                                                                                 : setTimeout(check, 10));
  check();
})"""

# counts the notifications the worker's showNotification has finished showing. The test reads
# getNotifications only after one: polled while it was being shown, headless Chromium at times never
# listed it (the worker had the push and showNotification resolved, yet the list stayed empty)
COUNT_SHOWN = """() => {
  if (self.__shown === undefined) {
    self.__shown = 0;
    const show = self.registration.showNotification.bind(self.registration);
    self.registration.showNotification = (...args) => show(...args).then((v) => { self.__shown += 1; return v; });
  }
  return self.__shown;
}"""

CLICK = """async (action) => {
  const [n] = await self.registration.getNotifications();
  self.dispatchEvent(new NotificationEvent("notificationclick", {notification: n, action}));
  return n.title;
}"""


async def test_the_service_worker_shows_a_push_and_its_click_opens_the_conversation(service_factory, tmp_path):
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
    try:
        # the message the bridge really pushes for a waiting approval
        await rest.subscribe(service.subscribe("chromium"))
        cid = await rest.conversation("Deploy box")
        await pheby.send({"type": "chat.send", "conversation_id": cid, "text": "/approve make deploy"})
        request = await pheby.recv_type("approval.request")
        msg = (await until(lambda: service.messages("chromium"), what="the approval push"))[0]

        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
            try:
                ctx = await browser.new_context(service_workers="allow")
                await ctx.grant_permissions(["notifications"], origin=base)
                await ctx.add_init_script(f"localStorage.setItem('lvmh.token', {LVMH_TOKEN!r});")
                page = await ctx.new_page()
                page.set_default_timeout(TIMEOUT_MS)
                errors: list[str] = []
                page.on("pageerror", lambda exc: errors.append(str(exc)))
                page.on("console", lambda m: errors.append(m.text) if m.type == "error" and "Refused to" in m.text else None)
                await page.goto(base + "/")
                cdp = await ctx.new_cdp_session(page)
                registrations: list[dict] = []
                cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: registrations.extend(e["registrations"]))
                await cdp.send("ServiceWorker.enable")

                await page.click("#notify-btn")  # permission was granted: the click registers the worker
                scope = await page.evaluate("navigator.serviceWorker.ready.then((r) => r.scope)")
                assert scope == base + "/"
                reg = await until(lambda: [r for r in registrations if r["scopeURL"] == scope and not r["isDeleted"]],
                                  what="the worker's registration")
                worker = ctx.service_workers[0] if ctx.service_workers else await ctx.wait_for_event("serviceworker")
                await worker.evaluate(ACTIVATED)

                async def push(what: str) -> list[dict]:
                    """Delivers the bridge's message; the notifications listed once the worker has shown it."""
                    before = await worker.evaluate(COUNT_SHOWN)
                    await cdp.send("ServiceWorker.deliverPushMessage",
                                   {"origin": base, "registrationId": reg[0]["registrationId"], "data": json.dumps(msg)})

                    async def shown():
                        return await worker.evaluate(COUNT_SHOWN) > before

                    await until(shown, what=what, interval=0.05)
                    return await until(lambda: page.evaluate(NOTIFICATIONS), what=f"{what}, listed")

                (n,) = await push("the notification")
                assert n["title"] == "Approval needed" and n["body"] == "Deploy box: make deploy"
                assert n["actions"] == ["Approve once", "Deny"] and n["url"] == f"{base}/#/s/{cid}"

                # a click opens the conversation in the page
                assert await worker.evaluate(CLICK, "") == "Approval needed"
                await page.wait_for_function(f"location.hash === {('#/s/' + cid)!r}")

                # "Approve once" from the notification answers the approval, as if answered there
                await push("the notification again")
                await worker.evaluate(CLICK, "once")
                resolved = await pheby.recv_type("approval.resolved", timeout=10)
                assert resolved["approval_id"] == request["approval_id"]
                assert (resolved["choice"], resolved["surface"]) == ("once", "push")
                assert not errors, errors
            finally:
                await browser.close()
    finally:
        await pheby.close()
        await rest.close()
        await service.stop()
