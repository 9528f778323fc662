// The conversation list on the left: every session, live (order, times, previews), each with what
// waits in it (a badge with the count, the soonest expiry in its tooltip) and whether it runs. Only
// the entries on screen are in the DOM; the list's pages are loaded as it scrolls (book.js).

import { h } from "./dom.js";
import { agentBadge, isPiSession, presenceLabel, sessionTitle, shortPath } from "./labels.js";
import { waitingBadge, waitingIn } from "./sessions.js";
import { timeEl, untilLine } from "./view.js";
import { VirtualList } from "./virtual.js";

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

const ITEM_ESTIMATE = 72;
let vlist = null;
let empty = null;

/** The sidebar's list, drawn as the virtual list it is (virtual.js): only the entries on screen are in the DOM. */
function listOf(ul, onResize) {
  if (vlist && vlist.list === ul) return vlist;
  vlist = new VirtualList({
    scroller: ul.closest(".sidebar") || ul.parentElement,
    list: ul,
    keyOf: (s) => String(s.id),
    versionOf: (s) => s.version,
    render: (s) => item(s.entry, s.active),
    estimate: () => ITEM_ESTIMATE,
    onResize,
    overscan: 400,
    minItems: 40, // a short list is drawn whole
  });
  return vlist;
}

/**
 * Draw the sessions into `ul` (and the count into `countEl`): `book` (book.js) holds them, `current` is the
 * open one. `onResize` draws again; `more()` loads the next page when the reader nears the end.
 */
export function renderList(ul, countEl, { book, current, onResize, more }) {
  // a link focused from the keyboard keeps the focus when its entry is redrawn
  const focused = ul.contains(document.activeElement) ? document.activeElement.closest("[data-session-id]") : null;
  const refocus = focused ? focused.dataset.sessionId : null;
  const list = listOf(ul, onResize);
  countEl.textContent = book.total ? String(book.total) : "";
  const rows = book.entries.map((s) => {
    const active = String(s.id) === current;
    return { id: s.id, entry: s, active, version: `${active ? 1 : 0}${JSON.stringify(s)}` };
  });
  list.render(rows);
  empty?.remove();
  empty = null;
  if (!rows.length) {
    const q = book.filter.trim();
    empty = !book.loaded ? h("li.empty-list", "Loading…")
      : q ? h("li.empty-list", "No conversation matches “", q, "”.")
        : h("li.empty-list", "No conversations yet. Start one with “New conversation”.");
    ul.appendChild(empty);
  }
  // where each shown entry is in the whole list, for a screen reader that sees only these
  for (const [key, e] of list.entries) {
    e.node.setAttribute("aria-setsize", String(Math.max(book.total, rows.length)));
    e.node.setAttribute("aria-posinset", String(list.index.get(key) + 1));
  }
  if (refocus !== null && (!document.activeElement || !ul.contains(document.activeElement))) {
    const again = list.nodeOf(refocus);
    if (again) again.querySelector("a").focus({ preventScroll: true });
  }
  if (book.next && list.range[1] >= rows.length - 10) more();
}
