// The session list as the daemon keeps it current (`session_list`, then one `session_entry` per
// change), and what waits for an answer across it. Pure: no DOM. The entry's fields beyond the
// spec (status, preview, waiting, agentName, agentLabel): docs/web-ui.md, "The live session list".

import { sessionTitle } from "./labels.js";

function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** Sessions sorted for the sidebar: online first, then the most recent activity. */
export function sortSessions(list) {
  if (!Array.isArray(list)) return [];
  return list
    .filter((s) => s && typeof s === "object" && s.id !== undefined)
    .slice()
    .sort((a, b) => {
      if (Boolean(b.online) !== Boolean(a.online)) return b.online ? 1 : -1;
      const ta = num(a.lastEventAt) ?? num(a.startedAt) ?? 0;
      const tb = num(b.lastEventAt) ?? num(b.startedAt) ?? 0;
      if (tb !== ta) return tb - ta;
      return String(a.id) < String(b.id) ? -1 : 1;
    });
}

/** The list after one `session_entry` frame: `added`/`changed` put the entry in, `removed` takes it out. */
export function applyEntry(list, frame) {
  const s = frame && frame.session;
  if (!s || typeof s !== "object" || s.id === undefined || s.id === null) return list;
  const id = String(s.id);
  const others = list.filter((x) => String(x.id) !== id);
  if (frame.change === "removed") return others;
  if (frame.change !== "added" && frame.change !== "changed") return list; // a change this page does not know
  return sortSessions([...others, s]);
}

/** The decisions waiting in one session's entry: [{sessionId, name, kind, id, text, expiresAt}]. */
export function waitingIn(session) {
  const list = Array.isArray(session.waiting) ? session.waiting : [];
  return list
    .filter((w) => w && (w.kind === "approval" || w.kind === "clarify"))
    .map((w) => ({
      sessionId: String(session.id),
      name: sessionTitle(session),
      kind: w.kind,
      id: String(w.id ?? ""),
      text: typeof w.text === "string" ? w.text : "",
      expiresAt: num(w.expiresAt),
    }));
}

/**
 * Every decision waiting for an answer, in every session: the open session's from its own events
 * (`openPending`: the reducer's pending items, null until its history is loaded), the others' from
 * their entries.
 */
export function waitingEverywhere(sessions, openId, openPending) {
  const out = [];
  let open = null;
  for (const s of sessions) {
    if (openPending && String(s.id) === openId) open = s;
    else out.push(...waitingIn(s));
  }
  if (openId && openPending) {
    const name = sessionTitle(open || { id: openId });
    for (const p of openPending) {
      out.push({ sessionId: openId, name, kind: p.kind, id: p.id, text: p.kind === "clarify" ? p.question : p.command,
                 expiresAt: num(p.deadline) });
    }
  }
  return out;
}

export const APP_TITLE = "lvmh · agent conversations";

/** The tab's title: how many decisions wait, what and where, first; else the open conversation (● while it runs). */
export function pageTitle({ openName = null, running = false, waiting = [] }) {
  const n = waiting.length;
  if (n) {
    const questions = waiting.every((w) => w.kind === "clarify");
    const approvals = waiting.every((w) => w.kind === "approval");
    const what = questions ? (n === 1 ? "Question waiting" : "Questions waiting")
      : approvals ? (n === 1 ? "Approval needed" : "Approvals needed") : "Decisions waiting";
    const places = new Set(waiting.map((w) => w.sessionId));
    const where = places.size === 1 ? waiting[0].name : `${places.size} conversations`;
    return `(${n}) ${what} · ${where} · lvmh`;
  }
  if (openName) return `${running ? "● " : ""}${openName} · lvmh`;
  return APP_TITLE;
}

/** "1 approval", "2 questions", "3 waiting" (mixed): a session's badge. */
export function waitingBadge(waiting) {
  const n = waiting.length;
  if (!n) return "";
  if (waiting.every((w) => w.kind === "clarify")) return n === 1 ? "1 question" : `${n} questions`;
  if (waiting.every((w) => w.kind === "approval")) return n === 1 ? "1 approval" : `${n} approvals`;
  return `${n} waiting`;
}
