import { test } from "node:test";
import assert from "node:assert/strict";
import {
  MessageIds, contentText, messageShape, payloadJson, resultText, safeStringify, usageOf, head, tail, PREVIEW_LIMIT,
} from "../lib/mapping.mjs";

test("content text, thinking, tool calls of an assistant message", () => {
  const m = {
    role: "assistant",
    content: [
      { type: "thinking", thinking: "hmm" },
      { type: "text", text: "A" },
      { type: "toolCall", id: "c1", name: "bash", arguments: { command: "ls" } },
      { type: "text", text: "B" },
    ],
    stopReason: "toolUse",
  };
  assert.deepEqual(messageShape(m, "id1"), {
    role: "assistant", id: "id1", text: "AB", thinking: "hmm",
    toolCalls: [{ id: "c1", name: "bash", argsJson: '{"command":"ls"}' }],
    toolCallId: null, stopReason: "toolUse",
  });
  assert.equal(contentText("plain"), "plain");
  assert.equal(contentText([{ type: "image", data: "x" }]), "");
  assert.equal(contentText(undefined), "");
});

test("tool result, user, extra roles", () => {
  assert.deepEqual(messageShape({ role: "toolResult", toolCallId: "c1", toolName: "bash", isError: false, content: [{ type: "text", text: "ok" }] }, "t"), {
    role: "toolResult", id: "t", text: "ok", thinking: null, toolCalls: [], toolCallId: "c1", toolName: "bash", isError: false,
  });
  assert.equal(messageShape({ role: "user", content: [{ type: "text", text: "hi" }] }, "u").text, "hi");
  const bash = messageShape({ role: "bashExecution", command: "ls", output: "a\n", exitCode: 0 }, "b");
  assert.equal(bash.text, "a\n");
  assert.equal(bash.command, "ls");
  assert.equal(bash.exitCode, 0);
  assert.equal(messageShape({ role: "compactionSummary", summary: "S", tokensBefore: 9 }, "c").text, "S");
  assert.equal(messageShape({ role: "branchSummary", summary: "B", fromId: null }, "c").text, "B");
  assert.equal(messageShape({ role: "custom", customType: "note", content: "N", display: true }, "c").customType, "note");
  assert.equal(messageShape({ role: "weird", text: "W" }, "w").text, "W");
  assert.equal(messageShape(undefined, "x").role, "unknown");
});

test("message ids: invented, stable from start to end across different objects, kept when present", () => {
  let n = 0;
  const ids = new MessageIds(() => `gen${++n}`);
  assert.deepEqual(ids.start({ role: "assistant", content: [] }), { role: "assistant", id: "gen1" });
  // pi 1.6.0: the assistant object at message_end is a different object
  assert.equal(ids.end({ role: "assistant", content: [{ type: "text", text: "x" }] }).id, "gen1");
  assert.equal(ids.end({ role: "user", content: "no start seen" }).id, "gen2");
  assert.deepEqual(ids.start({ role: "user", id: "u-7", content: "x" }), { role: "user", id: "u-7" });
  assert.equal(ids.end({ role: "user", id: "u-7", content: "x" }).id, "u-7");
  // default generator: uuids, unique
  const real = new MessageIds();
  const a = real.start({ role: "user", content: "a" }).id;
  const b = real.start({ role: "user", content: "b" }).id;
  assert.match(a, /^[0-9a-f-]{36}$/);
  assert.notEqual(a, b);
});

test("empty system messages are skipped (start and end), non-empty ones forwarded", () => {
  const ids = new MessageIds(() => "x");
  assert.equal(ids.start({ role: "system", content: "", sections: { preamble: "..." } }), null);
  assert.equal(ids.end({ role: "system", content: "", sections: {} }), null);
  assert.deepEqual(ids.start({ role: "system", content: "Extra instructions" }), { role: "system", id: "x" });
  assert.equal(ids.end({ role: "system", content: "Extra instructions" }).text, "Extra instructions");
});

test("usage summed over assistant messages", () => {
  assert.deepEqual(usageOf([
    { role: "user" },
    { role: "assistant", usage: { input: 42, output: 7, cost: { total: 0.5 } } },
    { role: "assistant", usage: { input: 42, output: 7, cost: { total: 0.25 } } },
  ]), { inputTokens: 84, outputTokens: 14, totalCost: 0.75 });
  assert.deepEqual(usageOf([]), {});
  assert.deepEqual(usageOf(undefined), {});
});

test("previews cut to 2 KB; results text", () => {
  assert.equal(PREVIEW_LIMIT, 2048);
  const long = "a".repeat(3000) + "END";
  assert.equal(head(long).length, 2048);
  assert.ok(tail(long).endsWith("END"));
  assert.equal(tail(long).length, 2048);
  assert.equal(resultText({ content: [{ type: "text", text: "r" }] }), "r");
  assert.equal(resultText("s"), "s");
  assert.equal(resultText(null), "");
  assert.equal(resultText({ other: 1 }), '{"other":1}');
});

test("safeStringify survives cycles, BigInt and huge strings; frames are bounded", () => {
  const o = { n: 1n, f() {} };
  o.self = o;
  assert.equal(safeStringify(o), '{"n":"1","self":"[Circular]"}');
  const big = { toolCallId: "c", args: { content: "x".repeat(3 * 1024 * 1024) } };
  const json = payloadJson(big);
  assert.ok(json.length < 1024 * 1024);
  assert.equal(JSON.parse(json).toolCallId, "c");
  const many = { toolCallId: "c", args: { lines: Array.from({ length: 200_000 }, (_, i) => `line ${i}`) } };
  const j2 = JSON.parse(payloadJson(many));
  assert.equal(j2.toolCallId, "c");
  assert.equal(j2.truncated, true);
});
