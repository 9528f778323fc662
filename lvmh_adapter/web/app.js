// lvmh web UI: watch and drive every agent session (the lvmh protocol, "Transport 2" and "Transport 3").
// It talks to the daemon like any client: REST under /api with the bearer token, and the browser
// WebSocket /ws?token=... for live frames. No build step, no network beyond this origin.

import { Api, ApiError } from "./api.js";
import { h, clear, replaceChildren } from "./dom.js";
import { applyEvents, createSession, pendingDecisions, relativeTime, sortSessions } from "./reducer.js";
import { LiveSocket } from "./socket.js";
import { renderItem, renderPanel, timeEl } from "./view.js";
import { SpawnDialog } from "./spawn.js";
import { ConversationDialogs, isBridgeConversation } from "./conversations.js";
import { sessionMatches, sessionTitle, shortPath } from "./labels.js";
import { notifyPending, renderNotifyButton } from "./notify.js";
import { forgetPush, notifyMe } from "./push.js";
import { THEME_KEY, TOKEN_KEY, applyTheme, cycleTheme, readStorage, writeStorage } from "./prefs.js";
import { toast } from "./toast.js";

const MAX_KEPT_SESSIONS = 8;
const STREAM_RENDER_MS = 100; // a streaming message is re-rendered (markdown) at most this often
const APP_TITLE = "lvmh · agent conversations";

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
  // per-item UI state shared with view.js
  ui: {
    openTools: new Set(),
    busy: new Set(),
    errors: new Map(),
    answeredHere: new Set(),
    previews: new Map(), // attachment id -> object URL
  },
  rendered: { sessionId: null, structureRev: -1, nodes: new Map(), panelRev: -1, headKey: "" },
  renderTimer: null,
  sending: false,
  filter: "",
  unseen: false, // content arrived below while the user was scrolled up
  notified: new Set(), // decision keys a browser notification was shown for
  focusPrompt: false, // a conversation was just created: focus its prompt once it can take text
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
  renderComposer();
  spawn.renderJobs();
}

function whenEl(ts) {
  const el = timeEl(ts, ".when");
  return el || h("span.when");
}

function renderList() {
  const ul = $("session-list");
  clear(ul);
  $("session-count").textContent = app.sessions.length ? String(app.sessions.length) : "";
  if (!app.sessions.length) {
    ul.appendChild(h("li.empty-list", app.listLoaded ? "No conversations yet. Start one with “New conversation”." : "Loading…"));
    return;
  }
  const needle = app.filter.trim().toLowerCase();
  const shown = app.sessions.filter((s) => sessionMatches(s, needle));
  if (!shown.length) {
    ul.appendChild(h("li.empty-list", "No conversation matches “", app.filter.trim(), "”."));
    return;
  }
  for (const s of shown) {
    const id = String(s.id);
    const active = id === app.current;
    const meta = [s.repo, shortPath(s.cwd)].filter(Boolean);
    const li = h(`li.session-item${active ? ".active" : ""}`, { "data-session-id": id },
      h("a.session-link", { href: `#/s/${encodeURIComponent(id)}`, "aria-current": active ? "page" : null },
        h("div.session-row1",
          h(`span.dot${s.online ? ".online" : ".offline"}`, { title: s.online ? "online" : "offline", "aria-label": s.online ? "online" : "offline" }),
          h("span.session-name", sessionTitle(s)),
          h(`span.badge${s.agent ? ".badge-agent" : ".badge-local"}`, s.agent ? "agent" : "local")),
        meta.length ? h("div.session-row2", meta.join(" · ")) : null,
        h("div.session-row3",
          h("span.model", [s.model, s.provider].filter(Boolean).join(" · ")),
          whenEl(s.lastEventAt ?? s.startedAt)),
      ));
    ul.appendChild(li);
  }
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
  if (!app.current) {
    replaceChildren(view,
      h("div.placeholder",
        h("div.placeholder-mark", { "aria-hidden": "true" }, "◇"),
        h("h2", "Talk to an agent"),
        h("p.muted", "Start a conversation with the bridge's agent, or pick one on the left: every pi session running the lvmh plugin appears there too, live."),
        h("button.primary.big#start-btn", { type: "button", onclick: () => dialogs.openNew() }, "New conversation")));
    return;
  }
  replaceChildren(view,
    h("header.session-head#session-head"),
    h("div.session-body",
      h("div.timeline-wrap#timeline-wrap", { onscroll: onTimelineScroll },
        h("div.timeline#timeline", { role: "log", "aria-live": "polite", "aria-label": "Conversation" }),
        h("div.timeline-foot#timeline-foot"),
        h("button.jump#jump-btn", { type: "button", hidden: true, onclick: jumpToLatest, "aria-label": "Jump to the latest message" }, "↓ Jump to latest")),
      h("aside.panel#panel", { "aria-label": "Tasks, subagents and usage" })),
    buildComposer());
  renderSession();
}

function renderSession() {
  if (!app.current || !$("timeline")) return;
  const st = app.states.get(app.current);
  if (!st) return;
  renderHead();
  renderTimeline(st);
  renderPanelIfChanged(st);
  renderComposer();
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
  const key = JSON.stringify([info, phase, outcome, online, app.stopArmed, app.conn === "open"]);
  updateTitle();
  if (key === app.rendered.headKey) return;
  app.rendered.headKey = key;
  const chips = [];
  const known = Boolean(s || (st && st.info));
  if (info.repo) chips.push(h("span.chip", { title: "repository" }, info.repo));
  if (info.cwd) chips.push(h("span.chip.mono", { title: info.cwd }, shortPath(info.cwd)));
  const model = [info.model, info.provider].filter(Boolean).join(" · ");
  if (model) chips.push(h("span.chip", { title: "model" }, model));
  if (known) chips.push(h(`span.chip${info.agent ? ".chip-agent" : ""}`, info.agent ? "agent container" : "local"));
  const status =
    phase === "running" ? h("span.pill.pill-running", { "data-phase": "running" }, h("span.spinner", { "aria-hidden": "true" }), "running")
    : phase === "done" ? h(`span.pill.pill-${outcome}`, { "data-phase": "done", "data-outcome": outcome }, outcome)
    : null;
  const actions = h("div.head-actions");
  if (phase === "running") {
    actions.appendChild(h("button.danger#abort-btn", { type: "button", onclick: abortRun, disabled: !online, title: online ? "Abort the current run" : "The session is offline" }, "Abort"));
  }
  if (s && isBridgeConversation(s)) {
    actions.appendChild(h("button#rename-btn", { type: "button", onclick: () => dialogs.rename(s), title: "Rename this conversation" }, "Rename"));
    actions.appendChild(h("button.danger#delete-btn", { type: "button", onclick: () => dialogs.remove(s), title: "Delete this conversation" }, "Delete"));
  }
  if (info.agent) {
    actions.appendChild(h("button#stop-btn", { type: "button", class: app.stopArmed ? "danger" : "", onclick: stopContainer }, app.stopArmed ? "Confirm stop" : "Stop container"));
  }
  replaceChildren(head,
    h("a.back.icon-btn", { href: "#", "aria-label": "Back to sessions", title: "Back to sessions" }, "‹"),
    h("div.head-main",
      h("div.head-title",
        h(`span.dot${online ? ".online" : ".offline"}`, { title: online ? "online" : "offline" }),
        h("h2#session-title", sessionTitle(info)),
        h("span.muted.small", app.conn !== "open" ? "status unknown" : online ? "online" : known ? "offline" : "not connected yet"),
        status),
      h("div.chips", chips)),
    actions);
}

function isNearBottom(wrap) {
  return wrap.scrollHeight - wrap.scrollTop - wrap.clientHeight < 120;
}

function onTimelineScroll() {
  const wrap = $("timeline-wrap");
  if (wrap && isNearBottom(wrap) && app.unseen) {
    app.unseen = false;
    $("jump-btn").hidden = true;
  }
}

function jumpToLatest() {
  const wrap = $("timeline-wrap");
  if (!wrap) return;
  wrap.scrollTop = wrap.scrollHeight;
  app.unseen = false;
  $("jump-btn").hidden = true;
}

function renderTimeline(st) {
  const tl = $("timeline");
  const wrap = tl.parentElement;
  const nearBottom = isNearBottom(wrap);
  const beforeHeight = wrap.scrollHeight;
  const now = performance.now();
  let deferred = false;
  const r = app.rendered;
  if (r.sessionId !== st.id) {
    clear(tl);
    r.nodes = new Map();
    r.sessionId = st.id;
    r.structureRev = -1;
  }
  const ctx = viewContext();
  let prev = null;
  const keep = new Set();
  for (const item of st.items) {
    keep.add(item.key);
    let entry = r.nodes.get(item.key);
    if (!entry || entry.rev !== item.rev || entry.uiRev !== uiRevOf(item)) {
      if (entry && item.streaming && entry.streaming && now - entry.at < STREAM_RENDER_MS) {
        deferred = true; // markdown of a long streaming message: not on every delta
      } else {
        const node = renderItem(item, ctx);
        node.dataset.key = item.key;
        if (entry && entry.node.parentNode === tl) tl.replaceChild(node, entry.node);
        entry = { node, rev: item.rev, uiRev: uiRevOf(item), at: now, streaming: Boolean(item.streaming) };
        r.nodes.set(item.key, entry);
      }
    }
    const expected = prev ? prev.nextSibling : tl.firstChild;
    if (entry.node !== expected) tl.insertBefore(entry.node, expected);
    prev = entry.node;
  }
  for (const [key, entry] of r.nodes) {
    if (!keep.has(key)) {
      entry.node.remove();
      r.nodes.delete(key);
    }
  }
  // footer: loading, not found, typing
  const foot = $("timeline-foot");
  clear(foot);
  if (!st.loaded) foot.appendChild(h("div.muted.small", "Loading history…"));
  else if (st.notFound && !currentSession()) foot.appendChild(h("div.notice#waiting-session", h("span.spinner.small"), " Waiting for this session's agent to connect…"));
  else if (st.loadError) foot.appendChild(h("div.notice.notice-error", `Could not load the history: ${st.loadError}`));
  else if (!st.items.length && st.phase !== "running") foot.appendChild(h("div.muted.small.center", "No messages yet."));
  if (st.phase === "running") {
    const draft = st.openAssistant ? st.byKey.get(`m:${st.openAssistant}`) : null;
    const waiting = pendingDecisions(st).length > 0;
    if (waiting) foot.appendChild(h("div.working", "waiting for a decision above…"));
    else if (!(draft && draft.streaming)) foot.appendChild(h("div.working", h("span.spinner"), "working…"));
  }
  if (nearBottom) wrap.scrollTop = wrap.scrollHeight;
  else if (wrap.scrollHeight > beforeHeight && st.loaded) app.unseen = true;
  $("jump-btn").hidden = !app.unseen;
  if (deferred) scheduleRender(STREAM_RENDER_MS);
}

function uiRevOf(item) {
  const ui = app.ui;
  return `${ui.busy.has(item.key) ? 1 : 0}|${ui.errors.get(item.key) || ""}|${ui.answeredHere.has(item.key) ? 1 : 0}`;
}

// --- title badge and notifications ---------------------------------------------------

function updateTitle() {
  const st = app.current ? app.states.get(app.current) : null;
  const s = currentSession();
  const pending = st ? pendingDecisions(st) : [];
  let title = APP_TITLE;
  if (app.current) {
    const name = sessionTitle(s || (st && st.info) || { id: app.current });
    if (pending.length) {
      const what = pending.every((p) => p.kind === "clarify") ? "Question waiting" : "Approval needed";
      title = `(${pending.length}) ${what} · ${name} · lvmh`;
    } else title = `${st && st.phase === "running" ? "● " : ""}${name} · lvmh`;
  }
  if (document.title !== title) document.title = title;
  notifyPending(pending, app.notified);
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

function buildComposer() {
  const ta = h("textarea#prompt-input", { rows: "2", placeholder: "Message the agent… (Enter to send, Shift+Enter for a new line)", "aria-label": "Prompt", maxlength: "100000" });
  ta.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      sendPrompt();
    }
  });
  ta.addEventListener("input", () => {
    ta.style.height = "auto";
    ta.style.height = Math.min(ta.scrollHeight, 240) + "px";
  });
  return h("form.composer#composer", { onsubmit: (e) => { e.preventDefault(); sendPrompt(); } },
    h("div.composer-reason#composer-reason", { role: "status" }),
    h("div.composer-row", ta, h("button.primary#send-btn", { type: "submit" }, "Send")));
}

function offlineReason() {
  const s = currentSession();
  if (!app.listLoaded) return "Loading…";
  if (app.conn === "waiting") return "Not connected to the daemon: reconnecting… Prompts can be sent once the connection is back.";
  if (app.conn !== "open") return "Connecting to the daemon…";
  if (!s) return "This session is not connected to the daemon, so prompts cannot be delivered.";
  if (!s.online) {
    return s.agent
      ? "This session is offline: its container is not connected. Prompts can be sent once it reconnects."
      : "This session is offline: its agent is not connected. Prompts can be sent once it reconnects.";
  }
  return "";
}

function renderComposer() {
  const ta = $("prompt-input");
  if (!ta) return;
  const reason = offlineReason();
  const disabled = Boolean(reason) || app.sending;
  ta.disabled = Boolean(reason);
  $("send-btn").disabled = disabled;
  const el = $("composer-reason");
  el.textContent = reason;
  el.hidden = !reason;
  $("composer").classList.toggle("offline", Boolean(reason));
  if (app.focusPrompt && !ta.disabled && app.current) {
    app.focusPrompt = false;
    ta.focus();
  }
}

async function sendPrompt() {
  const ta = $("prompt-input");
  const id = app.current;
  if (!ta || !id || app.sending) return;
  const message = ta.value;
  if (!message.trim() || offlineReason()) return;
  app.sending = true;
  renderComposer();
  try {
    await api.prompt(id, message);
    if (app.current === id) {
      ta.value = "";
      ta.style.height = "auto";
    }
  } catch (err) {
    // 409: offline, or a run is active (the daemon's message says which)
    toast(err.status === 409 ? `Not sent: ${err.message}` : `Prompt failed: ${err.message}`, "error");
  } finally {
    app.sending = false;
    renderComposer();
    ta.focus();
  }
}

async function abortRun() {
  const id = app.current;
  if (!id) return;
  const btn = $("abort-btn");
  if (btn) btn.disabled = true;
  try {
    await api.abort(id);
    toast("Abort requested.", "info", 2500);
  } catch (err) {
    toast(`Abort failed: ${err.message}`, "error");
    if (btn) btn.disabled = false;
  }
}

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

// --- decisions and attachments ----------------------------------------------------

function viewContext() {
  return {
    ...app.ui,
    resolveApproval,
    answerClarify,
    download,
    preview,
  };
}

async function decide(item, call) {
  const ui = app.ui;
  ui.busy.add(item.key);
  ui.errors.delete(item.key);
  scheduleRender();
  try {
    await call();
    ui.answeredHere.add(item.key);
  } catch (err) {
    if (err instanceof ApiError && err.status === 409) {
      ui.errors.set(item.key, item.resolved ? "" : "Already answered elsewhere.");
      // the *_resolved event (already in the stream or on its way) says who decided
      if (app.current) syncSession(app.current);
    } else if (err instanceof ApiError && err.status === 404) {
      ui.errors.set(item.key, "This request is no longer pending.");
    } else {
      ui.errors.set(item.key, `Could not send: ${err.message}`);
    }
  } finally {
    ui.busy.delete(item.key);
    scheduleRender();
  }
}

function resolveApproval(item, choice, reason) {
  return decide(item, () => api.resolveApproval(item.id, choice, reason));
}

function answerClarify(item, response) {
  return decide(item, () => api.answerClarify(item.id, response));
}

async function download(item) {
  app.ui.errors.delete(item.key);
  try {
    const blob = await api.attachment(item.attachmentId, item.url);
    const url = URL.createObjectURL(blob);
    const a = h("a", { href: url, download: item.filename || "attachment", hidden: true });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (err) {
    app.ui.errors.set(item.key, `Download failed: ${err.message}`);
    scheduleRender();
  }
}

async function preview(item, img) {
  const cached = app.ui.previews.get(item.attachmentId);
  if (cached) {
    img.src = cached;
    return;
  }
  try {
    const blob = await api.attachment(item.attachmentId, item.url);
    if (!blob.type.startsWith("image/") && !item.mimeType.startsWith("image/")) return;
    const url = URL.createObjectURL(blob);
    app.ui.previews.set(item.attachmentId, url);
    img.src = url;
  } catch {
    img.remove();
  }
}

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

let connTimer = null;
function renderConn(sock) {
  const el = $("conn");
  clearInterval(connTimer);
  connTimer = null;
  el.dataset.state = app.conn;
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
  renderComposer();
}

// --- spawn dialog ---------------------------------------------------------------------

const dialogs = new ConversationDialogs({
  api,
  toast,
  openSession: (id) => {
    app.focusPrompt = true; // renderComposer focuses it once the session is open and online
    location.hash = `#/s/${encodeURIComponent(id)}`;
    renderComposer();
  },
  currentId: () => app.current,
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
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) socket.retryNow();
  });
  window.addEventListener("online", () => socket.retryNow());
  setInterval(() => {
    for (const el of document.querySelectorAll("time.rel[data-ts]")) {
      const ts = Number(el.dataset.ts);
      if (ts) el.textContent = relativeTime(ts);
    }
  }, 30000);
  renderList();
  renderView();
  if (!app.token) showGate("");
  else start();
}

// exposed for tests and debugging (read-only use)
window.lvmhApp = { app, socket, pendingDecisions };

init();
