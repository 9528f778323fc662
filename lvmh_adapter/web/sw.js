// The web UI's service worker (docs/push.md): it shows what the bridge pushes while the page is
// closed, answers an approval from the notification, and opens the conversation on a click.
// Served at /sw.js (scope "/") with the page's own Content-Security-Policy.

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

function tagOf(msg) {
  return `conversation:${msg.conversation_id}`; // one notification per conversation: a newer one replaces it
}

// waitUntil is refused on events the browser did not dispatch itself; the work runs either way
function keepAlive(event, work) {
  try {
    event.waitUntil(work);
  } catch {}
  return work;
}

self.addEventListener("push", (event) => {
  let msg = null;
  try {
    msg = event.data ? event.data.json() : null;
  } catch {
    msg = null;
  }
  if (!msg || msg.v !== 1 || typeof msg.conversation_id !== "string") return;
  keepAlive(event, show(msg));
});

async function show(msg) {
  const tag = tagOf(msg);
  if (msg.kind === "withdraw") {
    // answered elsewhere: take the notification back
    for (const n of await self.registration.getNotifications({ tag })) {
      if (!msg.decision_id || !n.data || !n.data.decision_id || n.data.decision_id === msg.decision_id) n.close();
    }
    return;
  }
  const actions = Array.isArray(msg.actions) ? msg.actions.filter((a) => a && a.url && a.title) : [];
  await self.registration.showNotification(String(msg.title || "agent-bridge"), {
    body: String(msg.body || ""),
    tag,
    renotify: true,
    icon: "/static/icon.svg",
    requireInteraction: msg.kind === "approval" || msg.kind === "clarify",
    actions: actions.slice(0, 2).map((a) => ({ action: a.action, title: a.title })),
    data: { url: msg.url || "", kind: msg.kind, decision_id: msg.decision_id || null, actions },
  });
}

self.addEventListener("notificationclick", (event) => {
  const n = event.notification;
  const data = n.data || {};
  n.close();
  const chosen = (data.actions || []).find((a) => a.action === event.action);
  keepAlive(event, chosen ? answer(chosen) : openConversation(data.url));
});

async function answer(action) {
  // the action's url carries its one-time token: no other credential is sent
  let ok = false;
  try {
    const res = await fetch(action.url, { method: "POST", cache: "no-store", credentials: "omit" });
    ok = res.ok;
  } catch {}
  if (!ok) {
    await self.registration.showNotification("Not answered", {
      body: "This decision was already settled, or the bridge could not be reached.",
      tag: "agent-bridge-answer",
    });
  }
}

async function openConversation(url) {
  const target = url || self.registration.scope;
  const origin = new URL(target, self.registration.scope).origin;
  const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  for (const w of windows) {
    if (new URL(w.url).origin !== origin) continue;
    try {
      await w.navigate(target);
    } catch {}
    try {
      await w.focus();
    } catch {}
    return;
  }
  await self.clients.openWindow(target);
}
