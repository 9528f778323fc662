// "Notify me" with the page closed (docs/push.md): the click asks for permission (only then),
// registers the service worker (/sw.js) and subscribes this browser to the bridge's Web Push.
// "Sign out" takes that subscription back (forgetPush).

import { askNotifications, notificationsOn } from "./notify.js";

export function pushSupported() {
  return "serviceWorker" in navigator && typeof window.PushManager !== "undefined";
}

function keyBytes(b64url) {
  const b64 = b64url.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (b64url.length % 4)) % 4);
  return Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
}

/** The service worker, registered for the whole page; null where the browser has none. */
export async function registerWorker() {
  if (!("serviceWorker" in navigator)) return null;
  try {
    await navigator.serviceWorker.register("/sw.js", { scope: "/" });
    return await navigator.serviceWorker.ready;
  } catch {
    return null;
  }
}

/** The "notify me" click: page notifications first, then Web Push when the browser has it. */
export async function notifyMe(api, btn, toast) {
  await askNotifications(btn, toast);
  if (!notificationsOn() || !pushSupported()) return;
  const reg = await registerWorker();
  if (!reg) return;
  try {
    const { publicKey } = await api.request("GET", "/api/push/vapid");
    let sub = await reg.pushManager.getSubscription();
    if (!sub) sub = await reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(publicKey) });
    const { endpoint, keys } = sub.toJSON();
    await api.request("POST", "/api/push/subscriptions", { endpoint, keys });
    btn.dataset.push = "on";
    toast("This browser will be told about approvals, questions and finished runs, even with the page closed.", "info", 4000);
  } catch (err) {
    btn.dataset.push = "off";
    toast(`Notifications work while this page is open; push with the page closed is unavailable (${err.message || err}).`, "error");
  }
}

/**
 * Sign-out: this browser's subscription leaves the bridge (pushed nothing more, its notifications'
 * answers void) and its push service (pushManager.unsubscribe). Its id is what registering the same
 * endpoint again answers. Call it while the token is still set; it never throws.
 */
export async function forgetPush(api) {
  if (!pushSupported()) return;
  let sub = null;
  try {
    const reg = await navigator.serviceWorker.getRegistration("/");
    sub = reg ? await reg.pushManager.getSubscription() : null;
  } catch {
    return;
  }
  if (!sub) return;
  try {
    const { endpoint, keys } = sub.toJSON();
    const { id } = await api.request("POST", "/api/push/subscriptions", { endpoint, keys });
    await api.request("DELETE", `/api/push/subscriptions/${encodeURIComponent(id)}`);
  } catch {
    // refused (the token changed) or unreachable: once unsubscribed below, its push service answers
    // 404/410 to the bridge's next push, and the bridge drops the subscription then
  }
  try {
    await sub.unsubscribe();
  } catch {
    // nothing more to do
  }
}
