// The conversation list on the left: every session, live (order, times, previews), each with what
// waits in it (a badge with the count, the soonest expiry in its tooltip) and whether it runs.

import { h, clear } from "./dom.js";
import { agentBadge, isPiSession, presenceLabel, sessionMatches, sessionTitle, shortPath } from "./labels.js";
import { waitingBadge, waitingIn } from "./sessions.js";
import { timeEl, untilLine } from "./view.js";

function whenEl(ts) {
  return timeEl(ts, ".when") || h("span.when");
}

function waitingEl(waiting) {
  if (!waiting.length) return null;
  const soonest = waiting.map((w) => w.expiresAt).filter(Boolean).sort((a, b) => a - b)[0];
  const what = waiting.map((w) => `${w.kind === "clarify" ? "Question" : "Approval"}: ${w.text}`).join("\n");
  return h("span.waiting-badge", { title: soonest ? `${what}\n${untilLine(soonest, "the first expires")}` : what },
    waitingBadge(waiting));
}

function item(s, active) {
  const id = String(s.id);
  const pi = isPiSession(s);
  const waiting = waitingIn(s);
  const meta = pi ? [s.repo, shortPath(s.cwd)].filter(Boolean).join(" · ") : [s.model, s.provider].filter(Boolean).join(" · ");
  const running = s.status === "running";
  const state = `${s.online ? ".online" : ".offline"}`;
  return h(`li.session-item${active ? ".active" : ""}${waiting.length ? ".waiting" : ""}`, { "data-session-id": id, "data-status": s.status || null },
    h("a.session-link", { href: `#/s/${encodeURIComponent(id)}`, "aria-current": active ? "page" : null },
      h("div.session-row1",
        h(`span.dot${state}`, { title: presenceLabel(s), "aria-label": presenceLabel(s), role: "img" }),
        h("span.session-name", sessionTitle(s)),
        waitingEl(waiting),
        h(`span.badge${pi && s.agent ? ".badge-agent" : ".badge-local"}`, agentBadge(s))),
      s.preview ? h("div.session-preview", s.preview) : null,
      h("div.session-row3",
        h(`span.meta${pi ? ".mono" : ""}`, meta),
        running ? h("span.when.running", h("span.spinner.small", { "aria-hidden": "true" }), " running") : whenEl(s.lastEventAt ?? s.startedAt))));
}

/** Draw the list into `ul` (and the count into `countEl`) from the app's sessions. */
export function renderList(ul, countEl, { sessions, listLoaded, filter, current }) {
  // the list is redrawn on every activity: a link focused from the keyboard keeps the focus
  const focused = ul.contains(document.activeElement) ? document.activeElement.closest("[data-session-id]") : null;
  const refocus = focused ? focused.dataset.sessionId : null;
  clear(ul);
  countEl.textContent = sessions.length ? String(sessions.length) : "";
  if (!sessions.length) {
    ul.appendChild(h("li.empty-list", listLoaded ? "No conversations yet. Start one with “New conversation”." : "Loading…"));
    return;
  }
  const needle = filter.trim().toLowerCase();
  const shown = sessions.filter((s) => sessionMatches(s, needle));
  if (!shown.length) {
    ul.appendChild(h("li.empty-list", "No conversation matches “", filter.trim(), "”."));
    return;
  }
  for (const s of shown) ul.appendChild(item(s, String(s.id) === current));
  if (refocus !== null) {
    const again = [...ul.querySelectorAll("[data-session-id]")].find((li) => li.dataset.sessionId === refocus);
    if (again) again.querySelector("a").focus({ preventScroll: true });
  }
}
