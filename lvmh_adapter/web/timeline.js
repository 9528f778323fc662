// The open session's timeline: items drawn from the reducer's state, redrawn only when they changed
// (a streaming message's markdown at most every STREAM_RENDER_MS), kept scrolled to the bottom unless
// the reader scrolled up ("Jump to latest" then).

import { h, clear } from "./dom.js";
import { pendingDecisions } from "./reducer.js";
import { renderItem } from "./view.js";

export const STREAM_RENDER_MS = 100; // a streaming message is re-rendered (markdown) at most this often

const $ = (id) => document.getElementById(id);

function isNearBottom(wrap) {
  return wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 120;
}

/** `view` holds `rendered` (what is on screen), `unseen` (new content below) and `ui` (per-item state). */
export function onTimelineScroll(view) {
  const wrap = $("timeline-wrap");
  if (wrap && isNearBottom(wrap) && view.unseen) {
    view.unseen = false;
    $("jump-btn").hidden = true;
  }
}

export function jumpToLatest(view) {
  const wrap = $("timeline-wrap");
  if (!wrap) return;
  wrap.scrollTop = wrap.scrollHeight;
  view.unseen = false;
  $("jump-btn").hidden = true;
}

function uiRevOf(ui, item) {
  return `${ui.busy.has(item.key) ? 1 : 0}|${ui.errors.get(item.key) || ""}|${ui.answeredHere.has(item.key) ? 1 : 0}`;
}

/**
 * Draw `st` into #timeline. `ctx`: the cards' callbacks (actions.js); `footer(st)`: what the foot shows
 * when the history is loaded and empty; `schedule(ms)`: draw again later (a deferred streaming message).
 */
export function renderTimeline(view, st, { ctx, footer, schedule }) {
  const tl = $("timeline");
  const wrap = tl.parentElement;
  const nearBottom = isNearBottom(wrap);
  const beforeHeight = wrap.scrollHeight;
  const now = performance.now();
  let deferred = false;
  const r = view.rendered;
  if (r.sessionId !== st.id) {
    clear(tl);
    r.nodes = new Map();
    r.sessionId = st.id;
    r.structureRev = -1;
  }
  let prev = null;
  const keep = new Set();
  for (const item of st.items) {
    keep.add(item.key);
    let entry = r.nodes.get(item.key);
    const uiRev = uiRevOf(view.ui, item);
    if (!entry || entry.rev !== item.rev || entry.uiRev !== uiRev) {
      if (entry && item.streaming && entry.streaming && now - entry.at < STREAM_RENDER_MS) {
        deferred = true; // markdown of a long streaming message: not on every delta
      } else {
        const node = renderItem(item, ctx);
        node.dataset.key = item.key;
        if (entry && entry.node.parentNode === tl) tl.replaceChild(node, entry.node);
        entry = { node, rev: item.rev, uiRev, at: now, streaming: Boolean(item.streaming) };
        r.nodes.set(item.key, entry);
      }
    }
    const expected = prev ? prev.nextSibling : tl.firstChild;
    if (entry.node !== expected) tl.insertBefore(entry.node, expected);
    prev = entry.node;
  }
  for (const [key, entry] of r.nodes) {
    if (!keep.has(key)) {
      entry.node.remove();
      r.nodes.delete(key);
    }
  }
  renderFoot(st, footer);
  if (nearBottom) wrap.scrollTop = wrap.scrollHeight;
  else if (wrap.scrollHeight > beforeHeight && st.loaded) view.unseen = true;
  $("jump-btn").hidden = !view.unseen;
  if (deferred) schedule(STREAM_RENDER_MS);
}

function renderFoot(st, footer) {
  const foot = $("timeline-foot");
  clear(foot);
  if (!st.loaded) foot.appendChild(h("div.muted.small", "Loading history…"));
  else {
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
