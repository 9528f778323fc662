// node --test tests/browser/js/sessions.test.mjs : the live session list and what waits across it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyEntry, pageTitle, sortSessions, waitingBadge, waitingEverywhere, waitingIn } from "../../../lvmh_adapter/web/sessions.js";
import { untilText } from "../../../lvmh_adapter/web/format.js";
import { agentBadge, isPiSession, presence, presenceLabel } from "../../../lvmh_adapter/web/labels.js";

const chat = (id, extra = {}) => ({ id, name: `chat ${id}`, online: true, lastEventAt: 100, agentName: "demo", agentLabel: "Demo", waiting: [], ...extra });
const approval = (id, text = "make deploy", expiresAt = 1_700_000_300_000) => ({ kind: "approval", id, text, expiresAt });

test("session_entry: changed replaces the entry and re-sorts, added adds, removed removes", () => {
  let list = sortSessions([chat("a", { lastEventAt: 300 }), chat("b", { lastEventAt: 200 })]);
  assert.deepEqual(list.map((s) => s.id), ["a", "b"]);
  list = applyEntry(list, { type: "session_entry", change: "changed", session: chat("b", { lastEventAt: 400, preview: "hi" }) });
  assert.deepEqual(list.map((s) => s.id), ["b", "a"]);
  assert.equal(list[0].preview, "hi");
  list = applyEntry(list, { type: "session_entry", change: "added", session: chat("c", { lastEventAt: 500 }) });
  assert.deepEqual(list.map((s) => s.id), ["c", "b", "a"]);
  list = applyEntry(list, { type: "session_entry", change: "removed", session: { id: "b" } });
  assert.deepEqual(list.map((s) => s.id), ["c", "a"]);
  // an unknown change or a malformed frame leaves the list as it was
  assert.equal(applyEntry(list, { change: "exploded", session: chat("z") }), list);
  assert.equal(applyEntry(list, { change: "changed" }), list);
});

test("waiting decisions: the open session's from its events, the others' from their entries", () => {
  const sessions = [chat("a", { waiting: [approval("x1")] }), chat("b", { waiting: [approval("stale")] }), chat("c")];
  // b is open and loaded: its own pending items win over its (older) entry
  const pending = [{ kind: "clarify", id: "q1", question: "Ship it?", deadline: null }];
  const all = waitingEverywhere(sessions, "b", pending);
  assert.deepEqual(all.map((w) => [w.sessionId, w.kind, w.id, w.text]), [["a", "approval", "x1", "make deploy"], ["b", "clarify", "q1", "Ship it?"]]);
  assert.equal(all[0].name, "chat a");
  assert.equal(all[0].expiresAt, 1_700_000_300_000);
  // not loaded yet: the entry stands
  assert.deepEqual(waitingEverywhere(sessions, "b", null).map((w) => w.id), ["x1", "stale"]);
  // junk in an entry is skipped
  assert.deepEqual(waitingIn(chat("d", { waiting: [null, { kind: "other" }, approval("ok")] })).map((w) => w.id), ["ok"]);
});

test("the tab title leads with what waits and where", () => {
  const at = (sessionId, name, kind) => ({ sessionId, name, kind });
  assert.equal(pageTitle({ openName: "Needs me", waiting: [at("a", "Needs me", "approval")] }), "(1) Approval needed · Needs me · lvmh");
  assert.equal(pageTitle({ openName: "Needs me", waiting: [at("a", "Needs me", "clarify")] }), "(1) Question waiting · Needs me · lvmh");
  // waiting in another conversation: the title names that one
  assert.equal(pageTitle({ openName: "Chat", waiting: [at("d", "Deploy", "approval")] }), "(1) Approval needed · Deploy · lvmh");
  assert.equal(pageTitle({ openName: "Chat", waiting: [at("d", "Deploy", "approval"), at("e", "Ask", "clarify")] }),
               "(2) Decisions waiting · 2 conversations · lvmh");
  assert.equal(pageTitle({ waiting: [at("d", "Deploy", "approval"), at("d", "Deploy", "approval")] }), "(2) Approvals needed · Deploy · lvmh");
  assert.equal(pageTitle({ openName: "Chat", running: true }), "● Chat · lvmh");
  assert.equal(pageTitle({}), "lvmh · agent conversations");
  assert.equal(waitingBadge([at("a", "", "approval")]), "1 approval");
  assert.equal(waitingBadge([at("a", "", "clarify"), at("a", "", "clarify")]), "2 questions");
  assert.equal(waitingBadge([at("a", "", "clarify"), at("a", "", "approval")]), "2 waiting");
  assert.equal(waitingBadge([]), "");
});

test("expiry: seconds in the last minute, minutes before, 'now' once passed", () => {
  const now = 1_700_000_000_000;
  assert.equal(untilText(now + 300_000, now), "in 5 min");
  assert.equal(untilText(now + 299_500, now), "in 5 min");
  assert.equal(untilText(now + 45_200, now), "in 46 s");
  assert.equal(untilText(now - 1, now), "now");
  assert.equal(untilText(null, now), "");
});

test("who answers: the bridge's own agent is ready or unavailable, never online; a pi session is connected", () => {
  const local = chat("a");
  assert.equal(isPiSession(local), false);
  assert.equal(agentBadge(local), "Demo");
  assert.equal(presence(local), "ready");
  assert.equal(presenceLabel(local), "Demo agent ready");
  assert.equal(presence({ ...local, online: false }), "unavailable");
  const pi = { id: "p", agentName: "lvmh", agentLabel: "pi (lvmh)", agent: true, online: false, cwd: "/w" };
  assert.equal(isPiSession(pi), true);
  assert.equal(agentBadge(pi), "pi · container");
  assert.equal(presenceLabel(pi), "pi not connected");
  assert.equal(agentBadge({ ...pi, agent: false }), "pi");
  // a daemon that sends no agentName: a session with a cwd is pi's, one without is the bridge's
  assert.equal(isPiSession({ id: "q", cwd: "/home/x" }), true);
  assert.equal(isPiSession({ id: "q", cwd: "" }), false);
});
