// Decisions waiting anywhere, shown everywhere: the favicon's count, and the banner a conversation
// shows for those waiting in the others (with when each expires). The title is sessions.js's pageTitle.

import { h } from "./dom.js";
import { expiryEl } from "./view.js";

const ICON = "/static/icon.svg";
const MAX_BANNER = 3; // lines; the rest is "and N more"

/** The page's icon with a red count when `n` decisions wait (an SVG data: URL, allowed by the CSP's img-src). */
export function setFavicon(n) {
  const link = document.getElementById("favicon");
  if (!link) return;
  let href = ICON;
  if (n > 0) {
    const text = n > 9 ? "9+" : String(n);
    const svg = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">'
      + '<rect width="32" height="32" rx="7" fill="#4f46e5"/><path d="M16 6 26 16 16 26 6 16z" fill="#fff"/>'
      + '<circle cx="22" cy="10" r="10" fill="#d92d20" stroke="#fff" stroke-width="2"/>'
      + `<text x="22" y="14.5" font-family="Arial,Helvetica,sans-serif" font-size="${text.length > 1 ? 10 : 13}" `
      + `font-weight="700" fill="#fff" text-anchor="middle">${text}</text></svg>`;
    href = "data:image/svg+xml," + encodeURIComponent(svg);
  }
  if (link.getAttribute("href") !== href) link.setAttribute("href", href);
  link.dataset.count = String(n);
}

/** The banner for decisions waiting in other conversations (`elsewhere`), or null when none does. */
export function attentionBanner(elsewhere) {
  if (!elsewhere.length) return null;
  const lines = elsewhere.slice(0, MAX_BANNER).map((w) =>
    h("li.attention-item", { "data-session-id": w.sessionId, "data-kind": w.kind },
      h("a.attention-link", { href: `#/s/${encodeURIComponent(w.sessionId)}`, title: `Open “${w.name}”` },
        h("span.attention-what",
          h("strong", w.kind === "clarify" ? "Question" : "Approval needed"),
          " in ", h("span.attention-name", w.name),
          w.text ? h("span.attention-text", w.text) : null)),
      expiryEl(w.expiresAt, w.kind === "clarify" ? "expires" : "denied automatically")));
  const more = elsewhere.length - lines.length;
  return h("section.attention#attention", { "aria-label": "Waiting in other conversations", role: "status" },
    h("ul.attention-list", lines),
    more > 0 ? h("div.attention-more", `and ${more} more waiting`) : null);
}
