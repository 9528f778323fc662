// node --test tests/browser/js/reducer.test.mjs : the web UI's pure event reducer.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  applyEvent, applyEvents, createSession, todosFromArgs, describeDecider, pendingDecisions,
} from "../../../lvmh_adapter/web/reducer.js";
import { relativeTime, formatUsage } from "../../../lvmh_adapter/web/format.js";
import { sortSessions } from "../../../lvmh_adapter/web/sessions.js";

const S = "sess-1";
let seq = 0;
const ev = (type, payload = {}, s = null) => ({ v: 1, sessionId: S, seq: s ?? ++seq, ts: 1700000000000 + seq, type, ...payload });

function piRun() {
  seq = 0;
  return [
    ev("agent_start"),
    ev("message_start", { message: { role: "user", id: "u1" } }),
    ev("message_end", { message: { role: "user", id: "u1", text: "list files", thinking: null, toolCalls: [], toolCallId: null } }),
    ev("message_start", { message: { role: "assistant", id: "a1" } }),
    ev("message_update", { delta: "Let me " }),
    ev("message_update", { delta: "look." }),
    ev("message_end", { message: { role: "assistant", id: "a1", text: "Let me look.", thinking: "hmm", toolCalls: [{ id: "c1", name: "bash", argsJson: "{\"command\":\"ls\"}" }], toolCallId: null } }),
    ev("tool_execution_start", { toolCallId: "c1", toolName: "bash", args: { command: "ls" } }),
    ev("tool_execution_update", { toolCallId: "c1", toolName: "bash", partial: "a.txt" }),
    ev("tool_execution_end", { toolCallId: "c1", toolName: "bash", isError: false, resultPreview: "a.txt\nb.txt" }),
    ev("message_start", { message: { role: "toolResult", id: "r1" } }),
    ev("message_end", { message: { role: "toolResult", id: "r1", text: "a.txt\nb.txt", thinking: null, toolCalls: [], toolCallId: "c1" } }),
    ev("agent_end", { usage: { inputTokens: 42, outputTokens: 7, totalCost: 0.001 } }),
    ev("agent_settled", { aborted: false }),
  ];
}

test("a pi run folds into user, assistant, tool, settled items", () => {
  const st = createSession(S);
  applyEvents(st, piRun());
  const kinds = st.items.map((i) => `${i.kind}:${i.role || i.name || ""}`);
  assert.deepEqual(kinds, ["message:user", "message:assistant", "tool:bash", "settled:"]);
  const a = st.items[1];
  assert.equal(a.text, "Let me look.");
  assert.equal(a.thinking, "hmm");
  assert.equal(a.streaming, false);
  const t = st.items[2];
  assert.equal(t.status, "completed");
  assert.deepEqual(t.args, { command: "ls" });
  assert.equal(t.resultPreview, "a.txt\nb.txt");
  assert.equal(st.phase, "done");
  assert.deepEqual(st.items[3].usage, { inputTokens: 42, outputTokens: 7, totalCost: 0.001 });
  assert.equal(st.lastSeq, 14);
});

test("duplicate seqs are applied once (refetch overlapping the live stream)", () => {
  const st = createSession(S);
  const events = piRun();
  applyEvents(st, events.slice(0, 8));
  const rev = st.structureRev;
  assert.equal(applyEvents(st, events), events.length - 8);
  assert.equal(applyEvents(st, events), 0);
  assert.equal(st.items.length, 4);
  assert.ok(st.structureRev > rev);
});

test("live deltas stream into a draft that message_end replaces", () => {
  seq = 0;
  const st = createSession(S);
  applyEvent(st, ev("agent_start"));
  applyEvent(st, ev("message_start", { message: { role: "assistant", id: "a9" } }));
  assert.equal(st.items.length, 0, "no empty bubble before the first text");
  applyEvent(st, ev("message_update", { delta: "Hel" }));
  applyEvent(st, ev("message_update", { delta: "lo" }));
  assert.equal(st.items[0].text, "Hello");
  assert.equal(st.items[0].streaming, true);
  assert.equal(st.phase, "running");
  applyEvent(st, ev("message_end", { message: { role: "assistant", id: "a9", text: "Hello!", toolCalls: [] } }));
  assert.equal(st.items.length, 1);
  assert.equal(st.items[0].text, "Hello!");
  assert.equal(st.items[0].streaming, false);
  // a late duplicate delta changes nothing
  applyEvent(st, ev("message_update", { delta: "zzz" }));
  assert.equal(st.items[0].text, "Hello!");
});

test("deltas without a seen message_start open a draft that takes the real id", () => {
  seq = 10;
  const st = createSession(S);
  applyEvent(st, ev("message_update", { delta: "partial" }));
  assert.equal(st.items.length, 1);
  applyEvent(st, ev("message_end", { message: { role: "assistant", id: "real", text: "partial text" } }));
  assert.equal(st.items.length, 1);
  assert.equal(st.items[0].id, "real");
  assert.equal(st.items[0].text, "partial text");
});

test("a stale buffered delta after a refetch does not create a stray draft", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("message_start", { message: { role: "assistant", id: "a1" } }, 1),
    ev("message_end", { message: { role: "assistant", id: "a1", text: "done" } }, 3),
  ]);
  applyEvent(st, ev("message_update", { delta: "do" }, 2));
  assert.equal(st.items.length, 1);
  assert.equal(st.items[0].text, "done");
});

test("out-of-order arrival is placed by seq", () => {
  const st = createSession(S);
  const events = piRun();
  applyEvents(st, [events[6], events[2]]);
  assert.deepEqual(st.items.map((i) => i.id), ["u1", "a1", "c1"]);
});

test("events of another session are ignored", () => {
  const st = createSession(S);
  assert.equal(applyEvent(st, { sessionId: "other", seq: 1, type: "agent_start" }), false);
  assert.equal(st.phase, "idle");
});

test("bridge-style run: tool before text, cancelled tool, failed run", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("agent_start"),
    ev("message_start", { message: { role: "assistant", id: "m" } }),
    ev("tool_execution_start", { toolCallId: "t1", toolName: "demo_tool", args: { input: "demo" } }),
    ev("tool_execution_end", { toolCallId: "t1", toolName: "demo_tool", isError: true, resultPreview: "boom" }),
    ev("message_update", { delta: "Tool" }),
    ev("agent_end", { usage: {}, error: "demo failure", status: "failed" }),
    ev("agent_settled"),
  ]);
  const kinds = st.items.map((i) => i.kind);
  assert.deepEqual(kinds, ["tool", "message", "settled"]);
  assert.equal(st.items[0].status, "failed");
  assert.equal(st.items[1].streaming, false);
  // the run is marked failed, with its error, on the settled line (not "done")
  assert.equal(st.items[2].failed, true);
  assert.equal(st.items[2].error, "demo failure");
  assert.equal(st.lastStatus, "failed");
});

test("a run that fails before any text leaves no empty bubble", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("agent_start"),
    ev("message_start", { message: { role: "assistant", id: "m" } }),
    ev("message_end", { message: { role: "assistant", id: "m", text: "", thinking: null, toolCalls: [], toolCallId: null } }),
    ev("agent_end", { usage: {}, error: "demo failure", status: "failed" }),
    ev("agent_settled", { aborted: false }),
  ]);
  assert.deepEqual(st.items.map((i) => i.kind), ["settled"]);
  assert.equal(st.items[0].failed, true);
  // a cancelled run says so (and is not failed)
  applyEvents(st, [ev("agent_start"), ev("agent_end", { status: "cancelled" }), ev("agent_settled", { aborted: true })]);
  assert.equal(st.items[1].aborted, true);
  assert.equal(st.items[1].failed, false);
});

test("a streamed draft whose message ends empty is not left streaming (a run a restart interrupted)", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("agent_start"),
    ev("message_start", { message: { role: "assistant", id: "m" } }),
    ev("message_update", { delta: "w1 w2" }),
  ]);
  assert.equal(st.items[0].streaming, true);
  applyEvents(st, [
    ev("message_end", { message: { role: "assistant", id: "m", text: "", thinking: null, toolCalls: [], toolCallId: null } }),
    ev("agent_end", { usage: {}, error: "interrupted by a restart", status: "failed" }),
    ev("agent_settled", { aborted: false }),
  ]);
  // the same as a page that loads the stored events now: no bubble, the run failed
  assert.deepEqual(st.items.map((i) => i.kind), ["settled"]);
  assert.equal(st.items[0].failed, true);
  assert.equal(st.phase, "done");
});

test("inflight frame: a page joining mid-message gets the text so far, then only newer deltas", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [ev("agent_start"), ev("message_start", { message: { role: "assistant", id: "a1" } })]); // seq 1, 2
  // the daemon says: text so far "one two", deltas up to seq 4 included
  applyEvent(st, { type: "inflight", sessionId: S, seq: 4, message: { role: "assistant", id: "a1" }, text: "one two" });
  assert.equal(st.byKey.get("m:a1").text, "one two");
  assert.equal(st.byKey.get("m:a1").streaming, true);
  // the stream's next batch may still carry deltas 3 and 4: they are already in the text
  applyEvents(st, [
    { v: 1, sessionId: S, seq: 3, ts: 1, type: "message_update", delta: "one" },
    { v: 1, sessionId: S, seq: 4, ts: 1, type: "message_update", delta: " two" },
    { v: 1, sessionId: S, seq: 5, ts: 1, type: "message_update", delta: " three" },
  ]);
  assert.equal(st.byKey.get("m:a1").text, "one two three");
  applyEvent(st, { v: 1, sessionId: S, seq: 6, ts: 1, type: "message_end", message: { role: "assistant", id: "a1", text: "one two three" } });
  assert.equal(st.byKey.get("m:a1").final, true);
  // a late inflight for a completed message changes nothing
  assert.equal(applyEvent(st, { type: "inflight", sessionId: S, seq: 5, message: { role: "assistant", id: "a1" }, text: "one" }), false);
  assert.equal(st.byKey.get("m:a1").text, "one two three");
});

test("abort: running tools become cancelled, settled says aborted", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("agent_start"),
    ev("tool_execution_start", { toolCallId: "t1", toolName: "bash", args: { command: "sleep 100" } }),
    ev("agent_end", {}),
    ev("agent_settled", { aborted: true }),
  ]);
  assert.equal(st.items[0].status, "cancelled");
  assert.equal(st.items[1].kind, "settled");
  assert.equal(st.items[1].aborted, true);
});

test("approvals and clarifications: pending, then resolved with who decided", () => {
  seq = 0;
  const st = createSession(S);
  applyEvent(st, ev("approval_request", { approvalId: "ap1", command: "ls", description: "shell", choices: ["once", "session", "always", "deny"] }));
  applyEvent(st, ev("clarify_request", { clarifyId: "cl1", question: "Continue?", choices: ["yes", "no"], allowFreeText: true }));
  assert.equal(pendingDecisions(st).length, 2);
  applyEvent(st, ev("approval_resolved", { approvalId: "ap1", choice: "once", decidedBy: "remote", surface: "pheby" }));
  applyEvent(st, ev("clarify_resolved", { clarifyId: "cl1", response: "yes", decided_by: "remote", surface: "lvmh" }));
  assert.equal(pendingDecisions(st).length, 0);
  const ap = st.byKey.get("a:ap1");
  assert.equal(ap.resolved.choice, "once");
  assert.equal(describeDecider(ap.resolved, false), "answered from pheby");
  const cl = st.byKey.get("c:cl1");
  assert.equal(cl.resolved.response, "yes");
  assert.equal(describeDecider(cl.resolved, true), "answered here");
  assert.equal(describeDecider({ decidedBy: "timeout" }, false), "timed out");
  assert.equal(describeDecider({ decidedBy: "cancelled" }, false), "denied: run cancelled");
  assert.equal(describeDecider({ decidedBy: "restart" }, false), "denied: bridge restarted");
});

test("attachments keep id, name, type and size (nested or flat)", () => {
  seq = 0;
  const st = createSession(S);
  applyEvent(st, ev("attachment_added", { attachment: { attachmentId: "f1", filename: "demo.txt", mimeType: "text/plain", size: 16 } }));
  applyEvent(st, ev("attachment_added", { attachmentId: "f2", filename: "demo.png", mimeType: "image/png", size: 70, inlineImage: true }));
  const [a, b] = st.items;
  assert.equal(a.attachmentId, "f1");
  assert.equal(a.filename, "demo.txt");
  assert.equal(b.inlineImage, true);
  assert.equal(b.mimeType, "image/png");
});

test("todos derive from the latest todo tool call; subagents from subagent calls", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [
    ev("tool_execution_start", { toolCallId: "t1", toolName: "todo", args: { todos: [{ content: "plan", status: "completed" }, { content: "code", status: "pending" }] } }),
    ev("tool_execution_end", { toolCallId: "t1", toolName: "todo", isError: false, resultPreview: "ok" }),
    ev("tool_execution_start", { toolCallId: "t2", toolName: "todo", args: { todos: [{ content: "plan", status: "completed" }, { content: "code", status: "in_progress" }, { content: "test", status: "pending" }] } }),
    ev("tool_execution_start", { toolCallId: "s1", toolName: "subagent", args: { agent: "reviewer", task: "review the diff", async: true } }),
  ]);
  assert.deepEqual(st.todos.items.map((t) => [t.text, t.status]), [["plan", "completed"], ["code", "in_progress"], ["test", "pending"]]);
  assert.equal(st.subagents.length, 1);
  assert.equal(st.subagents[0].agent, "reviewer");
  assert.equal(st.subagents[0].status, "running");
  applyEvent(st, ev("tool_execution_end", { toolCallId: "s1", toolName: "subagent", isError: false, resultPreview: "LGTM" }));
  assert.equal(st.subagents[0].status, "completed");
  assert.equal(st.subagents[0].resultPreview, "LGTM");
});

test("todosFromArgs tolerates shapes and JSON strings", () => {
  assert.deepEqual(todosFromArgs('{"tasks":[{"title":"a","done":true},{"text":"b"}]}').map((t) => t.status), ["completed", "pending"]);
  assert.deepEqual(todosFromArgs(["x", "y"]).map((t) => t.text), ["x", "y"]);
  assert.equal(todosFromArgs({ action: "list" }), null);
  assert.equal(todosFromArgs("not json"), null);
});

test("tool calls in message_end without execution events show as called", () => {
  seq = 0;
  const st = createSession(S);
  applyEvent(st, ev("message_end", { message: { role: "assistant", id: "a", text: "", toolCalls: [{ id: "x", name: "read", argsJson: "{\"path\":\"/etc/hosts\"}" }] } }));
  const tool = st.byKey.get("t:x");
  assert.equal(tool.status, "pending");
  assert.deepEqual(tool.args, { path: "/etc/hosts" });
});

test("garbage never throws", () => {
  const st = createSession(S);
  for (const g of [null, 1, "x", [], {}, { type: 5 }, { type: "message_end" }, { type: "message_end", message: 3 },
    { type: "tool_execution_end" }, { type: "approval_resolved" }, { type: "attachment_added", attachment: null },
    { seq: "7", type: "agent_end", usage: "lots" }, { type: "message_update", delta: { x: 1 } }]) {
    applyEvent(st, g);
  }
  assert.ok(true);
});

test("session list: online first, then most recent", () => {
  const list = sortSessions([
    { id: "a", online: false, lastEventAt: 300 },
    { id: "b", online: true, lastEventAt: 100 },
    { id: "c", online: true, lastEventAt: 200 },
    null,
  ]);
  assert.deepEqual(list.map((s) => s.id), ["c", "b", "a"]);
});

test("usage: absent fields stay absent, runs sum their agent_end usage", () => {
  seq = 0;
  const st = createSession(S);
  applyEvents(st, [ev("agent_start"), ev("agent_end", { usage: {} }), ev("agent_settled")]);
  assert.equal(st.items[0].usage, null);
  assert.equal(formatUsage(st.totalUsage), "");
  applyEvents(st, [ev("agent_start"), ev("agent_end", { usage: { inputTokens: 10, outputTokens: 2 } }),
    ev("agent_start"), ev("agent_end", { usage: { inputTokens: 5, outputTokens: 1 } }), ev("agent_settled")]);
  assert.deepEqual(st.items[1].usage, { inputTokens: 15, outputTokens: 3 });
  assert.equal(st.totalUsage.runs, 2);
});

test("formatting helpers", () => {
  assert.equal(relativeTime(Date.now()), "just now");
  assert.equal(relativeTime(Date.now() - 5 * 60000), "5 min ago");
  assert.equal(formatUsage({ inputTokens: 1200, outputTokens: 7, totalCost: 0 }), "1,200 in · 7 out");
});

test("reconnect backoff: exponential with jitter, capped", async () => {
  const { backoffDelay } = await import("../../../lvmh_adapter/web/socket.js");
  assert.equal(backoffDelay(0, 500, 15000, () => 0), 250);
  assert.equal(backoffDelay(0, 500, 15000, () => 1), 500);
  assert.equal(backoffDelay(3, 500, 15000, () => 1), 4000);
  assert.equal(backoffDelay(50, 500, 15000, () => 1), 15000);
  assert.ok(backoffDelay(50, 500, 15000, () => 0) >= 7500);
});

test("file badges", async () => {
  // view.js imports dom.js, which only touches `document` when called
  const { fileBadge, argsSummary } = await import("../../../lvmh_adapter/web/view.js");
  assert.equal(fileBadge("demo.txt", "text/plain"), "TXT");
  assert.equal(fileBadge("archive", "application/zip"), "ZIP");
  assert.equal(fileBadge("x.<b>", "a/<script>"), "SCRI");
  assert.equal(argsSummary({ command: "ls -la\nmore" }), "ls -la");
  assert.equal(argsSummary({ todos: [1, 2] }), "2 items");
});

test("a page reloaded mid-message shows when the message started, as the page that watched it", () => {
  seq = 0;
  const persisted = [ev("agent_start"), ev("message_start", { message: { role: "assistant", id: "a1" } })];
  const start = persisted[1];
  const reloaded = createSession(S);
  applyEvents(reloaded, persisted); // the persisted events a reload fetches
  // the inflight frame carries no time of its own
  applyEvent(reloaded, { type: "inflight", sessionId: S, seq: 4, message: { role: "assistant", id: "a1" }, text: "one two" });
  assert.equal(reloaded.byKey.get("m:a1").ts, start.ts);
  // a page that watched it live: the bubble opened by its first delta carries the same time
  seq = 0;
  const watched = createSession(S);
  applyEvents(watched, [ev("agent_start"), ev("message_start", { message: { role: "assistant", id: "a1" } }),
                        ev("message_update", { delta: "one" })]);
  assert.equal(watched.byKey.get("m:a1").ts, start.ts);
});
