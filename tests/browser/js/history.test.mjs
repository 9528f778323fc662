// node --test tests/browser/js/history.test.mjs : a long conversation folded page by page, newest first.
import { test } from "node:test";
import assert from "node:assert/strict";
import { applyEvents, createSession, pendingDecisions } from "../../../lvmh_adapter/web/reducer.js";
import { hitKey, itemFor, markPage, mergeOlder, phaseOf, stateOfPage } from "../../../lvmh_adapter/web/history.js";

const S = "sess-long";

/** A history as the daemon stores it (no deltas): runs with tools, an approval asked in one run and answered later. */
function history() {
  const out = [];
  let seq = 0;
  const ev = (type, payload = {}) => out.push({ v: 1, sessionId: S, seq: ++seq, ts: 1_700_000_000_000 + seq * 1000, type, ...payload });
  for (let t = 0; t < 6; t += 1) {
    ev("message_start", { message: { role: "user", id: `u${t}` } });
    ev("message_end", { message: { role: "user", id: `u${t}`, text: `question ${t}`, thinking: null, toolCalls: [], toolCallId: null } });
    ev("agent_start", { runId: `r${t}` });
    ev("tool_execution_start", { toolCallId: `c${t}`, toolName: t % 2 ? "todo" : "bash", args: t % 2 ? { todos: [{ content: `task ${t}`, status: "in_progress" }] } : { command: `ls ${t}` } });
    if (t === 2) ev("approval_request", { approvalId: "ap1", runId: "r2", command: "make deploy", description: "deploy", choices: ["once", "deny"], deadline: null });
    if (t === 2) ev("approval_resolved", { approvalId: "ap1", choice: "once", accepted: true, decidedBy: "remote", surface: "lvmh", reason: null });
    ev("tool_execution_end", { toolCallId: `c${t}`, toolName: t % 2 ? "todo" : "bash", isError: t === 4, resultPreview: `out ${t}` });
    ev("message_start", { message: { role: "assistant", id: `a${t}` } });
    ev("message_end", { message: { role: "assistant", id: `a${t}`, text: `answer ${t}`, thinking: null, toolCalls: [], toolCallId: null } });
    ev("agent_end", { usage: { inputTokens: 10, outputTokens: 2 }, status: t === 4 ? "failed" : "completed", error: t === 4 ? "boom" : undefined });
    ev("agent_settled", { aborted: false });
  }
  return out;
}

/** What a reader sees of the items: enough to tell a joined item from a half one. */
function shown(st) {
  return st.items.map((i) => {
    const base = { key: i.key, kind: i.kind, seq: i.seq };
    if (i.kind === "message") return { ...base, role: i.role, text: i.text, final: i.final, ts: i.ts };
    if (i.kind === "tool") return { ...base, name: i.name, args: i.args, status: i.status, result: i.resultPreview, isError: i.isError, durationMs: i.durationMs };
    if (i.kind === "approval") return { ...base, command: i.command, choices: i.choices, resolved: i.resolved && i.resolved.choice };
    if (i.kind === "settled") return { ...base, failed: i.failed, error: i.error, usage: i.usage };
    return base;
  });
}

test("pages folded newest first, each put in front, are the history folded at once: every split", () => {
  const events = history();
  const whole = createSession(S);
  applyEvents(whole, events);
  for (let cut = 1; cut < events.length; cut += 1) {
    for (const size of [3, 7]) {
      // the newest page from `cut`, then older pages of `size` events until the first
      const st = stateOfPage(S, events.slice(cut), true, applyEvents);
      let before = cut;
      while (before > 0) {
        const from = Math.max(0, before - size);
        mergeOlder(st, stateOfPage(S, events.slice(from, before), from > 0, applyEvents));
        before = from;
      }
      assert.deepEqual(shown(st), shown(whole), `cut at ${cut}, pages of ${size}`);
      assert.equal(st.oldestSeq, 1);
      assert.equal(st.hasOlder, false);
      assert.equal(st.todos.items[0].text, whole.todos.items[0].text);
      assert.equal(st.totalUsage.runs, whole.totalUsage.runs);
      assert.deepEqual(pendingDecisions(st), []);
    }
  }
});

test("the newest page's marks: the oldest seq held, whether older ones exist", () => {
  const events = history();
  const st = createSession(S);
  applyEvents(st, events.slice(40));
  markPage(st, events.slice(40), true);
  assert.equal(st.oldestSeq, 41);
  assert.equal(st.hasOlder, true);
  mergeOlder(st, stateOfPage(S, events.slice(20, 40), true, applyEvents));
  assert.equal(st.oldestSeq, 21);
  assert.equal(st.hasOlder, true);
});

test("a run going on past the newest page: the entry says it runs", () => {
  const events = history().slice(0, -2); // the last run has not ended
  const page = stateOfPage(S, events.slice(-2), true, applyEvents); // its agent_start is on an older page
  assert.equal(page.phase, "idle");
  assert.equal(phaseOf(page, { status: "running" }), "running");
  assert.equal(phaseOf(page, { status: "idle" }), "idle");
  const whole = stateOfPage(S, events, false, applyEvents);
  assert.equal(phaseOf(whole, { status: "idle" }), "running"); // its own events say so
});

test("a search hit names its item", () => {
  const st = stateOfPage(S, history(), false, applyEvents);
  assert.equal(hitKey({ kind: "message", id: "u3", seq: 30 }), "m:u3");
  assert.equal(hitKey({ kind: "tool", id: "c2", seq: 22 }), "t:c2");
  assert.equal(hitKey({ kind: "approval", id: "ap1", seq: 23 }), "a:ap1");
  assert.equal(hitKey({ kind: "notice", id: "9", seq: 9 }), "n:9");
  assert.equal(hitKey({ kind: "nonsense" }), null);
  assert.equal(itemFor(st, "t:c2", 0).name, "bash");
  assert.equal(itemFor(st, "m:nope", 13).key, "t:c1"); // unknown key: the item where its seq falls
});

test("what a screen reader hears of a live conversation: answers, decisions asked, failures", async () => {
  const { describe } = await import("../../../lvmh_adapter/web/announce.js");
  assert.equal(describe({ type: "message_end", message: { role: "assistant", text: " done " } }), "Agent: done");
  assert.equal(describe({ type: "message_end", message: { role: "assistant", text: "" } }), null);
  assert.equal(describe({ type: "message_end", message: { role: "user", text: "hi" } }), null);
  assert.equal(describe({ type: "approval_request", command: "make deploy" }), "Approval needed: make deploy");
  assert.equal(describe({ type: "clarify_request", question: "Ship it?" }), "The agent asks: Ship it?");
  assert.equal(describe({ type: "agent_end", status: "failed", error: "boom" }), "The run failed: boom");
  assert.equal(describe({ type: "agent_end", status: "completed" }), null);
  assert.equal(describe({ type: "message_update", delta: "x" }), null);
  assert.equal(describe(null), null);
  assert.equal(describe({ type: "message_end", message: { role: "assistant", text: "x".repeat(1000) } }).length, "Agent: ".length + 300);
});
