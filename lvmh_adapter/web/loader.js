// The open session's events: its newest page when it opens, older pages as the reader scrolls up, what
// the live stream skipped, and a view of older history around a search hit (docs/web-ui.md, "Long
// conversations"). Live `events` frames that arrive while a page is fetched wait, then apply in order.

import { ApiError } from "./api.js";
import { applyEvents, createSession } from "./reducer.js";
import { announce } from "./announce.js";
import { AROUND, FIRST_PAGE, OLDER_PAGE, markPage, mergeOlder, stateOfPage } from "./history.js";

const MAX_KEPT_SESSIONS = 8;
const FORWARD_PAGE = 1000; // a reconnect reads what it missed in pages this big; more than one: the newest page again

/** A session's state before anything of it is loaded. */
function fresh(id) {
  return Object.assign(createSession(id), { syncing: 0, buffer: [], notFound: false, hasOlder: false, oldestSeq: null });
}

export class Loader {
  /** `app`: the page's state (`states`, `current`, `rendered`); `render(delay?)` draws the open session again. */
  constructor({ api, app, render }) {
    this.api = api;
    this.app = app;
    this.render = render;
  }

  stateFor(id) {
    const states = this.app.states;
    let st = states.get(id);
    if (st) {
      states.delete(id); // move to most-recent
    } else {
      st = fresh(id);
    }
    states.set(id, st);
    while (states.size > MAX_KEPT_SESSIONS) {
      const oldest = states.keys().next().value;
      if (oldest === this.app.current) break;
      states.delete(oldest);
    }
    return st;
  }

  /**
   * Bring the session up to date: its newest page the first time, else what was stored after the last
   * seq held (a reconnect, a gap in the stream). Live frames that arrive meanwhile wait, then apply.
   */
  async sync(id) {
    const st = this.stateFor(id);
    if (st.syncing > 0) {
      st.again = true; // asked again while a read is on its way (the socket reopened): once it is in, what came since
      return;
    }
    st.syncing += 1;
    try {
      if (!st.loaded) await this.newest(st);
      else {
        const events = await this.api.request("GET", `/api/sessions/${encodeURIComponent(id)}/events?after=${st.lastSeq}&limit=${FORWARD_PAGE}`);
        if (Array.isArray(events) && events.length >= FORWARD_PAGE) {
          // away long: start again from the newest page rather than read everything missed
          Object.assign(st, fresh(id), { syncing: st.syncing, buffer: st.buffer });
          await this.newest(st);
        } else applyEvents(st, events);
      }
      st.notFound = false;
      st.loadError = null;
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) st.notFound = true;
      else if (!(err instanceof ApiError && err.status === 401)) st.loadError = err.message || String(err);
    } finally {
      st.syncing -= 1;
      if (st.syncing === 0 && st.buffer.length) {
        const buffered = st.buffer;
        st.buffer = [];
        applyEvents(st, buffered);
      }
      st.loaded = true;
      if (st.again) {
        st.again = false;
        this.sync(id);
      }
      if (id === this.app.current) this.render(0); // at once: the reader waits for this one
    }
  }

  async newest(st) {
    const { events, older } = await this.api.eventsPage(st.id, { before: "latest", limit: FIRST_PAGE });
    applyEvents(st, events);
    markPage(st, events, older);
  }

  /** The page above the oldest event `st` holds, put in front of it (the reader's place is kept); the one on its
   * way when one is. */
  older(st) {
    if (st.olderLoad) return st.olderLoad;
    if (!st.hasOlder || !st.loaded || st.oldestSeq == null) return Promise.resolve();
    st.olderLoad = this.loadOlder(st).finally(() => {
      st.olderLoad = null;
    });
    return st.olderLoad;
  }

  async loadOlder(st) {
    st.loadingOlder = true;
    this.render();
    try {
      const { events, older } = await this.api.eventsPage(st.id, { before: st.oldestSeq, limit: OLDER_PAGE });
      mergeOlder(st, stateOfPage(st.id, events, older, applyEvents));
      st.pagedBack = true;
    } catch (err) {
      st.loadError = err.message || String(err);
    } finally {
      st.loadingOlder = false;
      this.render();
    }
  }

  /**
   * Make the event `seq` (a search hit) part of what is shown. Close below what is held: the pages
   * between are loaded. Far below: a view of the history around it (`app.rendered.detached`), read
   * both ways as the reader scrolls, joined to the live conversation once it reaches it.
   */
  async reveal(id, seq) {
    const st = this.stateFor(id);
    if (!st.loaded || st.oldestSeq == null || seq >= st.oldestSeq) return st;
    if (st.oldestSeq - seq <= OLDER_PAGE * 2) {
      while (st.hasOlder && st.oldestSeq > seq) {
        const from = st.oldestSeq;
        await this.older(st);
        if (st.oldestSeq >= from) break; // no page came (the daemon away): show what is held
      }
      return st;
    }
    const before = seq + AROUND;
    const { events, older } = await this.api.eventsPage(id, { before, limit: AROUND * 2 });
    const view = stateOfPage(id, events, older, applyEvents);
    view.loaded = true;
    view.hasNewer = true;
    view.newestSeq = before - 1;
    this.app.rendered.detached = view;
    return view;
  }

  /** In a view of older history: the page below it, joined to the live conversation when it gets there. */
  async newer(view) {
    const live = this.app.states.get(view.id);
    if (!live || view.loadingNewer || !view.hasNewer) return;
    view.loadingNewer = true;
    this.render();
    try {
      const upto = live.oldestSeq ?? Infinity;
      const events = await this.api.request("GET", `/api/sessions/${encodeURIComponent(view.id)}/events?after=${view.newestSeq}&limit=${OLDER_PAGE}`);
      const below = (Array.isArray(events) ? events : []).filter((e) => e.seq < upto);
      applyEvents(view, below);
      view.newestSeq = below.length ? below[below.length - 1].seq : view.newestSeq;
      if (below.length < (Array.isArray(events) ? events.length : 0) || !events.length || events.length < OLDER_PAGE) {
        this.join(view, live);
      }
    } catch (err) {
      view.loadError = err.message || String(err);
    } finally {
      view.loadingNewer = false;
      this.render();
    }
  }

  /** The view of older history reached the live conversation: one timeline again, the reader's place kept. */
  join(view, live) {
    view.hasNewer = false;
    mergeOlder(live, view);
    live.pagedBack = true;
    this.app.rendered.detached = null;
  }

  /** Back to the live conversation's newest messages (Jump to latest in a view of older history). */
  leaveHistory() {
    this.app.rendered.detached = null;
    this.app.rendered.stick = true;
    this.render();
  }

  /** A live `events` frame (or the `inflight` extension frame) of any session. */
  onEvents(frame) {
    const id = String(frame.sessionId ?? "");
    const st = this.app.states.get(id);
    if (!st || !Array.isArray(frame.events)) return;
    if (st.syncing > 0) {
      st.buffer.push(...frame.events);
    } else {
      const gap = typeof frame.after === "number" && frame.after > st.lastAny && st.loaded;
      applyEvents(st, frame.events);
      if (gap) this.sync(id); // the stream skipped events we never saw: fetch the persisted ones
    }
    if (id === this.app.current) {
      announce(frame.events);
      this.render();
    }
  }
}
