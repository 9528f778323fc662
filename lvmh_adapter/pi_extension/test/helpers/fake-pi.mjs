// A stand-in for pi's ExtensionAPI and ExtensionContext, shaped after pi 1.6.0
// (dist/core/extensions/types.d.ts) and the event sequence observed from a real pi run
// (recorded from pi 1.6.0 in a worker container).

import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export class FakePi {
  constructor() {
    this.handlers = new Map();
    this.sent = []; // sendUserMessage calls
    this.sendUserMessageImpl = null;
  }

  on(name, fn) {
    if (!this.handlers.has(name)) this.handlers.set(name, []);
    this.handlers.get(name).push(fn);
    return () => {};
  }

  sendUserMessage(content, options) {
    this.sent.push({ content, options });
    if (this.sendUserMessageImpl) return this.sendUserMessageImpl(content, options);
    return undefined;
  }

  /** Like pi's runner: calls every handler, returns their raw results (not awaited). */
  fire(name, event = {}, ctx = undefined) {
    const results = [];
    for (const fn of this.handlers.get(name) || []) results.push(fn({ type: name, ...event }, ctx));
    return results;
  }

  /** Like pi's runner.emit: awaits each handler in turn. */
  async emit(name, event = {}, ctx = undefined) {
    const results = [];
    for (const fn of this.handlers.get(name) || []) results.push(await fn({ type: name, ...event }, ctx));
    return results;
  }
}

export function fakeCtx({
  sessionId = "01a22693-a4c3-719c-0000-000000000001",
  name = undefined,
  cwd = "/work/project",
  model = { id: "fake-model", provider: "fake" },
  startedAt = "2026-11-29T10:00:00.000Z",
} = {}) {
  const ctx = {
    cwd,
    model,
    aborts: 0,
    sessionManager: {
      getSessionId: () => sessionId,
      getSessionName: () => name,
      getCwd: () => cwd,
      getHeader: () => ({ type: "session", id: sessionId, timestamp: startedAt, cwd }),
    },
    isIdle: () => true,
    hasPendingMessages: () => false,
    abort() {
      ctx.aborts += 1;
    },
  };
  return ctx;
}

/**
 * One settled run as real pi 1.6.0 emits it: system message, user message, assistant with a
 * bash tool call, tool execution, tool result, final assistant answer.
 */
export function typicalRun(pi, ctx, { prompt = "Please run echo", withSystem = true } = {}) {
  const out = [];
  const f = (name, ev) => out.push(...pi.fire(name, ev, ctx));
  f("agent_start", {});
  if (withSystem) {
    const sys = { role: "system", content: "", sections: { preamble: "You are pi" } };
    f("message_start", { message: sys });
    f("message_end", { message: sys });
  }
  const user = { role: "user", content: prompt, timestamp: 1 };
  f("message_start", { message: user });
  f("message_end", { message: user });
  const a1start = { role: "assistant", content: [] };
  f("message_start", { message: a1start });
  f("message_update", { message: a1start, assistantMessageEvent: { type: "text_delta", delta: "Let me run a command." } });
  f("message_update", { message: a1start, assistantMessageEvent: { type: "toolcall_delta", delta: "{\"comm" } });
  const a1 = {
    role: "assistant",
    content: [
      { type: "text", text: "Let me run a command." },
      { type: "toolCall", id: "call_fake_1", name: "bash", arguments: { command: "echo hello-from-tool" } },
    ],
    usage: { input: 42, output: 7, cost: { total: 0.001 } },
    stopReason: "toolUse",
  };
  f("message_end", { message: a1 });
  f("tool_execution_start", { toolCallId: "call_fake_1", toolName: "bash", args: { command: "echo hello-from-tool" } });
  f("tool_execution_update", { toolCallId: "call_fake_1", toolName: "bash", args: {}, partialResult: { content: [{ type: "text", text: "hello-from-tool\n" }] } });
  f("tool_execution_end", { toolCallId: "call_fake_1", toolName: "bash", result: { content: [{ type: "text", text: "hello-from-tool\n" }] }, isError: false });
  const tr = { role: "toolResult", toolCallId: "call_fake_1", toolName: "bash", content: [{ type: "text", text: "hello-from-tool\n" }], isError: false };
  f("message_start", { message: tr });
  f("message_end", { message: tr });
  const a2start = { role: "assistant", content: [] };
  f("message_start", { message: a2start });
  for (const d of ["The tool ", "said hello. ", "Done."]) {
    f("message_update", { message: a2start, assistantMessageEvent: { type: "text_delta", delta: d } });
  }
  const a2 = { role: "assistant", content: [{ type: "text", text: "The tool said hello. Done." }], usage: { input: 42, output: 7, cost: { total: 0.001 } }, stopReason: "stop" };
  f("message_end", { message: a2 });
  f("agent_end", { messages: [user, a1, tr, a2] });
  f("agent_settled", { aborted: false });
  return out;
}

export function tempLog() {
  const dir = mkdtempSync(join(tmpdir(), "lvmh-agent-test-"));
  const path = join(dir, "lvmh-agent.log");
  return {
    path,
    dir,
    read() {
      try {
        return readFileSync(path, "utf8");
      } catch {
        return "";
      }
    },
  };
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
