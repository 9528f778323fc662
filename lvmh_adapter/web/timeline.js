// The open session's timeline: only the items on screen and a margin around them are in the DOM
// (virtual.js); an item is redrawn only when it changed (a streaming message's markdown at most every
// STREAM_RENDER_MS). It stays scrolled to the bottom unless the reader scrolled up ("Jump to latest"
// then); near the top it asks for the older page (history.js), and the reader's place is kept when it
// lands above.

import { h, clear } from "./dom.js";
import { pendingDecisions } from "./reducer.js";
import { renderItem } from "./view.js";
import { codeEpoch, loadGrammars } from "./markdown.js";
import { VirtualList } from "./virtual.js";

export const STREAM_RENDER_MS = 100; // a streaming message is re-rendered (markdown) at most this often
const NEAR_BOTTOM_PX = 120;
const MIN_ITEMS = 80; // a conversation this short is drawn whole; a longer one keeps at least this many around the view
const ESTIMATES = { message: 90, tool: 44, settled: 26, approval: 170, clarify: 150, attachment: 80, notice: 44 };

const $ = (id) => document.getElementById(id);

function isNearBottom(wrap) {
  return wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < NEAR_BOTTOM_PX;
}

/** `view` holds `rendered` (what is on screen), `unseen` (new content below) and `ui` (per-item state). */
export function onTimelineScroll(view) {
  const wrap = $("timeline-wrap");
  if (!wrap) return;
  if (isNearBottom(wrap) && view.unseen && !view.rendered.detached) {
    view.unseen = false;
    $("jump-btn").hidden = true;
  }
  view.rendered.onScroll?.();
}

export function jumpToLatest(view) {
  const wrap = $("timeline-wrap");
  if (!wrap) return;
  view.unseen = false;
  $("jump-btn").hidden = true;
  if (view.rendered.detached) {
    view.rendered.backToLatest?.();
    return;
  }
  view.rendered.stick = true;
  wrap.scrollTop = wrap.scrollHeight;
  view.rendered.onScroll?.();
}

function uiRevOf(ui, item) {
  return `${ui.busy.has(item.key) ? 1 : 0}|${ui.errors.get(item.key) || ""}|${ui.answeredHere.has(item.key) ? 1 : 0}`;
}

function listFor(view, st, ctx, schedule) {
  const r = view.rendered;
  const tl = $("timeline");
  if (r.vlist && r.vlist.list === tl && r.sessionId === st.id) return r.vlist;
  r.vlist?.destroy();
  r.sessionId = st.id;
  r.stick = true; // a conversation opens at its newest message
  r.lastKey = null;
  r.vlist = new VirtualList({
    scroller: tl.parentElement,
    list: tl,
    keyOf: (item) => item.key,
    versionOf: (item) => `${item.rev}|${uiRevOf(view.ui, item)}|${codeEpoch()}`, // code drawn before its grammar: again
    render: (item) => {
      const node = renderItem(item, r.ctx);
      node.dataset.key = item.key;
      return node;
    },
    kindOf: (item) => (item.kind === "message" ? `message-${item.role}` : item.kind),
    estimate: (item) => ESTIMATES[item.kind] || 60,
    hold: (item, entry, now) => Boolean(item.streaming && entry.item.streaming && now - entry.at < STREAM_RENDER_MS),
    onResize: () => schedule(0),
    overscan: Math.max(600, tl.parentElement.clientHeight),
    minItems: MIN_ITEMS,
  });
  r.ctx = ctx;
  return r.vlist;
}

/**
 * Draw `st` into #timeline. `ctx`: the cards' callbacks (actions.js); `footer(st)`: what the foot shows
 * when the history is loaded and empty; `schedule(ms)`: draw again later; `older()`: load the page above
 * (when there is one); `newer()`: the page below, in a view of older history (find.js).
 */
export function renderTimeline(view, st, { ctx, footer, schedule, older, newer }) {
  const wrap = $("timeline-wrap");
  const r = view.rendered;
  if (!st.loaded && !st.items.length && !(r.vlist && r.sessionId === st.id)) {
    // nothing to draw yet: no list made, no layout read (a first page on its way lands in this same task, often)
    renderHead(st);
    renderFoot(st, footer, r.detached);
    $("timeline").setAttribute("aria-busy", "true");
    return;
  }
  const vlist = listFor(view, st, ctx, schedule);
  r.ctx = ctx;
  const stick = r.stick || (isNearBottom(wrap) && !r.pin && !r.detached);
  const last = st.items.length ? st.items[st.items.length - 1] : null;
  const lastMark = last ? `${last.key}|${last.rev}` : null;
  renderHead(st);
  renderFoot(st, footer, r.detached);
  vlist.list.setAttribute("aria-busy", st.loaded && !st.loadingOlder && !st.loadingNewer ? "false" : "true");
  const pin = r.pin;
  r.pin = null;
  const lean = !r.painted; // a conversation's first paint: the screen; the margin around it in the next frame
  const { deferred } = vlist.render(st.items, { stick: stick && !pin, pin, lean });
  if (lean && st.loaded && st.items.length) {
    r.painted = true;
    // once this first paint is on screen (the frame after it): the margin around the screen, highlight.js's grammars
    requestAnimationFrame(() => setTimeout(() => {
      schedule(0);
      loadGrammars();
    }, 0));
  }
  if (stick && !pin) wrap.scrollTop = wrap.scrollHeight;
  r.stick = false;
  if (!stick && lastMark !== r.lastKey && r.lastKey !== null && st.loaded && !r.detached) view.unseen = true;
  r.lastKey = lastMark;
  markFound(vlist, view.ui.found);
  $("jump-btn").hidden = !(view.unseen || r.detached);
  if (deferred) schedule(STREAM_RENDER_MS);
  // the reader is near the top (or the page does not fill the screen): the page above, if any
  if (st.loaded && st.hasOlder && wrap.scrollTop < wrap.clientHeight) older();
  if (r.detached && st.hasNewer && wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < wrap.clientHeight) newer();
}

/** The item a search hit is about is marked (and kept marked while it is redrawn or scrolled away and back). */
function markFound(vlist, key) {
  for (const node of vlist.list.querySelectorAll(".found")) if (node.dataset.key !== key) node.classList.remove("found");
  const node = key ? vlist.nodeOf(key) : null;
  if (node && !node.classList.contains("found")) node.classList.add("found");
}

/** Show `key` a third of the way down the view at the next draw (a search hit). */
export function pinItem(view, key) {
  const wrap = $("timeline-wrap");
  view.rendered.pin = { key, offset: wrap ? Math.round(wrap.clientHeight / 3) : 0 };
  view.rendered.stick = false;
}

function renderHead(st) {
  const head = $("timeline-head");
  if (!head) return;
  const text = !st.loaded ? "" : st.loadingOlder ? "Loading earlier messages…" : st.hasOlder || !st.pagedBack ? "" : "Beginning of the conversation";
  if (head.textContent !== text) head.textContent = text;
}

function renderFoot(st, footer, detached) {
  const foot = $("timeline-foot");
  clear(foot);
  if (!st.loaded) foot.appendChild(h("div.muted.small", "Loading history…"));
  else if (detached) {
    foot.appendChild(h("div.muted.small.center", st.loadingNewer ? "Loading later messages…" : ""));
    return;
  } else {
    const extra = footer(st);
    if (extra) foot.appendChild(extra);
  }
  if (st.phase === "running") {
    const draft = st.openAssistant ? st.byKey.get(`m:${st.openAssistant}`) : null;
    const waiting = pendingDecisions(st).length > 0;
    if (waiting) foot.appendChild(h("div.working", "waiting for a decision above…"));
    else if (!(draft && draft.streaming)) foot.appendChild(h("div.working", h("span.spinner"), "working…"));
  }
}
