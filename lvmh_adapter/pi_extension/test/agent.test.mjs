// The extension against a fake pi and a fake daemon on a real socket.
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:net";

import lvmhAgent, { createLvmhAgent, DEFAULT_URL } from "../lvmh-agent.mjs";
import { fingerprint } from "../lib/log.mjs";
import { startFakeDaemon } from "./helpers/fake-daemon.mjs";
import { FakePi, fakeCtx, sleep, tempLog, typicalRun } from "./helpers/fake-pi.mjs";

const TOKEN = "tok-3b1f9a77-very-secret";

async function until(pred, ms = 3000, what = "condition") {
  const t0 = Date.now();
  for (;;) {
    const v = pred();
    if (v) return v;
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

async function freePort() {
  const srv = createServer();
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

// Whatever a failing test leaves open is closed at the end, so the runner never hangs.
const registries = new Set();
after(() => {
  for (const registry of registries) for (const link of registry.values()) link._finish("test cleanup");
});

function makeAgent({ url, env = {}, registry = new Map(), ...options } = {}) {
  registries.add(registry);
  const log = tempLog();
  const pi = new FakePi();
  const agent = createLvmhAgent(pi, {
    env: {
      LVMH_URL: url,
      LVMH_TOKEN: TOKEN,
      LVMH_LOG: log.path,
      LVMH_BACKOFF_BASE_MS: "20",
      LVMH_BACKOFF_MAX_MS: "100",
      LVMH_SHUTDOWN_WAIT_MS: "1000",
      HOME: log.dir,
      ...env,
    },
    registry,
    ...options,
  });
  return { pi, agent, log, registry };
}

const seqTypes = (frames) => frames.map((f) => [f.seq, f.type]);
const persistedTypes = (d, sid) => d.events(sid).map((f) => [f.seq, f.type]);

// What a typicalRun() produces on the wire: the empty system message is skipped, deltas take
// seqs (5, 13-15) but are not persisted.
const RUN_WIRE = [
  [1, "agent_start"],
  [2, "message_start"],
  [3, "message_end"],
  [4, "message_start"],
  [5, "message_update"],
  [6, "message_end"],
  [7, "tool_execution_start"],
  [8, "tool_execution_update"],
  [9, "tool_execution_end"],
  [10, "message_start"],
  [11, "message_end"],
  [12, "message_start"],
  [13, "message_update"],
  [14, "message_update"],
  [15, "message_update"],
  [16, "message_end"],
  [17, "agent_end"],
  [18, "agent_settled"],
];
const RUN_PERSISTED = RUN_WIRE.filter(([, t]) => t !== "message_update");

async function quit(pi, ctx, d) {
  await pi.emit("session_shutdown", { reason: "quit" }, ctx);
  if (d) await d.close();
}

test("hello -> welcome -> a run's events, seq from 1, exact frames", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url });
  const sid = "01a22693-a4c3-719c-aaaa-000000000001";
  const ctx = fakeCtx({ sessionId: sid });
  assert.deepEqual(pi.fire("session_start", { reason: "startup" }, ctx), [undefined]);
  await until(() => agent.link?.ready, 3000, "welcome");

  const hello = d.frames[0];
  assert.equal(d.lastConn.headers.authorization, `Bearer ${TOKEN}`);
  assert.equal(typeof hello.ts, "number");
  assert.deepEqual({ ...hello, ts: 0 }, {
    v: 1, type: "hello", sessionId: sid, seq: 0, ts: 0,
    session: {
      id: sid, name: null, cwd: "/work/project", model: "fake-model", provider: "fake",
      agent: false, repo: null, startedAt: Date.parse("2026-11-29T10:00:00.000Z"),
    },
  });

  const results = typicalRun(pi, ctx);
  assert.ok(results.every((r) => r === undefined), "handlers return nothing (message_end must not replace)");
  await d.waitFor(() => d.frames.some((f) => f.type === "agent_settled"), 3000, "agent_settled");

  const events = d.frames.slice(1);
  assert.deepEqual(seqTypes(events), RUN_WIRE);
  for (const f of events) {
    assert.equal(f.v, 1);
    assert.equal(f.sessionId, sid);
    assert.equal(typeof f.ts, "number");
  }
  const strip = ({ v, sessionId, seq, ts, type, ...payload }) => payload;
  const bySeq = Object.fromEntries(events.map((f) => [f.seq, strip(f)]));
  assert.deepEqual(bySeq[1], {});
  assert.deepEqual(bySeq[2], { message: { role: "user", id: bySeq[3].message.id } });
  assert.deepEqual(bySeq[3].message, {
    role: "user", id: bySeq[2].message.id, text: "Please run echo", thinking: null, toolCalls: [], toolCallId: null,
  });
  assert.deepEqual(bySeq[5], { delta: "Let me run a command." });
  assert.deepEqual(bySeq[6].message, {
    role: "assistant", id: bySeq[4].message.id, text: "Let me run a command.", thinking: null,
    toolCalls: [{ id: "call_fake_1", name: "bash", argsJson: '{"command":"echo hello-from-tool"}' }],
    toolCallId: null, stopReason: "toolUse",
  });
  assert.deepEqual(bySeq[7], { toolCallId: "call_fake_1", toolName: "bash", args: { command: "echo hello-from-tool" } });
  assert.deepEqual(bySeq[8], { toolCallId: "call_fake_1", toolName: "bash", partial: "hello-from-tool\n" });
  assert.deepEqual(bySeq[9], { toolCallId: "call_fake_1", toolName: "bash", isError: false, resultPreview: "hello-from-tool\n" });
  assert.deepEqual(bySeq[11].message, {
    role: "toolResult", id: bySeq[10].message.id, text: "hello-from-tool\n", thinking: null, toolCalls: [],
    toolCallId: "call_fake_1", toolName: "bash", isError: false,
  });
  assert.equal(bySeq[16].message.text, "The tool said hello. Done.");
  assert.equal(bySeq[16].message.id, bySeq[12].message.id);
  assert.notEqual(bySeq[12].message.id, bySeq[4].message.id);
  assert.deepEqual(bySeq[17], { usage: { inputTokens: 84, outputTokens: 14, totalCost: 0.002 } });
  assert.deepEqual(bySeq[18], { aborted: false });
  assert.deepEqual(persistedTypes(d, sid), RUN_PERSISTED);

  await quit(pi, ctx, d);
});

test("daemon down at startup: pi unaffected, events buffered, replayed when the daemon comes up", async () => {
  const port = await freePort();
  const url = `ws://127.0.0.1:${port}/agent/ws`;
  const { pi, agent, log } = makeAgent({ url });
  const sid = "sess-down-at-start";
  const ctx = fakeCtx({ sessionId: sid });
  const t0 = performance.now();
  const results = [...pi.fire("session_start", { reason: "startup" }, ctx), ...typicalRun(pi, ctx)];
  const elapsed = performance.now() - t0;
  assert.ok(results.every((r) => r === undefined), "no handler returns a promise to wait on");
  assert.ok(elapsed < 250, `handlers took ${elapsed} ms with the daemon down`);
  await until(() => agent.link._failures >= 2, 3000, "failed attempts");
  assert.match(log.read(), /cannot reach ws:\/\/127\.0\.0\.1:\d+\/agent\/ws/);
  assert.equal(agent.link.buffer.size, RUN_PERSISTED.length);

  const d = await startFakeDaemon({ token: TOKEN, port });
  await d.waitFor(() => d.events(sid).some((f) => f.type === "agent_settled"), 3000, "replay");
  assert.equal(d.frames[0].type, "hello");
  // message_update deltas are not buffered: only the persisted kinds are replayed, in order
  assert.deepEqual(seqTypes(d.frames.slice(1)), RUN_PERSISTED);
  assert.match(log.read(), /connected to .* lastSeq=0, replaying 14/);
  await quit(pi, ctx, d);
});

test("reconnect replays exactly the events after welcome.lastSeq", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url });
  const sid = "sess-replay";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => agent.link?.ready);
  typicalRun(pi, ctx);
  await d.waitFor(() => d.lastSeq(sid) === 18, 3000, "run persisted");

  // Drop the connection; refuse reconnects while more events happen.
  d.rejectAll = true;
  d.killAll();
  await until(() => !agent.link.ready, 3000, "disconnect noticed");
  pi.fire("agent_start", {}, ctx);
  pi.fire("message_start", { message: { role: "user", content: "more" } }, ctx);
  pi.fire("message_end", { message: { role: "user", content: "more" } }, ctx);
  await until(() => d.rejected.length >= 1, 3000, "refused reconnect");
  d.rejectAll = false;
  await d.waitFor(() => d.lastSeq(sid) === 21, 3000, "new events");
  const second = d.conns[1];
  assert.deepEqual(seqTypes(second.frames), [[0, "hello"], [19, "agent_start"], [20, "message_start"], [21, "message_end"]]);

  // The daemon persisted only part of what was sent (say up to 19): the plugin resends 20, 21.
  d.lastSeqOverride = () => 19;
  d.killAll();
  await d.waitFor(() => d.conns.length === 3 && d.conns[2].frames.length >= 3, 3000, "resend from 20");
  assert.deepEqual(d.conns[2].frames.map((f) => f.seq), [0, 20, 21]);
  await quit(pi, ctx, d);
});

test("buffer cap 10,000: oldest dropped, buffer_overflow notice after the replay", async () => {
  const port = await freePort();
  const { pi, agent, log } = makeAgent({ url: `ws://127.0.0.1:${port}/agent/ws` });
  const sid = "sess-overflow";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  for (let i = 0; i < 10_005; i++) {
    pi.fire("tool_execution_update", { toolCallId: "c", toolName: "bash", partialResult: { content: [{ type: "text", text: `${i}` }] } }, ctx);
  }
  assert.equal(agent.link.buffer.size, 10_000);
  const d = await startFakeDaemon({ token: TOKEN, port });
  await d.waitFor(() => d.frames.some((f) => f.type === "buffer_overflow"), 5000, "overflow notice");
  // The buffer holds 10,000 entries, the notice included: one more old event makes room for it.
  const seqs = d.frames.slice(1).map((f) => f.seq);
  assert.equal(seqs.length, 10_000);
  assert.equal(seqs[0], 7);
  assert.equal(seqs[9_998], 10_005);
  assert.equal(d.frames[1].partial, "6");
  const notice = d.frames[d.frames.length - 1];
  assert.deepEqual({ ...notice, ts: 0 }, {
    v: 1, sessionId: sid, seq: 10_006, ts: 0, type: "buffer_overflow", dropped: 6, fromSeq: 1, toSeq: 6,
  });
  assert.match(log.read(), /buffer full, 6 events dropped \(seq 1\.\.6\)/);
  // once reported, not again
  pi.fire("agent_start", {}, ctx);
  await d.waitFor(() => d.lastSeq(sid) === 10_007, 3000);
  assert.equal(d.frames.filter((f) => f.type === "buffer_overflow").length, 1);
  await quit(pi, ctx, d);
});

test("reconnects forever with capped backoff; refused upgrades (401) do not stop it", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  d.rejectAll = true;
  const { pi, agent } = makeAgent({ url: d.url });
  const ctx = fakeCtx({ sessionId: "sess-backoff" });
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => d.rejected.length >= 6, 5000, "6 refused attempts");
  assert.ok(d.rejected.every((r) => r.authorization === `Bearer ${TOKEN}`));
  assert.ok(agent.link.backoff.attempt >= 5, "each refusal advanced the backoff");
  assert.equal(agent.link.backoff.ceiling(), 100); // LVMH_BACKOFF_MAX_MS in this test
  d.rejectAll = false;
  await until(() => agent.link.ready, 3000, "connected at last");
  assert.equal(agent.link.backoff.attempt, 0, "backoff reset after welcome");
  await quit(pi, ctx, d);
});

test("backoff cap can never exceed 30 s, default base 500 ms", () => {
  const { agent } = makeAgent({ url: DEFAULT_URL, env: { LVMH_BACKOFF_BASE_MS: "", LVMH_BACKOFF_MAX_MS: "600000" } });
  assert.equal(agent.config.backoffMaxMs, 30_000);
  assert.equal(agent.config.backoffBaseMs, 500);
});

test("a daemon that never welcomes is dropped after the handshake timeout and retried", async () => {
  const d = await startFakeDaemon({ token: TOKEN, autoWelcome: false });
  const { pi, agent } = makeAgent({ url: d.url, handshakeTimeoutMs: 100 });
  const ctx = fakeCtx({ sessionId: "sess-nowelcome" });
  pi.fire("session_start", { reason: "startup" }, ctx);
  pi.fire("agent_start", {}, ctx);
  await until(() => d.conns.length >= 2, 3000, "second attempt");
  assert.ok(d.frames.every((f) => f.type === "hello"), "no event sent before welcome");
  d.autoWelcome = true;
  await d.waitFor(() => d.events("sess-nowelcome").length === 1, 3000, "event after welcome");
  assert.ok(agent.link.ready);
  await quit(pi, ctx, d);
});

test("errors are caught and logged, never thrown into pi; the token never reaches the log", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent, log } = makeAgent({ url: d.url });
  const sid = "sess-errors";
  const ctx = fakeCtx({ sessionId: sid });
  // events before any session: ignored
  assert.deepEqual(pi.fire("agent_start", {}, ctx), [undefined]);
  assert.deepEqual(pi.fire("session_info_changed", { name: "x" }, ctx), [undefined]);
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => agent.link?.ready);

  // odd payloads from pi
  const circular = { content: [{ type: "text", text: "r" }] };
  circular.self = circular;
  const odd = [
    ["message_start", { message: null }],
    ["message_end", { message: undefined }],
    ["message_update", {}],
    ["message_update", { message: { role: "user" }, assistantMessageEvent: { type: "text_delta", delta: "x" } }],
    ["tool_execution_end", { toolCallId: "c", toolName: "t", result: circular, isError: true }],
    ["tool_execution_start", { toolCallId: "c", toolName: "t", args: { big: 10n } }],
    ["agent_end", { messages: "not an array" }],
  ];
  for (const [name, ev] of odd) assert.deepEqual(pi.fire(name, ev, ctx), [undefined], name);
  const throwingCtx = { ...ctx, sessionManager: { getSessionId: () => { throw new Error("sm broken"); } } };
  assert.deepEqual(pi.fire("session_start", { reason: "new" }, throwingCtx), [undefined]);
  assert.match(log.read(), /session_start handler failed .*sm broken/s);

  // sendUserMessage throwing, or rejecting
  pi.sendUserMessageImpl = () => { throw new Error("pi refused"); };
  d.lastConn.send({ v: 1, type: "prompt", sessionId: sid, seq: 0, ts: Date.now(), promptId: "p1", message: "hi" });
  await until(() => /sendUserMessage failed for prompt p1.*pi refused/s.test(log.read()), 3000, "logged throw");
  pi.sendUserMessageImpl = () => Promise.reject(new Error("async refusal"));
  d.lastConn.send({ v: 1, type: "prompt", sessionId: sid, seq: 0, ts: Date.now(), promptId: "p2", message: "hi" });
  await until(() => /prompt p2.*async refusal/s.test(log.read()), 3000, "logged rejection");

  // junk from the daemon
  d.lastConn.send("this is not json");
  d.lastConn.send("[1,2]");
  d.lastConn.send({ type: "welcome-ish", sessionId: sid });
  d.lastConn.send({ type: "error", code: "bad_request", error: "no such thing", sessionId: sid, refSeq: 4 });
  await until(() => /daemon error "bad_request": "no such thing" \(seq 4\)/.test(log.read()), 3000, "error frame logged");
  await until(() => /not JSON/.test(log.read()), 3000, "junk logged");
  assert.ok(agent.link.ready, "still connected");
  pi.fire("agent_settled", { aborted: false }, ctx);
  await d.waitFor(() => d.events(sid).some((f) => f.type === "agent_settled"), 3000, "still mirroring");
  const endFrame = d.events(sid).find((f) => f.type === "tool_execution_end");
  assert.equal(endFrame.resultPreview, "r");
  assert.equal(d.events(sid).find((f) => f.type === "tool_execution_start").args.big, "10");

  const text = log.read();
  assert.ok(!text.includes(TOKEN), "token must not be logged");
  assert.ok(text.includes(fingerprint(TOKEN)), "fingerprint is logged");
  await quit(pi, ctx, d);
});

test("session switches (/new, /fork, /resume): new sessionId, own seq from 1, bye for the old one", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url });
  const A = "sess-A";
  const B = "sess-B";
  const C = "sess-C";
  const ctxA = fakeCtx({ sessionId: A });
  pi.fire("session_start", { reason: "startup" }, ctxA);
  await until(() => agent.link?.ready);
  pi.fire("agent_start", {}, ctxA);
  pi.fire("agent_settled", { aborted: false }, ctxA);
  await d.waitFor(() => d.lastSeq(A) === 2);

  // /new: shutdown(new) then start(new) with another id, in the same process
  const ctxB = fakeCtx({ sessionId: B });
  assert.deepEqual(await pi.emit("session_shutdown", { reason: "new" }, ctxA), [undefined]);
  pi.fire("session_start", { reason: "new", previousSessionFile: "/s/a.jsonl" }, ctxB);
  pi.fire("agent_start", {}, ctxB);
  await d.waitFor(() => d.lastSeq(B) === 1 && d.lastSeq(A) === 3, 3000, "B started, A said bye");
  assert.deepEqual(persistedTypes(d, A), [[1, "agent_start"], [2, "agent_settled"], [3, "bye"]]);
  assert.equal(d.events(A)[2].reason, "shutdown");
  assert.deepEqual(persistedTypes(d, B), [[1, "agent_start"]]);
  await until(() => d.conns[0].closed, 3000, "A's socket closed after bye");
  assert.equal(agent.link.sessionId, B);

  // /fork: C, from 1 again
  await pi.emit("session_shutdown", { reason: "fork" }, ctxB);
  const ctxC = fakeCtx({ sessionId: C });
  pi.fire("session_start", { reason: "fork" }, ctxC);
  pi.fire("agent_start", {}, ctxC);
  await d.waitFor(() => d.lastSeq(C) === 1 && d.lastSeq(B) === 2, 3000, "C started");
  assert.deepEqual(d.frames.filter((f) => f.type === "hello").map((f) => f.sessionId), [A, B, C]);

  // /resume back to A: the daemon has A up to seq 3, so A's new events follow it
  await pi.emit("session_shutdown", { reason: "resume" }, ctxC);
  pi.fire("session_start", { reason: "resume" }, ctxA);
  pi.fire("agent_start", {}, ctxA);
  await d.waitFor(() => d.lastSeq(A) === 4, 3000, "A resumed at seq 4");
  assert.deepEqual(persistedTypes(d, A), [[1, "agent_start"], [2, "agent_settled"], [3, "bye"], [4, "agent_start"]]);
  await quit(pi, ctxA, d);
});

test("a resumed session started while the daemon is down renumbers after welcome.lastSeq", async () => {
  const port = await freePort();
  const { pi, agent } = makeAgent({ url: `ws://127.0.0.1:${port}/agent/ws` });
  const sid = "sess-known";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  pi.fire("agent_start", {}, ctx);
  pi.fire("message_update", { message: { role: "assistant" }, assistantMessageEvent: { type: "text_delta", delta: "x" } }, ctx);
  pi.fire("agent_settled", { aborted: false }, ctx);
  assert.deepEqual(agent.link.buffer.entries().map((e) => e.seq), [1, 3]);
  const d = await startFakeDaemon({ token: TOKEN, port });
  d.lastSeqOverride = (s) => (s === sid && d.events(sid).length === 0 ? 40 : undefined);
  await d.waitFor(() => d.events(sid).length === 2, 3000, "renumbered events");
  assert.deepEqual(persistedTypes(d, sid), [[41, "agent_start"], [43, "agent_settled"]]);
  pi.fire("agent_start", {}, ctx);
  await d.waitFor(() => d.lastSeq(sid) === 44, 3000, "continues at 44");
  await quit(pi, ctx, d);
});

test("prompt -> pi.sendUserMessage(message, {deliverAs: 'steer'}); abort -> ctx.abort()", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent, log } = makeAgent({ url: d.url });
  const sid = "sess-prompt";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => agent.link?.ready);
  const conn = d.lastConn;
  conn.send({ v: 1, type: "prompt", sessionId: sid, seq: 0, ts: Date.now(), promptId: "p1", message: "hello from the web" });
  await until(() => pi.sent.length === 1, 3000, "prompt delivered");
  assert.deepEqual(pi.sent[0], { content: "hello from the web", options: { deliverAs: "steer" } });

  conn.send({ v: 1, type: "prompt", sessionId: "someone-else", promptId: "p2", message: "not for us" });
  conn.send({ v: 1, type: "prompt", sessionId: sid, promptId: "p3" });
  conn.send({ v: 1, type: "prompt", promptId: "p4", message: "no sessionId is fine" });
  await until(() => pi.sent.length === 2, 3000, "p4");
  assert.equal(pi.sent[1].content, "no sessionId is fine");
  assert.match(log.read(), /prompt p3 without a message/);
  assert.match(log.read(), /ignoring prompt for another session/);

  const aborter = fakeCtx({ sessionId: sid });
  pi.fire("turn_start", {}, aborter); // not subscribed: fine
  pi.fire("agent_start", {}, aborter); // the latest ctx is the one used for abort
  conn.send({ v: 1, type: "abort", sessionId: sid, seq: 0, ts: Date.now() });
  await until(() => aborter.aborts === 1, 3000, "abort");
  assert.equal(ctx.aborts, 0);
  // no reply frames for prompt/abort
  assert.deepEqual(conn.frames.map((f) => f.type), ["hello", "agent_start"]);
  await quit(pi, ctx, d);
});

test("quit: bye delivered before session_shutdown resolves; daemon down: resolves at once", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url });
  const sid = "sess-quit";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  // pi -p: the run starts before the handshake has finished
  typicalRun(pi, ctx);
  await pi.emit("session_shutdown", { reason: "quit" }, ctx);
  // Resolved once everything was handed to the socket; the daemon reads it a moment later.
  assert.equal(agent.link, null);
  await d.waitFor(() => d.lastSeq(sid) === 19, 3000, "bye");
  assert.deepEqual(persistedTypes(d, sid), [...RUN_PERSISTED, [19, "bye"]]);
  await until(() => d.conns[0].closed, 3000, "socket closed");
  await d.close();

  const port = await freePort();
  const down = makeAgent({ url: `ws://127.0.0.1:${port}/agent/ws` });
  const ctx2 = fakeCtx({ sessionId: "sess-quit-down" });
  down.pi.fire("session_start", { reason: "startup" }, ctx2);
  typicalRun(down.pi, ctx2);
  await until(() => down.agent.link._failures >= 1);
  const t0 = performance.now();
  await down.pi.emit("session_shutdown", { reason: "quit" }, ctx2);
  assert.ok(performance.now() - t0 < 100, "quit must not wait for an unreachable daemon");
  assert.equal(down.registry.size, 0);
  assert.match(down.log.read(), /events not delivered/);

  // A daemon that accepts TCP but never answers: quit waits at most LVMH_SHUTDOWN_WAIT_MS.
  const sockets = [];
  const black = createServer((s) => sockets.push(s));
  await new Promise((r) => black.listen(0, "127.0.0.1", r));
  black.unref();
  const hung = makeAgent({ url: `ws://127.0.0.1:${black.address().port}/agent/ws`, env: { LVMH_SHUTDOWN_WAIT_MS: "200" } });
  const ctx3 = fakeCtx({ sessionId: "sess-hung" });
  hung.pi.fire("session_start", { reason: "startup" }, ctx3);
  await until(() => sockets.length === 1);
  const t1 = performance.now();
  await hung.pi.emit("session_shutdown", { reason: "quit" }, ctx3);
  const waited = performance.now() - t1;
  assert.ok(waited >= 150 && waited < 1000, `waited ${waited} ms`);
  for (const s of sockets) s.destroy();
  await new Promise((r) => black.close(r));
});

test("reload keeps the connection: no bye, the reloaded extension continues the seq", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const registry = new Map();
  const first = makeAgent({ url: d.url, registry });
  const sid = "sess-reload";
  const ctx = fakeCtx({ sessionId: sid });
  first.pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => first.agent.link?.ready);
  first.pi.fire("agent_start", {}, ctx);
  await first.pi.emit("session_shutdown", { reason: "reload" }, ctx);
  // pi re-runs the extension factory on /reload
  const second = makeAgent({ url: d.url, registry });
  const ctx2 = fakeCtx({ sessionId: sid, model: { id: "other-model", provider: "fake" } });
  second.pi.fire("session_start", { reason: "reload" }, ctx2);
  second.pi.fire("agent_settled", { aborted: false }, ctx2);
  await d.waitFor(() => d.lastSeq(sid) === 3, 3000, "seq continues");
  assert.deepEqual(persistedTypes(d, sid), [[1, "agent_start"], [2, "session_info"], [3, "agent_settled"]]);
  assert.equal(d.events(sid)[1].session.model, "other-model");
  assert.equal(d.conns.length, 1, "same connection");
  // prompts now reach the reloaded extension's pi
  d.lastConn.send({ type: "prompt", sessionId: sid, promptId: "p", message: "after reload" });
  await until(() => second.pi.sent.length === 1);
  assert.equal(first.pi.sent.length, 0);
  await quit(second.pi, ctx2, d);
});

test("session_info on rename and model change; the next hello carries the new snapshot", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url, env: { LVMH_AGENT: "1", LVMH_REPO: "group/project" } });
  const sid = "sess-info";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => agent.link?.ready);
  assert.equal(d.frames[0].session.agent, true);
  assert.equal(d.frames[0].session.repo, "group/project");
  pi.fire("session_info_changed", { name: "Fix the bug" }, ctx);
  pi.fire("model_select", { model: { id: "glm-5.3", provider: "zai-renaud" }, previousModel: ctx.model, source: "set" }, ctx);
  await d.waitFor(() => d.lastSeq(sid) === 2);
  const [rename, model] = d.events(sid);
  assert.equal(rename.type, "session_info");
  assert.equal(rename.session.name, "Fix the bug");
  assert.equal(model.session.model, "glm-5.3");
  assert.equal(model.session.provider, "zai-renaud");
  assert.equal(model.session.name, "Fix the bug");
  d.killAll();
  await d.waitFor(() => d.conns.length === 2 && d.conns[1].frames.length >= 1, 3000, "re-hello");
  assert.deepEqual(d.conns[1].frames[0].session, model.session);
  await quit(pi, ctx, d);
});

test("extra roles and system messages on the wire; oversized tool args are bounded", async () => {
  const d = await startFakeDaemon({ token: TOKEN });
  const { pi, agent } = makeAgent({ url: d.url });
  const sid = "sess-roles";
  const ctx = fakeCtx({ sessionId: sid });
  pi.fire("session_start", { reason: "startup" }, ctx);
  await until(() => agent.link?.ready);
  const msgs = [
    { role: "system", content: "", sections: { preamble: "big system prompt" } },
    { role: "system", content: [{ type: "text", text: "Now also be brief." }] },
    { role: "bashExecution", command: "ls", output: "a\nb\n", exitCode: 0, cancelled: false, truncated: false },
    { role: "custom", customType: "note", content: "custom text", display: true },
    { role: "compactionSummary", summary: "earlier stuff", tokensBefore: 1000 },
    { role: "futureRole", content: [{ type: "text", text: "?" }] },
  ];
  for (const m of msgs) {
    pi.fire("message_start", { message: m }, ctx);
    pi.fire("message_end", { message: m }, ctx);
  }
  pi.fire("tool_execution_start", { toolCallId: "w", toolName: "write", args: { path: "f", content: "x".repeat(3 * 1024 * 1024) } }, ctx);
  await d.waitFor(() => d.events(sid).some((f) => f.type === "tool_execution_start"), 5000);
  const ends = d.events(sid).filter((f) => f.type === "message_end").map((f) => [f.message.role, f.message.text]);
  assert.deepEqual(ends, [
    ["system", "Now also be brief."],
    ["bashExecution", "a\nb\n"],
    ["custom", "custom text"],
    ["compactionSummary", "earlier stuff"],
    ["futureRole", "?"],
  ]);
  assert.equal(d.events(sid).filter((f) => f.type === "message_start").length, 5);
  const big = d.events(sid).find((f) => f.type === "tool_execution_start");
  assert.equal(big.toolCallId, "w");
  assert.ok(JSON.stringify(big).length < 1024 * 1024);
  assert.match(big.args.content, /truncated/);
  await quit(pi, ctx, d);
});

test("default export registers on pi without opening anything; LVMH_DISABLE keeps it silent", async () => {
  const saved = { ...process.env };
  const log = tempLog();
  process.env.LVMH_DISABLE = "1";
  process.env.LVMH_LOG = log.path;
  try {
    const pi = new FakePi();
    lvmhAgent(pi);
    for (const name of ["session_start", "session_shutdown", "agent_start", "agent_end", "agent_settled", "message_start",
      "message_update", "message_end", "tool_execution_start", "tool_execution_update", "tool_execution_end",
      "session_info_changed", "model_select"]) {
      assert.equal(pi.handlers.get(name)?.length, 1, name);
    }
    pi.fire("session_start", { reason: "startup" }, fakeCtx({ sessionId: "sess-disabled" }));
    pi.fire("agent_start", {}, fakeCtx());
    assert.deepEqual(await pi.emit("session_shutdown", { reason: "quit" }, fakeCtx()), [undefined]);
    assert.match(log.read(), /\(disabled\)/);
  } finally {
    process.env = saved;
  }
});
