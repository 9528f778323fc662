// lvmh web UI: watch and drive every agent session (the lvmh protocol, "Transport 2" and "Transport 3").
// It talks to the daemon like any client: REST under /api with the bearer token, and the browser
// WebSocket /ws?token=... for live frames. No build step, no network beyond this origin.

import { Api, ApiError, closeEarly } from "./api.js";
import { h, replaceChildren } from "./dom.js";
import { pendingDecisions } from "./reducer.js";
import { relativeTime } from "./format.js";
import { LiveSocket } from "./socket.js";
import { renderPanel, untilLine } from "./view.js";
import { jumpToLatest, onTimelineScroll, pinItem, renderTimeline } from "./timeline.js";
import { Loader } from "./loader.js";
import { SessionBook, LIST_PAGE } from "./book.js";
import { Finder } from "./find.js";
import { hitKey, itemFor, phaseOf } from "./history.js";
import { liveRegion } from "./announce.js";
import { cardActions } from "./actions.js";
import { SpawnDialog } from "./spawn.js";
import { ConversationDialogs, isBridgeConversation } from "./conversations.js";
import { isPiSession, sessionTitle } from "./labels.js";
import { drawHead } from "./head.js";
import { pageTitle, waitingEverywhere } from "./sessions.js";
import { renderList as drawList } from "./sidebar.js";
import { attentionBanner, setFavicon } from "./attention.js";
import { Composer } from "./composer.js";
import { onGrammars, warmUp } from "./markdown.js";
import { agentIntro } from "./intro.js";
import { notifyPending, renderNotifyButton } from "./notify.js";
import { forgetPush, notifyMe } from "./push.js";
import { THEME_KEY, TOKEN_KEY, applyTheme, cycleTheme, readStorage, writeStorage } from "./prefs.js";
import { toast } from "./toast.js";

const CLOCK_MS = 5000; // relative times and expiry countdowns are redrawn this often

const $ = (id) => document.getElementById(id);

const app = {
  token: readStorage(TOKEN_KEY),
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
    found: null, // the key of the item a search hit is about (find.js)
  },
  rendered: {},
  renderTimer: null,
  listTimer: null,
  opening: null, // the address's conversation until the list is drawn after its first page (listLater: that draw)
  listLater: null,
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
    const page = await new Api(() => value, () => {}).sessionsPage({ limit: LIST_PAGE });
    writeStorage(TOKEN_KEY, value);
    $("gate").hidden = true;
    document.body.classList.remove("gated");
    book.setPage(page);
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

const book = new SessionBook({
  api,
  onChange: listChanged,
  onRemoved: (id, before) => {
    if (id !== app.current || !before || !isBridgeConversation(before)) return;
    // the open conversation was deleted (here or from another client): back to the list
    app.states.delete(id);
    toast(`“${sessionTitle(before)}” was deleted.`, "info", 4000);
    location.hash = "#";
  },
});

function listChanged() {
  // a session we could not load (spawned, not connected yet) has appeared: load it now
  const st = app.current ? app.states.get(app.current) : null;
  if (st && st.notFound && book.get(app.current) && !st.syncing) loader.sync(app.current);
  renderList();
  renderHead();
  composer.render();
  updateTitle();
  spawn.renderJobs();
}

// The list waits for the first page of the conversation the page opens on (not what the reader asked for, not on a
// phone's screen): drawn the frame after it (`renderNow`), LIST_LATER_MS later at most. Later openings: at once.
// A list arriving between that first page's draw and the frame that shows it waits for that frame too (a busy
// machine may take tens of milliseconds to paint it: CI saw the list drawn first).
const LIST_LATER_MS = 500;
function renderList() {
  if (!app.opening || app.opening !== app.current) return listNow();
  if (!app.listLater) app.listLater = setTimeout(listNow, LIST_LATER_MS);
}

function listNow() {
  clearTimeout(app.listLater);
  app.listLater = app.opening = null;
  drawList($("session-list"), $("session-count"), { book, current: app.current, more: () => book.more(),
                                                    onResize: () => scheduleList() });
}

function scheduleList() {
  if (app.listTimer) return;
  app.listTimer = setTimeout(() => {
    app.listTimer = null;
    renderList();
  }, 16);
}

// --- the open session --------------------------------------------------------------

// the first page of the open conversation is drawn as it lands (the reader waits for nothing else); later ones at the next tick
const loader = new Loader({ api, app, render: (delay) => (delay === 0 && !app.rendered.painted ? renderNow() : scheduleRender(delay)) });
const finder = new Finder({ api, current: () => app.current, reveal: (hit) => revealHit(hit) });

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
  app.ui.found = null;
  finder.reset();
  document.body.classList.toggle("has-session", Boolean(id));
  resetRendered();
  renderList();
  if (!id) {
    updateTitle();
    renderView();
    return;
  }
  loader.stateFor(id);
  book.ensure(id);
  renderView();
  socket.send({ type: "subscribe", sessionId: id });
  loader.sync(id);
}

/** Show the item a search hit is about: in what is held, or in the history around it (loader.js). */
async function revealHit(hit) {
  const id = app.current;
  const key = hitKey(hit);
  const live = app.states.get(id);
  if (!live) return;
  let shown = live;
  if (live.byKey.has(key) || (live.oldestSeq != null && hit.seq >= live.oldestSeq)) app.rendered.detached = null;
  else if (app.rendered.detached && app.rendered.detached.byKey.has(key)) shown = app.rendered.detached;
  else shown = await loader.reveal(id, hit.seq);
  if (id !== app.current) return;
  const item = itemFor(shown, key, hit.seq);
  app.ui.found = item ? item.key : null;
  if (item) pinItem(app, item.key);
  scheduleRender(0);
}

function resetRendered() {
  app.rendered?.vlist?.destroy();
  app.rendered = { sessionId: null, panelRev: -1, headKey: "", bannerKey: "", detached: null,
                   onScroll: () => scheduleRender(0), backToLatest: () => loader.leaveHistory() };
}

function renderNow() {
  clearTimeout(app.renderTimer);
  app.renderTimer = null;
  renderSession();
  if (app.listLater) requestAnimationFrame(() => setTimeout(() => app.listLater && listNow(), 0)); // the list's turn
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
    finder.build(),
    h("div.session-body",
      h("div.timeline-wrap#timeline-wrap", { onscroll: () => onTimelineScroll(app) },
        h("div.timeline-head#timeline-head", { role: "status" }),
        // a feed: only what is on screen is in it (virtual.js); what arrives live is said by #timeline-live
        h("div.timeline#timeline", { role: "feed", "aria-label": "Conversation" }),
        h("div.timeline-foot#timeline-foot"),
        h("button.jump#jump-btn", { type: "button", hidden: true, onclick: () => jumpToLatest(app), "aria-label": "Jump to the latest message" }, "↓ Jump to latest")),
      h("aside.panel#panel", { "aria-label": "Tasks, subagents and usage" })),
    liveRegion(),
    composer.build());
  renderSession();
}

function renderSession() {
  if (!app.current || !$("timeline")) return;
  const st = app.states.get(app.current);
  if (!st) return;
  renderHead();
  const shown = app.rendered.detached || st; // a view of older history around a search hit, or the live one
  renderTimeline(app, shown, { ctx: { ...app.ui, ...cards }, footer: timelineFooter, schedule: scheduleRender,
                               older: () => loader.older(shown), newer: () => loader.newer(shown) });
  renderPanelIfChanged(st);
  composer.render();
}

function currentSession() {
  return app.current ? book.get(app.current) : null;
}

function renderHead() {
  const head = $("session-head");
  if (!head || !app.current) return;
  const s = currentSession();
  const st = app.states.get(app.current);
  const info = s || (st && st.info) || { id: app.current };
  const phase = phaseOf(st, s);
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
    onFind: () => finder.open(),
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
  return waitingEverywhere(book.all(), app.current, st && st.loaded ? pendingDecisions(st) : null);
}

/** The tab's title and icon say what waits, wherever it waits; a notification too while the page is hidden. */
function updateTitle() {
  const st = app.current ? app.states.get(app.current) : null;
  const waiting = waitingNow();
  const openName = app.current ? sessionTitle(currentSession() || (st && st.info) || { id: app.current }) : null;
  const title = pageTitle({ openName, running: phaseOf(st, currentSession()) === "running", waiting });
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
  if (!book.loaded) return "Loading…";
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
    return { id: app.current, reason: app.current ? offlineReason() : "", running: phaseOf(st, s) === "running",
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

const cards = cardActions({ api, ui: app.ui, rerender: () => scheduleRender(), resync: () => app.current && loader.sync(app.current) });

// --- the live socket ------------------------------------------------------------------

function wsUrl() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  // ext=list-deltas: the list's first page, then one entry per change (docs/web-ui.md, "Thousands of conversations")
  return `${scheme}://${location.host}/ws?token=${encodeURIComponent(app.token)}&ext=list-deltas`;
}

const socket = new LiveSocket({
  url: wsUrl,
  // the upgrade is tried only once a plain request succeeds (see socket.js): no token in console errors
  probe: async () => {
    try {
      book.setPage(await api.sessionsPage({ limit: LIST_PAGE }));
      return true;
    } catch {
      return false;
    }
  },
  onOpen: async () => {
    loadAgent(); // the daemon may have restarted with another agent
    if (app.current) {
      socket.send({ type: "subscribe", sessionId: app.current });
      loader.sync(app.current);
    }
  },
  onFrame: (frame) => {
    switch (frame.type) {
      case "session_list":
        if (Array.isArray(frame.sessions)) book.setPage(frame);
        break;
      case "session_entry":
        book.apply(frame);
        break;
      case "events":
        loader.onEvents(frame);
        break;
      case "inflight":
        loader.onEvents({ sessionId: frame.sessionId, events: [frame] });
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
  sessionKnown: (id) => Boolean(book.get(id)),
});

// --- start -------------------------------------------------------------------------

function start() {
  const id = routeFromHash();
  app.current = null;
  app.opening = id;
  openSession(id); // its first page before the list's: the reader asked for this conversation
  socket.start(); // its probe loads the session list
  if (id) warmUp(); // while the first page is on its way
}

function init() {
  tokenFromFragment();
  applyTheme(readStorage(THEME_KEY) || "auto", $("theme-btn"));
  $("new-conv-btn").addEventListener("click", () => dialogs.openNew());
  $("notify-btn").addEventListener("click", () => notifyMe(api, $("notify-btn"), toast));
  let searchTimer = null;
  $("session-search").addEventListener("input", (e) => {
    clearTimeout(searchTimer); // the list is searched on the server, once typing pauses
    searchTimer = setTimeout(() => book.search(e.target.value), 150);
  });
  $("sidebar").addEventListener("scroll", () => scheduleList(), { passive: true });
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
  onGrammars(() => scheduleRender(0)); // code blocks drawn before highlight.js's grammars were in, again
  if (!app.token || !routeFromHash()) renderList(); // with a conversation's address openSession draws both,
  if (!app.token || !routeFromHash()) renderView(); // the list after the conversation's first page
  if (!app.token) showGate("");
  else start();
  closeEarly(); // boot.js's responses answer only the requests just made (api.js)
}

// exposed for tests and debugging (read-only use)
window.lvmhApp = { app, book, socket, pendingDecisions };

init();
