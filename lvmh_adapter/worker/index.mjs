// lvmh worker: the process a daemon-spawned container runs (`node /bridge/index.mjs`,
// the lvmh protocol "POST /api/spawn" step 3).
//
// A headless pi session (the SDK's session runtime: createAgentSessionRuntime ->
// createAgentSessionServices + createAgentSessionFromServices) with the lvmh extension loaded. The
// extension dials the daemon (LVMH_URL, LVMH_TOKEN) on session_start: its `hello` (agent: true,
// repo from LVMH_REPO) registers the session, and the daemon's `prompt` / `abort` frames drive it.
// The process stays up waiting for prompts until SIGTERM/SIGINT (docker stop), which ends the
// session the way pi's own CLI does on quit (session_shutdown -> the extension's `bye`).
//
// Environment (spawn.py sets the first five):
//   LVMH_URL, LVMH_TOKEN     the daemon's /agent/ws and this worker's own credential for it (read by
//                            the extension; valid for this session's /agent/ws only)
//   LVMH_SESSION_ID          the pi session id, chosen by the daemon before the container starts
//                            (SessionManager.create(cwd, dir, {id})); an existing session file with
//                            that id in the session dir is resumed instead (container restarted)
//   LVMH_REPO                group/project, sent as session.repo
//   LVMH_AGENT               defaults to 1 here: session.agent = true
//   LVMH_WORKSPACE           the working directory (default /workspace, the repo volume)
//   PI_CODING_AGENT_SESSION_DIR  where pi keeps session files (default /pi-sessions, a volume)
//   PI_CODING_AGENT_DIR      pi's agent dir with models.json / auth.json / settings.json
//                            (default ~/.pi/agent; spawn.py mounts models.json at /root/.pi/agent/)
//   LVMH_MODEL               provider/model-id to use (default: pi's settings, else the first
//                            model with credentials, as pi itself chooses)
//   LVMH_EXTENSION           the lvmh extension (default: ./pi_extension next to this file)
//   LVMH_TRUST_PROJECT       1: trust the workspace's .pi/ settings (default: not trusted)
//
// Only the lvmh extension is loaded (no extension discovery); skills, prompt templates and context
// files (AGENTS.md) load as usual. Log lines go to stdout/stderr (the container log); the token
// is never printed.

import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import {
  createAgentSessionFromServices,
  createAgentSessionRuntime,
  createAgentSessionServices,
  getAgentDir,
  SessionManager,
  SettingsManager,
} from "@earendil-works/pi-coding-agent";

const here = dirname(fileURLToPath(import.meta.url));
const env = process.env;

if (env.LVMH_AGENT === undefined) env.LVMH_AGENT = "1"; // read by the extension when it loads

const cwd = resolve(env.LVMH_WORKSPACE || "/workspace");
const agentDir = env.PI_CODING_AGENT_DIR ? resolve(env.PI_CODING_AGENT_DIR) : getAgentDir();
const sessionDir = resolve(env.PI_CODING_AGENT_SESSION_DIR || "/pi-sessions");
const sessionId = (env.LVMH_SESSION_ID || "").trim() || undefined;
const extension = resolve(env.LVMH_EXTENSION || join(here, "pi_extension"));
const modelSpec = (env.LVMH_MODEL || "").trim();
const projectTrusted = /^(1|true|yes|on)$/i.test(env.LVMH_TRUST_PROJECT || "");

function say(...parts) {
  console.log(`lvmh-worker: ${parts.join(" ")}`);
}

function warn(...parts) {
  console.error(`lvmh-worker: ${parts.join(" ")}`);
}

function fail(message) {
  warn(`error: ${message}`);
  process.exit(1);
}

/** The daemon-chosen session: resumed if its file is already in the session dir, else created with that id. */
function sessionManagerFor() {
  if (!sessionId) return SessionManager.create(cwd, sessionDir);
  const existing = SessionManager.findById(cwd, sessionId, sessionDir);
  if (existing) {
    say(`resuming session ${sessionId} from ${existing}`);
    return SessionManager.open(existing, sessionDir);
  }
  return SessionManager.create(cwd, sessionDir, { id: sessionId });
}

function pickModel(modelRuntime) {
  if (!modelSpec) return undefined;
  const slash = modelSpec.indexOf("/");
  const model = slash > 0 ? modelRuntime.getModel(modelSpec.slice(0, slash), modelSpec.slice(slash + 1)) : undefined;
  if (!model) throw new Error(`LVMH_MODEL=${modelSpec} is not a provider/model pi knows (see models.json)`);
  return model;
}

const createRuntime = async ({ cwd: runtimeCwd, agentDir: runtimeAgentDir, sessionManager, sessionStartEvent }) => {
  const settingsManager = SettingsManager.create(runtimeCwd, runtimeAgentDir, { projectTrusted });
  const services = await createAgentSessionServices({
    cwd: runtimeCwd,
    agentDir: runtimeAgentDir,
    settingsManager,
    resourceLoaderOptions: { noExtensions: true, additionalExtensionPaths: [extension] },
  });
  const created = await createAgentSessionFromServices({
    services,
    sessionManager,
    sessionStartEvent,
    model: pickModel(services.modelRuntime),
  });
  const diagnostics = [...services.diagnostics];
  for (const { path, error } of services.resourceLoader.getExtensions().errors) {
    diagnostics.push({ type: "error", message: `extension ${path} failed to load: ${error}` });
  }
  if (created.modelFallbackMessage) diagnostics.push({ type: "warning", message: created.modelFallbackMessage });
  return { ...created, services, diagnostics };
};

function report(diagnostics) {
  for (const d of diagnostics) (d.type === "info" ? say : warn)(`${d.type}: ${d.message}`);
}

if (!existsSync(cwd)) fail(`workspace ${cwd} does not exist (set LVMH_WORKSPACE)`);
if (!existsSync(extension)) fail(`the lvmh extension is not at ${extension} (set LVMH_EXTENSION)`);

let runtime;
try {
  runtime = await createAgentSessionRuntime(createRuntime, { cwd, agentDir, sessionManager: sessionManagerFor() });
} catch (err) {
  fail(`cannot start the pi session: ${err && err.message ? err.message : err}`);
}

let session = null;
let unsubscribe = null;
let shuttingDown = false;

function onEvent(event) {
  if (event.type === "agent_settled") say(`run ${event.aborted ? "aborted" : "settled"}`);
}

/** (Re)bind to the runtime's current session: at start and after /new, /resume, /fork. */
async function bind() {
  session = runtime.session;
  if (unsubscribe) unsubscribe();
  unsubscribe = session.subscribe(onEvent);
  await session.bindExtensions({
    commandContextActions: {
      waitForIdle: () => session.waitForIdle(),
      newSession: async (options) => runtime.newSession(options),
      fork: async (entryId, options) => ({ cancelled: (await runtime.fork(entryId, options)).cancelled }),
      navigateTree: async (targetId, options) => ({
        cancelled: (await session.navigateTree(targetId, options)).cancelled,
      }),
      switchSession: async (sessionPath, options) => runtime.switchSession(sessionPath, options),
      reload: async () => session.reload(),
    },
    shutdownHandler: () => void shutdown(0, "shutdown requested by an extension"),
    onError: (err) => warn(`extension error (${err.extensionPath}, ${err.event}): ${err.error}`),
  });
  const model = session.model ? `${session.model.provider}/${session.model.id}` : "none";
  say(`session ${session.sessionId} in ${runtime.cwd}, model ${model}, waiting for prompts`);
  report(runtime.takeUnreportedDiagnostics());
}

async function shutdown(code, why) {
  if (shuttingDown) return;
  shuttingDown = true;
  say(`stopping (${why})`);
  try {
    if (unsubscribe) unsubscribe();
    await runtime.dispose(); // aborts a run, session_shutdown "quit": the extension says bye (bounded wait)
  } catch (err) {
    warn(`shutdown: ${err && err.message ? err.message : err}`);
  }
  process.exit(code);
}

let signals = 0;
for (const [signal, code] of [["SIGTERM", 0], ["SIGINT", 0], ["SIGHUP", 129]]) {
  process.on(signal, () => {
    signals += 1;
    if (signals > 1) process.exit(1); // a second signal: no more waiting
    void shutdown(code, signal);
  });
}
process.on("unhandledRejection", (err) => warn(`unhandled rejection: ${err && err.stack ? err.stack : err}`));

runtime.setRebindSession(async () => bind());
await bind();

// Nothing else keeps the event loop alive while the daemon is unreachable (the extension's timers
// are unref'd on purpose): this does, until a signal ends the process.
setInterval(() => {}, 1 << 30);
