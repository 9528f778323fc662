// What a screen reader hears of the open conversation as it happens. The timeline holds only what is on
// screen (virtual.js): as the reader scrolls, items come and go from the DOM, which a live region would
// read out. So the timeline is a feed, and a hidden live region of its own says what arrives live: the
// agent's answers, a decision asked, a run that failed (only from the stream, never from history pages).

import { h } from "./dom.js";

const KEEP = 5; // lines kept in the region
const MAX_TEXT = 300;

/** The hidden region (drawn with the conversation's view). */
export function liveRegion() {
  return h("div.sr-only#timeline-live", { role: "log", "aria-live": "polite", "aria-relevant": "additions" });
}

/** The line a live event is worth, or null. */
export function describe(ev) {
  if (!ev || typeof ev !== "object") return null;
  const msg = ev.message && typeof ev.message === "object" ? ev.message : {};
  if (ev.type === "message_end" && msg.role === "assistant" && typeof msg.text === "string" && msg.text.trim()) {
    return `Agent: ${msg.text.trim().slice(0, MAX_TEXT)}`;
  }
  if (ev.type === "approval_request") return `Approval needed: ${String(ev.command ?? "").slice(0, MAX_TEXT)}`;
  if (ev.type === "clarify_request") return `The agent asks: ${String(ev.question ?? "").slice(0, MAX_TEXT)}`;
  if (ev.type === "agent_end" && (ev.status === "failed" || ev.error)) return `The run failed: ${String(ev.error ?? "").slice(0, MAX_TEXT)}`;
  return null;
}

/** Say the lines `events` (of the open conversation, from the stream) are worth. */
export function announce(events) {
  const region = document.getElementById("timeline-live");
  if (!region || !Array.isArray(events)) return;
  for (const ev of events) {
    const line = describe(ev);
    if (!line) continue;
    region.appendChild(h("p", line));
    while (region.childNodes.length > KEEP) region.firstChild.remove();
  }
}
