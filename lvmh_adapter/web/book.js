// The session list as this page holds it: the first page, the pages loaded as the sidebar scrolls, the
// entries of a search (all asked of the server: GET /api/sessions?limit=&cursor=&q=), kept current by one
// `session_entry` per change (the socket is opened with ext=list-deltas; docs/web-ui.md, "Thousands of
// conversations"). `byId` also holds entries the sidebar does not list (the open session, those where a
// decision waits), so that the header and the waiting banners know them.

import { applyEntry, sortSessions } from "./sessions.js";
import { sessionMatches } from "./labels.js";

export const LIST_PAGE = 50;
const MORE_PAGE = 100;

export class SessionBook {
  /** `onChange()`: the list changed; `onRemoved(id, entry)`: a session was deleted (its entry as it was known). */
  constructor({ api, onChange, onRemoved }) {
    this.api = api;
    this.onChange = onChange || (() => {});
    this.onRemoved = onRemoved || (() => {});
    this.entries = []; // what the sidebar lists, in its order
    this.byId = new Map(); // every entry known
    this.total = 0;
    this.next = null; // the cursor of the page after the loaded ones
    this.loaded = false;
    this.filter = "";
    this.loading = false;
    this.asked = 0; // numbers the requests: an older search's answer never replaces a newer one's
  }

  all() {
    return [...this.byId.values()];
  }

  get(id) {
    return this.byId.get(String(id)) || null;
  }

  remember(list) {
    for (const s of list || []) if (s && s.id !== undefined) this.byId.set(String(s.id), s);
  }

  /**
   * A first page (`session_list` with `total`: the socket's first frame, or GET /api/sessions?limit=), or the
   * spec's whole list (no `total`). While a search is shown, it only refreshes the entries known.
   */
  setPage(frame) {
    const sessions = Array.isArray(frame.sessions) ? frame.sessions : [];
    this.remember(sessions);
    this.remember(frame.attention);
    this.loaded = true;
    if (this.filter) {
      this.search(this.filter);
      return;
    }
    this.entries = sortSessions([...sessions, ...(frame.attention || [])]);
    this.total = typeof frame.total === "number" ? frame.total : this.entries.length;
    this.next = frame.next || null;
    this.onChange();
  }

  /** One `session_entry`: an entry added, changed or removed. */
  apply(frame) {
    const s = frame && frame.session;
    if (!s || typeof s !== "object" || s.id === undefined || s.id === null) return;
    const id = String(s.id);
    if (frame.change === "removed") {
      const before = this.byId.get(id) || null;
      const known = this.byId.delete(id);
      this.entries = this.entries.filter((x) => String(x.id) !== id);
      if (typeof frame.total === "number" && !this.filter) this.total = frame.total;
      else if (known && this.total > 0) this.total -= 1;
      this.onChange();
      this.onRemoved(id, before);
      return;
    }
    if (frame.change !== "added" && frame.change !== "changed") return; // a change this page does not know
    this.byId.set(id, s);
    const shown = !this.filter || sessionMatches(s, this.filter.trim().toLowerCase());
    const listed = this.entries.some((x) => String(x.id) === id);
    if (shown) this.entries = applyEntry(this.entries, frame);
    else if (listed) this.entries = this.entries.filter((x) => String(x.id) !== id);
    if (typeof frame.total === "number" && !this.filter) this.total = frame.total;
    else if (shown && !listed && frame.change === "added") this.total += 1;
    this.onChange();
  }

  /** The next page of the list (or of the search), when the sidebar's reader nears the end of what is loaded. */
  async more() {
    if (!this.next || this.loading) return;
    this.loading = true;
    const asked = this.asked;
    try {
      const page = await this.api.sessionsPage({ limit: MORE_PAGE, cursor: this.next, q: this.filter.trim() });
      if (asked !== this.asked) return;
      this.remember(page.sessions);
      const ids = new Set(page.sessions.map((s) => String(s.id)));
      this.entries = sortSessions([...this.entries.filter((s) => !ids.has(String(s.id))), ...page.sessions]);
      // the whole list's count is the socket's (each added or removed entry carries it): a page answered before a
      // change it brought would count the list as it was; a search's count is the page's
      if (this.filter) this.total = page.total;
      this.next = page.next || null;
    } catch {
      // the daemon away: the next scroll asks again
    } finally {
      this.loading = false;
      this.onChange();
    }
  }

  /** The list searched on the server (name, repo, working directory, id); "" the whole list again. */
  async search(q) {
    this.filter = q;
    const asked = ++this.asked;
    this.loading = true;
    try {
      const page = await this.api.sessionsPage({ limit: LIST_PAGE, q: q.trim() });
      if (asked !== this.asked) return;
      this.remember(page.sessions);
      this.entries = sortSessions(page.sessions);
      this.total = page.total;
      this.next = page.next || null;
    } catch {
      // kept as it was: the search is asked again at the next keystroke or reconnect
    } finally {
      if (asked === this.asked) {
        this.loading = false;
        this.onChange();
      }
    }
  }

  /** The entry of a session the list has not loaded (opened by its address): asked of the daemon. */
  async ensure(id) {
    if (!id || this.byId.has(String(id))) return;
    try {
      const s = await this.api.session(id);
      if (s && s.id !== undefined && !this.byId.has(String(s.id))) {
        this.byId.set(String(s.id), s);
        this.onChange();
      }
    } catch {
      // not known (yet): a spawned session appears with its entry
    }
  }
}
