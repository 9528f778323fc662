// Find in the open conversation. Only what is on screen is in the DOM (and only the pages read so far are
// in the page), so the browser's own find cannot see a long conversation: the daemon searches its stored
// events (GET /api/sessions/:id/search, newest first) and the page goes to each hit, loading the history
// around it when it is not held (loader.js `reveal`). Ctrl+F (⌘F) opens the bar in a conversation.

import { h } from "./dom.js";

const DEBOUNCE_MS = 250;
const MAX_HITS = 200; // hits gathered per search (the daemon answers in pages)

export class Finder {
  /** `current()`: the open session's id; `reveal(hit)`: show the item a hit is about. */
  constructor({ api, current, reveal, onToggle }) {
    this.api = api;
    this.current = current;
    this.reveal = reveal;
    this.onToggle = onToggle || (() => {});
    this.hits = [];
    this.more = false; // the daemon has more hits than were gathered
    this.at = -1;
    this.q = "";
    this.asked = 0;
    this.timer = null;
    this.isOpen = false;
    document.addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && !e.altKey && e.key.toLowerCase() === "f" && this.current() && !document.querySelector("dialog[open]")) {
        e.preventDefault();
        this.open();
      }
    });
  }

  /** The bar (hidden until opened), drawn with the conversation's view. */
  build() {
    this.input = h("input#find-input", { type: "search", placeholder: "Find in this conversation", "aria-label": "Find in this conversation",
                                         autocomplete: "off", maxlength: "200" });
    this.input.addEventListener("input", () => this.schedule());
    this.input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        if (this.input.value.trim() !== this.q) this.search();
        else this.go(e.shiftKey ? -1 : 1);
      } else if (e.key === "Escape") {
        e.preventDefault();
        this.close();
      }
    });
    this.status = h("span.find-status#find-status", { role: "status", "aria-live": "polite" });
    this.bar = h("div.findbar#findbar", { role: "search", hidden: !this.isOpen },
      this.input, this.status,
      h("button.icon-btn#find-older", { type: "button", title: "Earlier match (Enter)", "aria-label": "Earlier match", onclick: () => this.go(1) }, "↑"),
      h("button.icon-btn#find-newer", { type: "button", title: "Later match (Shift+Enter)", "aria-label": "Later match", onclick: () => this.go(-1) }, "↓"),
      h("button.icon-btn#find-close", { type: "button", title: "Close (Esc)", "aria-label": "Close find", onclick: () => this.close() }, "✕"));
    if (this.isOpen) this.input.value = this.q;
    this.show();
    return this.bar;
  }

  open() {
    this.isOpen = true;
    if (this.bar) this.bar.hidden = false;
    this.onToggle(true);
    this.input?.focus();
    this.input?.select();
  }

  close() {
    this.isOpen = false;
    this.reset();
    if (this.bar) this.bar.hidden = true;
    this.onToggle(false);
    document.getElementById("prompt-input")?.focus();
  }

  /** Another conversation opened: nothing found there yet. */
  reset() {
    this.asked += 1;
    clearTimeout(this.timer);
    this.hits = [];
    this.more = false;
    this.at = -1;
    this.q = "";
    if (this.input) this.input.value = "";
    this.show();
  }

  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.search(), DEBOUNCE_MS);
  }

  async search() {
    clearTimeout(this.timer);
    const q = this.input.value.trim();
    const id = this.current();
    const asked = ++this.asked;
    this.q = q;
    this.hits = [];
    this.more = false;
    this.at = -1;
    if (!q || !id) {
      this.show();
      return;
    }
    this.show("Searching…");
    try {
      let before = null;
      do {
        const page = await this.api.search(id, q, { before, limit: 100 });
        if (asked !== this.asked) return;
        this.hits.push(...page.hits);
        before = page.next;
        if (this.at < 0 && this.hits.length) this.go(1); // the newest match at once; the count follows
      } while (before !== null && this.hits.length < MAX_HITS);
      this.more = before !== null;
    } catch (err) {
      if (asked === this.asked) this.show(`Search failed: ${err.message || err}`);
      return;
    }
    this.show();
  }

  /** The next hit (`+1`: earlier in the conversation, `-1`: later), shown. */
  go(step) {
    if (!this.hits.length) return;
    this.at = Math.min(this.hits.length - 1, Math.max(0, this.at + step));
    this.show();
    this.reveal(this.hits[this.at]);
  }

  show(text) {
    if (!this.status) return;
    const n = this.hits.length;
    this.status.textContent = text !== undefined ? text
      : !this.q ? ""
        : !n ? "No match"
          : `${this.at + 1} of ${n}${this.more ? "+" : ""}`;
  }
}
