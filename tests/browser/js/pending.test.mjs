// pendingDecisions is asked at every draw: it picks the decisions out of the items only when items come or go
// (structureRev, or a new items array), and what it returns is always what a filter of every item gives.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyEvent, createSession, pendingDecisions } from "../../../lvmh_adapter/web/reducer.js";
import { mergeOlder, stateOfPage } from "../../../lvmh_adapter/web/history.js";
import { applyEvents } from "../../../lvmh_adapter/web/reducer.js";

const S = "s-pending";
let seq = 0;
const ev = (type, payload = {}, s = null) => ({ v: 1, sessionId: S, seq: s ?? ++seq, ts: 1700000000000 + seq, type, ...payload });
const fresh = (st) => st.items.filter((i) => (i.kind === "approval" || i.kind === "clarify") && !i.resolved);
const ids = (list) => list.map((i) => i.key);

test("pending decisions follow every change, asked between each", () => {
  seq = 0;
  const st = createSession(S);
  const steps = [
    ev("message_end", { message: { role: "user", id: "u1", text: "hi" } }),
    ev("approval_request", { approvalId: "ap1", command: "ls", choices: ["once", "deny"] }),
    ev("message_update", { message: { role: "assistant", id: "a1" }, assistantMessageEvent: { type: "text_delta", delta: "x" } }),
    ev("clarify_request", { clarifyId: "cl1", question: "Go?", choices: ["yes"] }),
    ev("approval_resolved", { approvalId: "ap1", choice: "once", decidedBy: "remote", surface: "lvmh" }),
    ev("approval_request", { approvalId: "ap2", command: "rm", choices: ["once", "deny"] }),
    ev("clarify_resolved", { clarifyId: "cl1", response: "yes", decidedBy: "remote" }),
    ev("approval_resolved", { approvalId: "ap2", choice: "deny", decidedBy: "timeout" }),
  ];
  const seen = [];
  for (const e of steps) {
    applyEvent(st, e);
    assert.deepEqual(ids(pendingDecisions(st)), ids(fresh(st)), e.type);
    assert.deepEqual(ids(pendingDecisions(st)), ids(fresh(st)), `${e.type}, asked again`);
    seen.push(pendingDecisions(st).length);
  }
  assert.deepEqual(seen, [0, 1, 1, 2, 1, 2, 1, 0]);
  // a caller changing what it got changes nothing held
  applyEvent(st, ev("approval_request", { approvalId: "ap3", command: "pwd", choices: ["once"] }));
  pendingDecisions(st).length = 0;
  assert.deepEqual(ids(pendingDecisions(st)), ["a:ap3"]);
});

test("an older page merged in front (a new items array) is looked at again", () => {
  seq = 100;
  const st = createSession(S);
  applyEvents(st, [ev("message_end", { message: { role: "user", id: "u9", text: "late" } })]);
  assert.equal(pendingDecisions(st).length, 0);
  const older = stateOfPage(S, [ev("approval_request", { approvalId: "old", command: "ls", choices: ["once"] }, 5)], true, applyEvents);
  mergeOlder(st, older);
  assert.deepEqual(ids(pendingDecisions(st)), ids(fresh(st)));
  assert.deepEqual(ids(pendingDecisions(st)), ["a:old"]);
});
