// lvmh-agent: pi coding agent extension that mirrors a pi session to an lvmh daemon
// (agent-bridge's lvmh front end) and lets the daemon prompt and abort it.
//
//   pi -e /path/to/pi_extension            (or -e /path/to/pi_extension/lvmh-agent.mjs)
//
// Environment: LVMH_URL (default ws://127.0.0.1:8686/agent/ws), LVMH_TOKEN (or LVMH_TOKEN_FILE, or
// the local bridge's ~/.agent-bridge/secrets/lvmh_token),
// LVMH_LOG (default ~/.pi/lvmh-agent.log), LVMH_AGENT=1 / LVMH_REPO (daemon-spawned sessions),
// LVMH_DISABLE=1. See README.md next to this file.
//
// The extension never throws into pi and never waits on the network inside an event handler
// (only session_shutdown on quit waits, bounded, so the last events and `bye` get out).
// Node >= 22: uses the built-in WebSocket (no npm dependency); older Node falls back to `ws`.

import { readFileSync, realpathSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, join, resolve as resolvePath } from "node:path";

import { Backoff } from "./lib/backoff.mjs";
import { createLogger, defaultLogPath, fingerprint } from "./lib/log.mjs";
import { MessageIds, head, resultText, tail, usageOf } from "./lib/mapping.mjs";
import { SessionLink, redactUrl } from "./lib/link.mjs";

export const DEFAULT_URL = "ws://127.0.0.1:8686/agent/ws";
const REGISTRY_KEY = Symbol.for("agent-bridge.lvmh-agent.links");

function truthy(v) {
  return /^(1|true|yes|on)$/i.test(String(v ?? "").trim());
}

function intEnv(v, dflt, min, max) {
  const n = Number.parseInt(String(v ?? ""), 10);
  if (!Number.isFinite(n)) return dflt;
  return Math.min(max, Math.max(min, n));
}

/** Settings from the environment. Never contains the token in anything that gets logged. */
export function readConfig(env = process.env) {
  const config = {
    disabled: truthy(env.LVMH_DISABLE),
    url: String(env.LVMH_URL || DEFAULT_URL).trim(),
    token: "",
    tokenSource: "none",
    logPath: defaultLogPath(env),
    agent: truthy(env.LVMH_AGENT),
    repo: env.LVMH_REPO ? String(env.LVMH_REPO) : null,
    backoffBaseMs: intEnv(env.LVMH_BACKOFF_BASE_MS, 500, 10, 30_000),
    backoffMaxMs: intEnv(env.LVMH_BACKOFF_MAX_MS, 30_000, 10, 30_000),
    shutdownWaitMs: intEnv(env.LVMH_SHUTDOWN_WAIT_MS, 1500, 0, 10_000),
    problems: [],
  };
  if (env.LVMH_TOKEN) {
    config.token = String(env.LVMH_TOKEN).trim();
    config.tokenSource = "LVMH_TOKEN";
  } else if (env.LVMH_TOKEN_FILE) {
    try {
      config.token = readFileSync(env.LVMH_TOKEN_FILE, "utf8").trim();
      config.tokenSource = env.LVMH_TOKEN_FILE;
    } catch (err) {
      config.problems.push(`cannot read LVMH_TOKEN_FILE ${env.LVMH_TOKEN_FILE}: ${err.code || err.message}`);
    }
  } else {
    // The token a local `agent-bridge serve` generated (<data-dir>/secrets/lvmh_token), if any.
    const dataDir = env.AGENT_BRIDGE_DATA || join(env.HOME || homedir(), ".agent-bridge");
    const file = join(dataDir, "secrets", "lvmh_token");
    try {
      config.token = readFileSync(file, "utf8").trim();
      config.tokenSource = file;
    } catch {
      /* none: connect without a token (and say so in the log) */
    }
  }
  let parsed = null;
  try {
    parsed = new URL(config.url);
  } catch {
    /* below */
  }
  if (!parsed || (parsed.protocol !== "ws:" && parsed.protocol !== "wss:")) {
    config.problems.push(`LVMH_URL is not a ws:// or wss:// URL (${redactUrl(config.url)}); plugin disabled`);
    config.disabled = true;
  } else if (config.token && parsed.protocol === "ws:" && !isLoopback(parsed.hostname)) {
    config.problems.push(`LVMH_URL is plain ws:// to ${parsed.hostname}: the token travels unencrypted`);
  }
  if (!config.token && !config.disabled) config.problems.push("LVMH_TOKEN is not set; connecting without Authorization");
  return config;
}

function isLoopback(host) {
  return host === "localhost" || host === "[::1]" || host === "::1" || /^127\./.test(host);
}

/** "group/project" from the git remote of cwd (origin first), or null. Best effort, never throws. */
export function repoFromGit(cwd) {
  try {
    let dir = resolvePath(cwd);
    for (let i = 0; i < 64; i++) {
      const dotGit = join(dir, ".git");
      let gitDir = null;
      try {
        const st = statSync(dotGit);
        if (st.isDirectory()) gitDir = dotGit;
        else if (st.isFile()) {
          const m = /^gitdir:\s*(.+)$/m.exec(readFileSync(dotGit, "utf8"));
          if (m) gitDir = resolvePath(dir, m[1].trim());
        }
      } catch {
        /* not here */
      }
      if (gitDir) {
        let configText = null;
        for (const candidate of [join(gitDir, "config"), join(gitDir, "..", "..", "config")]) {
          try {
            configText = readFileSync(candidate, "utf8");
            break;
          } catch {
            /* try the next (worktrees keep config in the main git dir) */
          }
        }
        return configText ? repoFromGitConfig(configText) : null;
      }
      const parent = dirname(dir);
      if (parent === dir) return null;
      dir = parent;
    }
  } catch {
    /* best effort */
  }
  return null;
}

export function repoFromGitConfig(text) {
  const remotes = new Map();
  let current = null;
  for (const raw of text.split(/\r?\n/)) {
    const line = raw.trim();
    const section = /^\[remote\s+"([^"]+)"\]$/.exec(line);
    if (section) {
      current = section[1];
      continue;
    }
    if (line.startsWith("[")) {
      current = null;
      continue;
    }
    const url = /^url\s*=\s*(.+)$/.exec(line);
    if (current && url && !remotes.has(current)) remotes.set(current, url[1].trim());
  }
  const url = remotes.get("origin") ?? remotes.values().next().value;
  return url ? repoFromUrl(url) : null;
}

export function repoFromUrl(url) {
  let path = null;
  const scp = /^[^/@:]+@[^/:]+:(.+)$/.exec(url); // git@host:group/project.git
  if (scp && !url.includes("://")) {
    path = scp[1];
  } else {
    try {
      path = new URL(url).pathname;
    } catch {
      return null;
    }
  }
  path = path.replace(/^\/+/, "").replace(/\/+$/, "").replace(/\.git$/, "");
  return path.includes("/") ? path : null;
}

let cachedWebSocket = null;

/** Node >= 22: global WebSocket. Else `ws`, from next to this file or from pi's own install. */
export async function defaultResolveWebSocket() {
  if (cachedWebSocket) return cachedWebSocket;
  if (typeof globalThis.WebSocket === "function") return (cachedWebSocket = globalThis.WebSocket);
  try {
    const mod = await import("ws");
    cachedWebSocket = mod.WebSocket || mod.default;
    if (cachedWebSocket) return cachedWebSocket;
  } catch {
    /* not next to the extension */
  }
  try {
    const require = createRequire(realpathSync(process.argv[1]));
    cachedWebSocket = require("ws");
    return cachedWebSocket;
  } catch {
    return null;
  }
}

function links(registry) {
  if (registry) return registry;
  if (!globalThis[REGISTRY_KEY]) globalThis[REGISTRY_KEY] = new Map();
  return globalThis[REGISTRY_KEY];
}

/**
 * Wire the extension into `pi`. Returns a small handle for tests.
 * options: env, log, WebSocket (constructor), random, now, cap, handshakeTimeoutMs, drainMs,
 * registry (Map of live links; default: one per process), parkMs.
 */
export function createLvmhAgent(pi, options = {}) {
  const env = options.env ?? process.env;
  const config = readConfig(env);
  const log = options.log ?? createLogger({ path: config.logPath });
  const registry = links(options.registry);
  const resolveWebSocket = options.WebSocket ? async () => options.WebSocket : defaultResolveWebSocket;

  const state = {
    ctx: null, // the latest ExtensionContext from any handler (for abort)
    link: null, // the current session's link
    ids: null,
    session: null,
    announced: false,
  };

  function announce() {
    if (state.announced) return;
    state.announced = true;
    log.info(
      `lvmh-agent: url=${redactUrl(config.url)} token=${fingerprint(config.token)} (from ${config.tokenSource}) ` +
        `agent=${config.agent}` +
        (config.disabled ? " (disabled)" : ""),
    );
    for (const p of config.problems) log.warn(`lvmh-agent: ${p}`);
  }

  function emit(type, payload, opts) {
    const link = state.link;
    if (link) link.emit(type, payload, opts);
  }

  function snapshot(ctx) {
    const sm = ctx?.sessionManager;
    const model = ctx?.model;
    let startedAt = Date.now();
    const headerTs = sm?.getHeader?.()?.timestamp;
    if (headerTs != null) {
      const t = typeof headerTs === "number" ? headerTs : Date.parse(headerTs);
      if (Number.isFinite(t)) startedAt = t;
    }
    const cwd = ctx?.cwd ?? sm?.getCwd?.() ?? process.cwd();
    return {
      id: sm?.getSessionId?.() ?? null,
      name: sm?.getSessionName?.() ?? null,
      cwd,
      model: model?.id ?? null,
      provider: model?.provider ?? null,
      agent: config.agent,
      repo: config.repo ?? repoFromGit(cwd),
      startedAt,
    };
  }

  function sessionChanged(update) {
    if (!state.session || !state.link) return;
    state.session = { ...state.session, ...update };
    state.link.setSession(state.session);
    emit("session_info", { session: state.session });
  }

  function onPrompt(msg) {
    const text = msg.message;
    const promptId = msg.promptId ?? "?";
    if (typeof text !== "string" || text.length === 0) {
      log.warn(`lvmh-agent: prompt ${promptId} without a message, ignored`);
      return;
    }
    log.info(`lvmh-agent: prompt ${promptId} (${text.length} chars) delivered as steer`);
    try {
      const r = pi.sendUserMessage(text, { deliverAs: "steer" });
      if (r && typeof r.then === "function") {
        r.then(undefined, (err) => log.error(`lvmh-agent: sendUserMessage failed for prompt ${promptId}`, err));
      }
    } catch (err) {
      log.error(`lvmh-agent: sendUserMessage failed for prompt ${promptId}`, err);
    }
  }

  function onAbort() {
    const ctx = state.ctx;
    if (!ctx || typeof ctx.abort !== "function") {
      log.warn("lvmh-agent: abort from the daemon, but no session context yet");
      return;
    }
    log.info("lvmh-agent: abort from the daemon");
    try {
      const r = ctx.abort();
      if (r && typeof r.then === "function") r.then(undefined, (err) => log.error("lvmh-agent: abort failed", err));
    } catch (err) {
      log.error("lvmh-agent: abort failed", err);
    }
  }

  function endCurrent(reason) {
    const link = state.link;
    state.link = null;
    state.ids = null;
    state.session = null;
    if (!link) return undefined;
    if (reason === "reload") {
      link.park(options.parkMs ?? 10_000);
      return undefined;
    }
    if (reason === "quit") return link.close({ waitMs: config.shutdownWaitMs, abandon: true });
    link.close({ waitMs: 0 }); // new / resume / fork: deliver in the background
    return undefined;
  }

  function startSession(event, ctx) {
    announce();
    const sessionId = ctx?.sessionManager?.getSessionId?.();
    if (!sessionId) {
      log.warn(`lvmh-agent: session_start (${event.reason}) without a session id, not mirrored`);
      return;
    }
    if (state.link && state.link.sessionId !== sessionId) endCurrent("switch");
    if (config.disabled) return;
    state.ids = new MessageIds();
    state.session = snapshot(ctx);
    let link = registry.get(sessionId);
    const adopted = !!link && link.reopen();
    if (!adopted) {
      link = new SessionLink({
        sessionId,
        url: config.url,
        token: config.token,
        log,
        resolveWebSocket,
        session: state.session,
        backoff: new Backoff({
          baseMs: config.backoffBaseMs,
          maxMs: config.backoffMaxMs,
          random: options.random ?? Math.random,
        }),
        cap: options.cap,
        handshakeTimeoutMs: options.handshakeTimeoutMs,
        drainMs: options.drainMs,
        now: options.now,
        onFinished: (l) => {
          if (registry.get(l.sessionId) === l) registry.delete(l.sessionId);
        },
      });
      registry.set(sessionId, link);
    }
    link.setHandlers({ onPrompt, onAbort });
    link.setSession(state.session);
    state.link = link;
    log.info(`lvmh-agent: session ${sessionId} started (${event.reason ?? "?"})${adopted ? ", link reused" : ""}`);
    if (adopted) emit("session_info", { session: state.session });
    link.start();
  }

  const handlers = {
    session_start: startSession,
    session_shutdown: (event) => endCurrent(event.reason ?? "quit"),
    session_info_changed: (event) => sessionChanged({ name: event.name ?? null }),
    model_select: (event) =>
      sessionChanged({ model: event.model?.id ?? null, provider: event.model?.provider ?? null }),
    agent_start: () => emit("agent_start", {}),
    agent_end: (event) => emit("agent_end", { usage: usageOf(event.messages) }),
    agent_settled: (event) => emit("agent_settled", { aborted: !!event.aborted }),
    message_start: (event) => {
      if (!state.ids) return;
      const message = state.ids.start(event.message);
      if (message) emit("message_start", { message });
    },
    message_update: (event) => {
      const ame = event.assistantMessageEvent;
      if (!ame || ame.type !== "text_delta" || typeof ame.delta !== "string") return;
      if (event.message && event.message.role && event.message.role !== "assistant") return;
      emit("message_update", { delta: ame.delta }, { ephemeral: true });
    },
    message_end: (event) => {
      if (!state.ids) return;
      const message = state.ids.end(event.message);
      if (message) emit("message_end", { message });
    },
    tool_execution_start: (event) => {
      const payload = { toolCallId: event.toolCallId, toolName: event.toolName, args: event.args ?? {} };
      if (event.parentToolCallId) payload.parentToolCallId = event.parentToolCallId;
      emit("tool_execution_start", payload);
    },
    tool_execution_update: (event) => {
      const payload = {
        toolCallId: event.toolCallId,
        toolName: event.toolName,
        partial: tail(resultText(event.partialResult)),
      };
      if (event.parentToolCallId) payload.parentToolCallId = event.parentToolCallId;
      emit("tool_execution_update", payload);
    },
    tool_execution_end: (event) => {
      const payload = {
        toolCallId: event.toolCallId,
        toolName: event.toolName,
        isError: !!event.isError,
        resultPreview: head(resultText(event.result)),
      };
      if (event.parentToolCallId) payload.parentToolCallId = event.parentToolCallId;
      if (typeof event.durationMs === "number") payload.durationMs = event.durationMs;
      emit("tool_execution_end", payload);
    },
  };

  for (const [name, fn] of Object.entries(handlers)) {
    try {
      pi.on(name, (event, ctx) => {
        try {
          if (ctx) state.ctx = ctx;
          const r = fn(event || {}, ctx);
          if (r && typeof r.then === "function") {
            return r.then(
              () => undefined,
              (err) => log.error(`lvmh-agent: ${name} failed`, err),
            );
          }
        } catch (err) {
          log.error(`lvmh-agent: ${name} handler failed`, err);
        }
        return undefined; // never replace pi's data (message_end may return {message})
      });
    } catch (err) {
      log.error(`lvmh-agent: cannot subscribe to ${name}`, err);
    }
  }

  return {
    config,
    log,
    get link() {
      return state.link;
    },
    get session() {
      return state.session;
    },
  };
}

/** pi extension entry point. */
export default function lvmhAgent(pi) {
  try {
    createLvmhAgent(pi);
  } catch (err) {
    try {
      createLogger({ path: defaultLogPath() }).error("lvmh-agent: failed to start", err);
    } catch {
      /* nothing left to do */
    }
  }
}
