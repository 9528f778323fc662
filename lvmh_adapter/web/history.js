// A long conversation's history in pages (pure: no DOM, no I/O; `node --test` checks it).
//
// The page opens a conversation at its newest page of events (GET .../events?before=latest) and reads
// older pages as its reader scrolls up (?before=<oldest seq held>; docs/lvmh.md, "History in pages").
// The reducer folds events in seq order, so an older page is folded on its own (a fresh state) and its
// timeline put in front of the newer one's: an item both hold (a tool started on the older page and
// ended on the newer, an approval asked there and answered here, a message begun and completed) is
// the two halves of one item, joined.

import { createSession } from "./reducer.js";

export const FIRST_PAGE = 200; // events of the newest page: a few screens of a conversation
export const OLDER_PAGE = 500; // events of each older page
export const AROUND = 100; // events loaded on each side of a search hit far from what is held

/** The state's paging marks: the oldest seq held (the next `before`) and whether older ones exist. */
export function markPage(state, events, older) {
  const seqs = events.map((e) => e && e.seq).filter((s) => typeof s === "number");
  if (seqs.length) state.oldestSeq = Math.min(state.oldestSeq ?? Infinity, ...seqs);
  state.hasOlder = Boolean(older);
  return state;
}

/** A state folded from one page of events (in seq order), marked with where it starts. */
export function stateOfPage(id, events, older, apply) {
  const st = createSession(id);
  apply(st, events);
  return markPage(st, events, older);
}

function defined(v) {
  return v !== undefined && v !== null && v !== "";
}

/** One item from its older half `a` and newer half `b` (the same key): `b`'s facts win, `a` gives its place. */
export function joinItems(a, b) {
  if (a.kind !== b.kind) return b;
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) {
    if (!defined(v)) continue;
    if (k === "status" && (v === "pending" || v === "running") && a.status && a.status !== "pending" && a.status !== "running") continue;
    if (k === "name" && v === "tool" && a.name) continue;
    if ((k === "text" || k === "command" || k === "question") && v === "" && a[k]) continue;
    if (k === "choices" && Array.isArray(v) && !v.length && Array.isArray(a.choices) && a.choices.length) continue;
    out[k] = v;
  }
  out.key = b.key;
  out.seq = Math.min(a.seq, b.seq);
  if (a.isError || b.isError) out.isError = true;
  if (out.kind === "tool" && out.durationMs == null && a.startedAt && b.endedAt) out.durationMs = Math.max(0, b.endedAt - a.startedAt);
  out.rev = (b.rev || 0) + 1;
  return out;
}

/**
 * Put `older` (a state folded from the events just below `state.oldestSeq`) in front of `state`.
 * Returns `state`, changed in place: its items, what they derive (todos, subagents, usage) and its marks.
 */
export function mergeOlder(state, older) {
  const joined = new Map();
  const front = [];
  for (const item of older.items) {
    const newer = state.byKey.get(item.key);
    if (newer) joined.set(item.key, joinItems(item, newer));
    else front.push(item);
  }
  const back = state.items.map((item) => joined.get(item.key) || item);
  endedOnTheOlderPage(state, older);
  state.items = front.concat(back);
  state.items.sort((x, y) => x.seq - y.seq); // a joined item moves to where it began (stable sort)
  for (const item of state.items) state.byKey.set(item.key, item);
  for (const seq of older.seen) state.seen.add(seq);
  if (!state.todos && older.todos) state.todos = older.todos;
  const known = new Set(state.subagents.map((s) => s.toolId));
  state.subagents = older.subagents.filter((s) => !known.has(s.toolId)).concat(state.subagents);
  for (const k of ["inputTokens", "outputTokens", "totalCost"]) {
    if (typeof older.totalUsage[k] === "number") state.totalUsage[k] = (state.totalUsage[k] || 0) + older.totalUsage[k];
  }
  state.totalUsage.runs += older.totalUsage.runs;
  if (!state.info && older.info) state.info = older.info;
  if (older.lostEvents) state.lostEvents = true;
  if (typeof older.oldestSeq === "number") state.oldestSeq = Math.min(state.oldestSeq ?? Infinity, older.oldestSeq);
  state.hasOlder = Boolean(older.hasOlder);
  state.structureRev += 1;
  state.rev += 1;
  return state;
}

/**
 * A run whose agent_end is the older page's last word and whose agent_settled opens the newer page: its
 * settled line (drawn from the newer page alone) learns from the older one whether it failed, and its usage.
 */
function endedOnTheOlderPage(state, older) {
  if (older.phase === "done" || !(older.lastStatus || older.lastError || older.runUsage)) return; // settled there, or no end
  const settled = state.items.find((i) => i.kind === "settled");
  if (!settled || settled.aborted || settled.failed || settled.usage) return;
  settled.failed = older.lastStatus === "failed" || Boolean(older.lastError);
  settled.error = older.lastError;
  settled.usage = older.runUsage;
  settled.rev = (settled.rev || 0) + 1;
}

/** The timeline key of the item a search hit is about (GET .../search: `kind`, `id`, `seq`). */
export function hitKey(hit) {
  const prefix = { message: "m", tool: "t", approval: "a", clarify: "c", attachment: "f" }[hit && hit.kind];
  if (prefix) return `${prefix}:${hit.id}`;
  return hit && hit.kind === "notice" ? `n:${hit.seq}` : null;
}

/** The item that holds `key`, or else the last one that began at or before `seq` (where the hit was). */
export function itemFor(state, key, seq) {
  if (key && state.byKey.has(key)) return state.byKey.get(key);
  let found = null;
  for (const item of state.items) {
    if (item.seq > seq) break;
    found = item;
  }
  return found;
}

/**
 * What the open session is doing: its own events say so, unless its newest page began in the middle
 * of a run (no agent_start held: phase "idle") while its entry in the list says it runs or waits.
 */
export function phaseOf(state, entry) {
  if (!state) return "idle";
  if (state.phase === "idle" && state.hasOlder && entry && (entry.status === "running" || entry.status === "waiting")) return "running";
  return state.phase;
}
