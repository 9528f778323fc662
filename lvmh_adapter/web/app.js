// lvmh web UI: watch and drive every agent session (the lvmh protocol, "Transport 2" and "Transport 3").
// It talks to the daemon like any client: REST under /api with the bearer token, and the browser
// WebSocket /ws?token=... for live frames. No build step, no network beyond this origin.

import { Api, ApiError } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { applyEvents, createSession, pendingDecisions } from "./reducer.js";
import { relativeTime } from "./format.js";
import { LiveSocket } from "./socket.js";
import { renderPanel, untilLine } from "./view.js";
import { jumpToLatest, onTimelineScroll, renderTimeline } from "./timeline.js";
import { cardActions } from "./actions.js";
import { SpawnDialog } from "./spawn.js";
import { ConversationDialogs, isBridgeConversation } from "./conversations.js";
import { isPiSession, sessionTitle } from "./labels.js";
import { drawHead } from "./head.js";
import { applyEntry, pageTitle, sortSessions, waitingEverywhere } from "./sessions.js";
import { renderList as drawList } from "./sidebar.js";
import { attentionBanner, setFavicon } from "./attention.js";
import { Composer } from "./composer.js";
import { agentIntro } from "./intro.js";
import { notifyPending, renderNotifyButton } from "./notify.js";
import { forgetPush, notifyMe } from "./push.js";
import { THEME_KEY, TOKEN_KEY, applyTheme, cycleTheme, readStorage, writeStorage } from "./prefs.js";
import { toast } from "./toast.js";

const MAX_KEPT_SESSIONS = 8;
const CLOCK_MS = 5000; // relative times and expiry countdowns are redrawn this often

const $ = (id) => document.getElementById(id);

const app = {
  token: readStorage(TOKEN_KEY),
  sessions: [],
  sessionsById: new Map(),
  listLoaded: false,
  current: null, // id of the open session
  states: new Map(), // id -> reducer state (most recently used last)
  conn: "idle",
  spawnJobs: [],
  agent: null, // GET /api/agent: what the agent of new conversations can do (intro.js)
  // per-item UI state shared with view.js
  ui: {
    openTools: new Set(),
    busy: new Set(),
    errors: new Map(),
    answeredHere: new Set(),
    previews: new Map(), // attachment id -> object URL
  },
  rendered: { sessionId: null, structureRev: -1, nodes: new Map(), panelRev: -1, headKey: "", bannerKey: "" },
  renderTimer: null,
  filter: "",
  unseen: false, // content arrived below while the user was scrolled up
  notified: new Set(), // decision keys a browser notification was shown for
};

const api = new Api(() => app.token, () => showGate("The daemon refused the token. Run agent-bridge lvmh open for a new login link, or paste the current LVMH token."));

/**
 * A login link (agent-bridge lvmh open) ends in /#token=...: the fragment never
 * reaches a request line or a server log. Keep the token, then drop it from the address bar
 * and from the history entry.
 */
function tokenFromFragment() {
  const m = /^#token=([^&]+)/.exec(location.hash || "");
  if (!m) return;
  let value = "";
  try {
    value = decodeURIComponent(m[1]).trim();
  } catch {
    value = "";
  }
  history.replaceState(null, "", location.pathname + location.search);
  if (value) {
    app.token = value;
    writeStorage(TOKEN_KEY, value);
  }
}

// --- token gate --------------------------------------------------------------------

function showGate(message) {
  socket.stop();
  document.body.classList.add("gated");
  $("gate").hidden = false;
  $("gate-error").textContent = message || "";
  $("token-input").value = "";
  setTimeout(() => $("token-input").focus(), 0);
}

async function submitToken(e) {
  e.preventDefault();
  const value = $("token-input").value.trim();
  if (!value) return;
  const btn = $("token-save");
  btn.disabled = true;
  $("gate-error").textContent = "";
  const previous = app.token;
  app.token = value;
  try {
    const list = await new Api(() => value, () => {}).sessions();
    writeStorage(TOKEN_KEY, value);
    $("gate").hidden = true;
    document.body.classList.remove("gated");
    setSessions(list);
    start();
  } catch (err) {
    app.token = previous;
    $("gate-error").textContent =
      err instanceof ApiError && err.status === 401 ? "That token was refused." : err.message || String(err);
  } finally {
    btn.disabled = false;
  }
}

async function signOut() {
  await forgetPush(api); // with the token still set: this browser's push subscription goes first
  writeStorage(TOKEN_KEY, "");
  app.token = "";
  showGate("");
}

// --- sessions list -----------------------------------------------------------------

function setSessions(list) {
  const before = app.current ? app.sessionsById.get(app.current) : null;
  app.sessions = sortSessions(list);
  app.sessionsById = new Map(app.sessions.map((s) => [String(s.id), s]));
  app.listLoaded = true;
  if (before && isBridgeConversation(before) && !app.sessionsById.has(app.current)) {
    // the open conversation was deleted (here or from another client): back to the list
    app.states.delete(app.current);
    toast(`“${sessionTitle(before)}” was deleted.`, "info", 4000);
    location.hash = "#";
  }
  // a session we could not load (spawned, not connected yet) has appeared: load it now
  const st = app.current ? app.states.get(app.current) : null;
  if (st && st.notFound && app.sessionsById.has(app.current) && !st.syncing) syncSession(app.current);
  renderList();
  renderHead();
  composer.render();
  updateTitle();
  spawn.renderJobs();
}

/** One `session_entry` frame: a session's entry added, changed (its activity) or removed. */
function onSessionEntry(frame) {
  setSessions(applyEntry(app.sessions, frame));
}

function renderList() {
  drawList($("session-list"), $("session-count"), app);
}

// --- the open session --------------------------------------------------------------

function stateFor(id) {
  let st = app.states.get(id);
  if (st) {
    app.states.delete(id); // move to most-recent
  } else {
    st = createSession(id);
    st.syncing = 0;
    st.buffer = [];
    st.notFound = false;
  }
  app.states.set(id, st);
  while (app.states.size > MAX_KEPT_SESSIONS) {
    const oldest = app.states.keys().next().value;
    if (oldest === app.current) break;
    app.states.delete(oldest);
  }
  return st;
}

function routeFromHash() {
  const m = location.hash.match(/^#\/s\/(.+)$/);
  return m ? decodeURIComponent(m[1]) : null;
}

function openSession(id) {
  if (id === app.current) return;
  const prev = app.current;
  if (prev) socket.send({ type: "unsubscribe", sessionId: prev });
  app.current = id;
  app.menuOpen = false;
  document.body.classList.toggle("has-session", Boolean(id));
  resetRendered();
  renderList();
  if (!id) {
    updateTitle();
    renderView();
    return;
  }
  stateFor(id);
  renderView();
  socket.send({ type: "subscribe", sessionId: id });
  syncSession(id);
}

/** Fetch persisted events after the last seen seq; live frames that arrive meanwhile wait, then apply. */
async function syncSession(id) {
  const st = stateFor(id);
  st.syncing += 1;
  try {
    const events = await api.events(id, st.lastSeq);
    applyEvents(st, events);
    st.notFound = false;
    st.loadError = null;
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) st.notFound = true;
    else if (!(err instanceof ApiError && err.status === 401)) st.loadError = err.message || String(err);
  } finally {
    st.syncing -= 1;
    if (st.syncing === 0 && st.buffer.length) {
      const buffered = st.buffer;
      st.buffer = [];
      applyEvents(st, buffered);
    }
    st.loaded = true;
    if (id === app.current) scheduleRender();
  }
}

function onInflightFrame(frame) {
  onEventsFrame({ sessionId: frame.sessionId, events: [frame] });
}

function onEventsFrame(frame) {
  const id = String(frame.sessionId ?? "");
  const st = app.states.get(id);
  if (!st || !Array.isArray(frame.events)) return;
  if (st.syncing > 0) {
    st.buffer.push(...frame.events);
  } else {
    const gap = typeof frame.after === "number" && frame.after > st.lastAny && st.loaded;
    applyEvents(st, frame.events);
    if (gap) syncSession(id); // the stream skipped events we never saw: fetch the persisted ones
  }
  if (id === app.current) scheduleRender();
}

function resetRendered() {
  app.rendered = { sessionId: null, structureRev: -1, nodes: new Map(), panelRev: -1, headKey: "" };
}

function scheduleRender(delay = 16) {
  if (app.renderTimer) return;
  app.renderTimer = setTimeout(() => {
    app.renderTimer = null;
    renderSession();
  }, delay);
}

function renderView() {
  const view = $("view");
  app.rendered.bannerKey = "";
  if (!app.current) {
    replaceChildren(view,
      h("div#attention-slot"),
      h("div.placeholder",
        h("div.placeholder-mark", { "aria-hidden": "true" }, "◇"),
        h("h2", "Talk to an agent"),
        h("p.muted", "Start a conversation with the bridge's agent, or pick one on the left: every pi session running the lvmh plugin appears there too, live."),
        h("button.primary.big#start-btn", { type: "button", onclick: () => dialogs.openNew() }, "New conversation"),
        agentIntro(app.agent, null)));
    renderAttention();
    return;
  }
  replaceChildren(view,
    h("div#attention-slot"),
    h("header.session-head#session-head"),
    h("div.session-body",
      h("div.timeline-wrap#timeline-wrap", { onscroll: () => onTimelineScroll(app) },
        h("div.timeline#timeline", { role: "log", "aria-live": "polite", "aria-label": "Conversation" }),
        h("div.timeline-foot#timeline-foot"),
        h("button.jump#jump-btn", { type: "button", hidden: true, onclick: () => jumpToLatest(app), "aria-label": "Jump to the latest message" }, "↓ Jump to latest")),
      h("aside.panel#panel", { "aria-label": "Tasks, subagents and usage" })),
    composer.build());
  renderSession();
}

function renderSession() {
  if (!app.current || !$("timeline")) return;
  const st = app.states.get(app.current);
  if (!st) return;
  renderHead();
  renderTimeline(app, st, { ctx: { ...app.ui, ...cards }, footer: timelineFooter, schedule: scheduleRender });
  renderPanelIfChanged(st);
  composer.render();
}

function currentSession() {
  return app.current ? app.sessionsById.get(app.current) || null : null;
}

function renderHead() {
  const head = $("session-head");
  if (!head || !app.current) return;
  const s = currentSession();
  const st = app.states.get(app.current);
  const info = s || (st && st.info) || { id: app.current };
  const phase = st ? st.phase : "idle";
  const online = Boolean(s && s.online) && app.conn === "open";
  const outcome = st ? (st.aborted ? "cancelled" : st.lastStatus === "failed" || st.lastError ? "failed" : "done") : "done";
  // what the header shows (not the entry's activity fields, which change with every event)
  const shown = ["id", "name", "repo", "cwd", "model", "provider", "agent", "agentName", "agentLabel"].map((k) => info[k]);
  const key = JSON.stringify([shown, Boolean(s || (st && st.info)), phase, outcome, online, app.stopArmed, app.conn === "open", app.menuOpen]);
  updateTitle();
  if (key === app.rendered.headKey) return;
  app.rendered.headKey = key;
  drawHead(head, {
    info, phase, outcome, online, known: Boolean(s || (st && st.info)), connOpen: app.conn === "open",
    menuOpen: Boolean(app.menuOpen), stopArmed: Boolean(app.stopArmed),
    onRename: s && isBridgeConversation(s) ? () => dialogs.rename(s) : null,
    onDelete: s && isBridgeConversation(s) ? () => dialogs.remove(s) : null,
    onStopContainer: info.agent ? stopContainer : null,
    onMenu: () => {
      app.menuOpen = !app.menuOpen;
      renderHead();
    },
  });
}

/** The timeline's foot once the history is loaded: not found, an error, or what to try first. */
function timelineFooter(st) {
  const s = currentSession();
  if (st.notFound && !s) return h("div.notice#waiting-session", h("span.spinner.small"), " Waiting for this session's agent to connect…");
  if (st.loadError) return h("div.notice.notice-error", `Could not load the history: ${st.loadError}`);
  if (st.items.length || st.phase === "running") return null;
  if (s && isPiSession(s)) return h("div.muted.small.center", "No messages yet. What you send here reaches pi in this session.");
  return agentIntro(app.agent, (text) => composer.fill(text)) || h("div.muted.small.center", "No messages yet.");
}

// --- title badge and notifications ---------------------------------------------------

/** Every decision waiting, in every session (the open one's from its events once loaded). */
function waitingNow() {
  const st = app.current ? app.states.get(app.current) : null;
  return waitingEverywhere(app.sessions, app.current, st && st.loaded ? pendingDecisions(st) : null);
}

/** The tab's title and icon say what waits, wherever it waits; a notification too while the page is hidden. */
function updateTitle() {
  const st = app.current ? app.states.get(app.current) : null;
  const waiting = waitingNow();
  const openName = app.current ? sessionTitle(currentSession() || (st && st.info) || { id: app.current }) : null;
  const title = pageTitle({ openName, running: Boolean(st && st.phase === "running"), waiting });
  if (document.title !== title) document.title = title;
  setFavicon(waiting.length);
  notifyPending(waiting, app.notified);
  renderAttention(waiting);
}

/** The banner, in any view, for decisions waiting in the other conversations. */
function renderAttention(waiting = waitingNow()) {
  const slot = $("attention-slot");
  if (!slot) return;
  const elsewhere = waiting.filter((w) => w.sessionId !== app.current);
  const key = JSON.stringify(elsewhere);
  if (key === app.rendered.bannerKey) return;
  app.rendered.bannerKey = key;
  replaceChildren(slot, attentionBanner(elsewhere));
}

function renderPanelIfChanged(st) {
  const panel = $("panel");
  const rev = `${st.todos ? st.todos.seq : 0}|${st.subagents.map((s) => s.status + s.resultPreview.length).join(",")}|${st.totalUsage.runs}`;
  if (rev === app.rendered.panelRev) return;
  app.rendered.panelRev = rev;
  replaceChildren(panel, renderPanel(st));
  const todos = st.todos ? st.todos.items.length : 0;
  // at narrow widths the panel shows only when there is a task list or subagents
  panel.classList.toggle("has-content", todos > 0 || st.subagents.length > 0);
}

// --- composer ----------------------------------------------------------------------

function offlineReason() {
  const s = currentSession();
  if (!app.listLoaded) return "Loading…";
  if (app.conn === "waiting") return "Not connected to the daemon: reconnecting… Prompts can be sent once the connection is back.";
  if (app.conn !== "open") return "Connecting to the daemon…";
  if (!s) return "This session is not connected to the daemon, so prompts cannot be delivered.";
  if (!s.online) {
    if (!isPiSession(s)) return "This conversation's agent is unavailable. Prompts can be sent once it is back.";
    return s.agent
      ? "This session is offline: its container is not connected. Prompts can be sent once it reconnects."
      : "This session is offline: its agent is not connected. Prompts can be sent once it reconnects.";
  }
  return "";
}

const composer = new Composer({
  api,
  toast,
  session: () => {
    const st = app.current ? app.states.get(app.current) : null;
    const s = currentSession();
    return { id: app.current, reason: app.current ? offlineReason() : "", running: Boolean(st && st.phase === "running"),
             queues: Boolean(s && isPiSession(s)) };
  },
});

async function stopContainer() {
  const id = app.current;
  if (!id) return;
  if (!app.stopArmed) {
    app.stopArmed = true;
    renderHead();
    setTimeout(() => {
      if (app.stopArmed) {
        app.stopArmed = false;
        renderHead();
      }
    }, 4000);
    return;
  }
  app.stopArmed = false;
  renderHead();
  try {
    await api.stopContainer(id);
    toast("Container stopped.", "info");
  } catch (err) {
    toast(`Stop failed: ${err.message}`, "error");
  }
}

const cards = cardActions({ api, ui: app.ui, rerender: () => scheduleRender(), resync: () => app.current && syncSession(app.current) });

// --- the live socket ------------------------------------------------------------------

function wsUrl() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  return `${scheme}://${location.host}/ws?token=${encodeURIComponent(app.token)}`;
}

const socket = new LiveSocket({
  url: wsUrl,
  // the upgrade is tried only once a plain request succeeds (see socket.js): no token in console errors
  probe: async () => {
    try {
      setSessions(await api.sessions());
      return true;
    } catch {
      return false;
    }
  },
  onOpen: async () => {
    loadAgent(); // the daemon may have restarted with another agent
    if (app.current) {
      socket.send({ type: "subscribe", sessionId: app.current });
      syncSession(app.current);
    }
  },
  onFrame: (frame) => {
    switch (frame.type) {
      case "session_list":
        if (Array.isArray(frame.sessions)) setSessions(frame.sessions);
        break;
      case "session_entry":
        onSessionEntry(frame);
        break;
      case "events":
        onEventsFrame(frame);
        break;
      case "inflight":
        onInflightFrame(frame);
        break;
      case "spawn_status":
        if (Array.isArray(frame.jobs)) spawn.setJobs(frame.jobs);
        break;
      default:
        break; // unknown frames are ignored
    }
  },
  onState: (state, sock) => {
    app.conn = state;
    document.body.classList.toggle("disconnected", state !== "open");
    renderConn(sock);
    renderHead();
  },
});

async function loadAgent() {
  try {
    app.agent = await api.agent();
  } catch {
    app.agent = null; // an older daemon: no commands to list, every picker offered
  }
  if (!app.current) renderView();
  else scheduleRender();
}

let connTimer = null;
function renderConn(sock) {
  const el = $("conn");
  clearInterval(connTimer);
  connTimer = null;
  el.dataset.state = app.conn;
  document.body.dataset.conn = app.conn;
  const retry = h("button.linkish", { type: "button", onclick: () => socket.retryNow() }, "retry now");
  if (app.conn === "open") replaceChildren(el, h("span.dot.online", { title: "live" }), h("span.conn-text", "live"));
  else if (app.conn === "connecting") replaceChildren(el, h("span.dot.pending"), "connecting…");
  else if (app.conn === "waiting") {
    const draw = () => {
      const s = Math.max(0, Math.ceil((sock.retryAt - Date.now()) / 1000));
      replaceChildren(el, h("span.dot.offline"), `reconnecting in ${s}s `, retry);
    };
    draw();
    connTimer = setInterval(draw, 1000);
  } else replaceChildren(el, h("span.dot.offline"), "offline");
  composer.render();
}

// --- spawn dialog ---------------------------------------------------------------------

const dialogs = new ConversationDialogs({
  api,
  toast,
  openSession: (id) => {
    composer.focusNext = true; // the composer focuses it once the session is open and online
    location.hash = `#/s/${encodeURIComponent(id)}`;
    composer.render();
  },
  currentId: () => app.current,
  agent: () => app.agent,
});

const spawn = new SpawnDialog({
  api,
  toast,
  openSession: (id) => {
    location.hash = `#/s/${encodeURIComponent(id)}`;
  },
  sessionKnown: (id) => app.sessionsById.has(String(id)),
});

// --- start -------------------------------------------------------------------------

function start() {
  socket.start(); // its probe loads the session list first
  const id = routeFromHash();
  app.current = null;
  openSession(id);
}

function init() {
  tokenFromFragment();
  applyTheme(readStorage(THEME_KEY) || "auto", $("theme-btn"));
  $("new-conv-btn").addEventListener("click", () => dialogs.openNew());
  $("notify-btn").addEventListener("click", () => notifyMe(api, $("notify-btn"), toast));
  $("session-search").addEventListener("input", (e) => {
    app.filter = e.target.value;
    renderList();
  });
  renderNotifyButton($("notify-btn"));
  $("theme-btn").addEventListener("click", () => cycleTheme($("theme-btn")));
  $("signout-btn").addEventListener("click", signOut);
  $("token-form").addEventListener("submit", submitToken);
  $("spawn-btn").addEventListener("click", () => spawn.open());
  window.addEventListener("hashchange", () => openSession(routeFromHash()));
  document.addEventListener("click", (e) => {
    // the phone header's "⋯" menu closes on a click anywhere else
    if (app.menuOpen && !e.target.closest("#head-menu-btn")) {
      app.menuOpen = false;
      renderHead();
    }
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) socket.retryNow();
  });
  window.addEventListener("online", () => socket.retryNow());
  setInterval(() => {
    for (const el of document.querySelectorAll("time.rel[data-ts]")) {
      const ts = Number(el.dataset.ts);
      if (ts) el.textContent = relativeTime(ts);
    }
    for (const el of document.querySelectorAll("time.until[data-until]")) {
      el.textContent = untilLine(Number(el.dataset.until), el.dataset.what);
    }
  }, CLOCK_MS);
  renderList();
  renderView();
  if (!app.token) showGate("");
  else start();
}

// exposed for tests and debugging (read-only use)
window.lvmhApp = { app, socket, pendingDecisions };

init();
