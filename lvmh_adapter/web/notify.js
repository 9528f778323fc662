// Browser notifications for waiting approvals and questions: permission is asked only on a click.

export function notificationsOn() {
  return typeof Notification !== "undefined" && Notification.permission === "granted";
}

/**
 * A browser notification for each waiting decision not yet notified (``notified``: their keys), while
 * the page is hidden; ``waiting``: sessions.js's ``waitingEverywhere`` (every conversation's). A click
 * opens its conversation.
 */
export function notifyPending(waiting, notified) {
  for (const w of waiting) {
    const key = `${w.kind}:${w.id}`;
    if (notified.has(key)) continue;
    notified.add(key);
    if (!notificationsOn() || !document.hidden) continue;
    try {
      const n = new Notification(`${w.kind === "clarify" ? "The agent asks" : "Approval needed"} · ${w.name}`, {
        body: w.text,
        tag: key,
      });
      n.onclick = () => {
        window.focus();
        location.hash = `#/s/${encodeURIComponent(w.sessionId)}`;
        n.close();
      };
    } catch {}
  }
}

export function renderNotifyButton(btn) {
  const supported = typeof Notification !== "undefined";
  const on = notificationsOn();
  btn.hidden = !supported;
  btn.setAttribute("aria-pressed", on ? "true" : "false");
  btn.classList.toggle("on", on);
  const label = on ? "Notifications are on for approvals and questions" : "Notify me when an approval or a question waits";
  btn.title = label;
  btn.setAttribute("aria-label", label);
}

export async function askNotifications(btn, toast) {
  // permission is asked only here, on the user's click
  if (typeof Notification === "undefined") return;
  if (Notification.permission === "denied") {
    toast("Notifications are blocked for this site in the browser's settings.", "error");
    return;
  }
  if (Notification.permission !== "granted") await Notification.requestPermission();
  renderNotifyButton(btn);
  if (notificationsOn()) toast("You will be notified when an approval or a question waits.", "info", 3000);
}
