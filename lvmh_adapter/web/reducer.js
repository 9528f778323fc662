// Pure state for one lvmh session: fold lvmh protocol events into a timeline.
// No DOM, no I/O: the page renders what this builds, and `node --test` checks it.
//
// Events are the envelope plus payload, flat: {v, sessionId, seq, ts, type, ...payload}.
// Every event is deduplicated by seq (a refetch after a reconnect may overlap the live stream).
// `message_update` deltas are live only (never persisted): they feed the streaming draft of the
// open assistant message and are replaced by the authoritative `message_end`.

export const APPROVAL_CHOICES = ["once", "session", "always", "deny"];

/** First present (non-null, non-undefined) field among names; supports camelCase and snake_case peers. */
export function pick(obj, ...names) {
  if (!obj || typeof obj !== "object") return undefined;
  for (const n of names) {
    if (obj[n] !== undefined && obj[n] !== null) return obj[n];
  }
  return undefined;
}

function str(v, fallback = "") {
  if (v === undefined || v === null) return fallback;
  return typeof v === "string" ? v : String(v);
}

function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** JSON.parse that never throws: returns the parsed value, or the original string. */
export function parseArgs(args) {
  if (typeof args !== "string") return args ?? null;
  try {
    return JSON.parse(args);
  } catch {
    return args;
  }
}

export function createSession(id) {
  return {
    id,
    seen: new Set(), // seqs already applied (persisted and live)
    lastSeq: 0, // highest persisted seq applied (refetch ?after=)
    lastAny: 0, // highest seq applied, live deltas included (gap detection on `events` frames)
    items: [], // timeline, ordered by the seq of the event that created each item
    byKey: new Map(), // key -> item
    rev: 0, // bumps on any change
    structureRev: 0, // bumps when items are inserted
    phase: "idle", // idle | running | done
    aborted: false,
    openAssistant: null, // id of the assistant message being streamed
    openTs: null, // when that message started (its message_start): the time its bubble shows while it streams
    usage: null, // usage of the latest agent_end
    runUsage: null, // usage summed over the agent_end events of the current run
    totalUsage: { runs: 0 }, // summed over the runs that reported usage
    lastError: null,
    lastStatus: "", // status of the latest agent_end: completed | failed | cancelled (bridge runs)
    inflightSeq: 0, // deltas up to this seq are in the text an inflight frame gave
    inflightId: null, // the message that text belongs to
    todos: null, // {items: [...], seq} derived from the latest `todo` tool call
    subagents: [], // derived from `subagent` tool calls
    info: null, // latest session_info / hello snapshot seen in the stream
    lostEvents: false, // a buffer_overflow notice was seen
  };
}

function touch(state, item) {
  item.rev = (item.rev || 0) + 1;
  state.rev += 1;
}

function insertItem(state, item) {
  // keep items ordered by seq; most inserts append
  const items = state.items;
  let i = items.length;
  while (i > 0 && items[i - 1].seq > item.seq) i -= 1;
  items.splice(i, 0, item);
  state.byKey.set(item.key, item);
  state.structureRev += 1;
  touch(state, item);
  return item;
}

function ensureItem(state, key, seq, init) {
  let item = state.byKey.get(key);
  if (!item) item = insertItem(state, { key, seq, rev: 0, ...init() });
  return item;
}

function messageKey(id) {
  return `m:${id}`;
}
function toolKey(id) {
  return `t:${id}`;
}

// --- tools -----------------------------------------------------------------

function ensureTool(state, id, name, seq) {
  const item = ensureItem(state, toolKey(id), seq, () => ({
    kind: "tool",
    id,
    name: str(name, "tool"),
    args: null,
    status: "pending", // pending (called, not started) | running | completed | failed | cancelled
    partial: "",
    resultPreview: "",
    resultText: null,
    isError: false,
    durationMs: null,
  }));
  if (name && item.name === "tool") item.name = str(name);
  return item;
}

function isTodoTool(name) {
  const n = str(name).toLowerCase();
  return n === "todo" || n === "todos" || n === "todowrite" || n === "todo_write" || n === "update_todos";
}

function isSubagentTool(name) {
  const n = str(name).toLowerCase();
  return n === "subagent" || n === "subagents" || n === "task" || n === "spawn_agent" || n === "agent";
}

const DONE_WORDS = new Set(["done", "completed", "complete", "finished", "checked", "x", "closed"]);
const ACTIVE_WORDS = new Set(["in_progress", "in-progress", "inprogress", "active", "doing", "running", "started", "current"]);

/** A todo list snapshot from a `todo` tool's args (tolerant of common shapes), or null. */
export function todosFromArgs(args) {
  args = parseArgs(args);
  let list = null;
  if (Array.isArray(args)) list = args;
  else if (args && typeof args === "object") {
    list = pick(args, "todos", "tasks", "items", "list", "todo");
    if (list && !Array.isArray(list) && typeof list === "object") list = pick(list, "todos", "tasks", "items");
  }
  if (!Array.isArray(list)) return null;
  return list.map((t, i) => {
    if (typeof t === "string") return { id: String(i), text: t, status: "pending" };
    const text = str(pick(t, "content", "text", "title", "task", "description", "name", "subject"), "");
    let status = str(pick(t, "status", "state"), "").toLowerCase();
    const done = pick(t, "done", "completed", "checked");
    if (!status) status = done === true ? "completed" : "pending";
    if (DONE_WORDS.has(status)) status = "completed";
    else if (ACTIVE_WORDS.has(status)) status = "in_progress";
    else if (status === "canceled") status = "cancelled";
    else if (!/^[a-z_]{1,24}$/.test(status)) status = "pending"; // it becomes a class name
    return { id: str(pick(t, "id"), String(i)), text, status };
  });
}

function subagentInfo(args) {
  args = parseArgs(args);
  if (!args || typeof args !== "object") return { agent: "", task: str(args, "") };
  const agent = str(pick(args, "agent", "agentName", "agent_name", "subagent", "subagent_type", "name", "type"), "");
  const task = str(pick(args, "task", "prompt", "description", "message", "goal", "instructions"), "");
  const runId = str(pick(args, "runId", "run_id", "id"), "");
  const mode = pick(args, "async", "background") ? "async" : "";
  const tasks = Array.isArray(args.tasks) ? args.tasks : null; // parallel form: [{agent, task}]
  return { agent, task, runId, mode, tasks };
}

function deriveFromTool(state, tool) {
  if (isTodoTool(tool.name)) {
    const todos = todosFromArgs(tool.args);
    if (todos && (!state.todos || state.todos.seq <= tool.seq)) {
      state.todos = { items: todos, seq: tool.seq, toolId: tool.id };
    }
  } else if (isSubagentTool(tool.name)) {
    const info = subagentInfo(tool.args);
    let entry = state.subagents.find((s) => s.toolId === tool.id);
    if (!entry) {
      entry = { toolId: tool.id, seq: tool.seq };
      state.subagents.push(entry);
      state.subagents.sort((a, b) => a.seq - b.seq);
    }
    Object.assign(entry, info, {
      status: tool.status,
      resultPreview: tool.resultPreview || tool.resultText || tool.partial || "",
    });
  }
}

// --- decisions -----------------------------------------------------------------

function approvalId(ev) {
  return str(pick(ev, "approvalId", "approval_id", "id", "requestId"), "");
}
function clarifyId(ev) {
  return str(pick(ev, "clarifyId", "clarify_id", "clarificationId", "id", "requestId"), "");
}

function decidedFields(ev) {
  return {
    decidedBy: str(pick(ev, "decidedBy", "decided_by"), ""),
    surface: str(pick(ev, "surface"), ""),
    accepted: pick(ev, "accepted") !== false,
    resolvedAt: num(pick(ev, "ts")),
  };
}

function attachmentFields(ev) {
  const a = pick(ev, "attachment") || ev;
  return {
    attachmentId: str(pick(a, "attachmentId", "attachment_id", "id"), ""),
    filename: str(pick(a, "filename", "fileName", "name"), "attachment"),
    mimeType: str(pick(a, "mimeType", "mime_type", "contentType"), "application/octet-stream"),
    size: num(pick(a, "size", "sizeBytes")),
    inlineImage: Boolean(pick(a, "inlineImage", "inline_image")),
    url: str(pick(a, "url", "downloadUrl", "download_url", "path"), ""),
    expiresAt: num(pick(a, "expiresAt", "expires_at")),
  };
}

// --- the reducer ----------------------------------------------------------------

/**
 * Apply one event. Returns true if it changed the state (false for duplicates and
 * events of another session).
 */
export function applyEvent(state, ev) {
  if (!ev || typeof ev !== "object") return false;
  if (ev.sessionId !== undefined && ev.sessionId !== state.id) return false;
  if (ev.type === "inflight") return applyInflight(state, ev);
  const seq = num(ev.seq);
  const type = str(ev.type);
  if (seq !== null && seq > 0) {
    if (state.seen.has(seq)) return false;
    state.seen.add(seq);
    if (type !== "message_update" && seq > state.lastSeq) state.lastSeq = seq;
    if (seq > state.lastAny) state.lastAny = seq;
  }
  const s = seq ?? (state.items.length ? state.items[state.items.length - 1].seq : 0);
  const ts = num(ev.ts);
  state.rev += 1;

  switch (type) {
    case "message_start": {
      const msg = ev.message || {};
      const role = str(msg.role, "unknown");
      const id = str(msg.id, `seq-${s}`);
      if (role === "assistant") {
        // the item appears with its first text (a delta or the message_end), so that it sits
        // after any tool calls that ran before the text
        state.openAssistant = id;
        state.openTs = ts;
        const item = state.byKey.get(messageKey(id));
        if (item && !item.final) {
          item.streaming = true;
          touch(state, item);
        }
      } else if (role === "user") {
        const item = ensureItem(state, messageKey(id), s, () => newMessage(id, role, ts));
        touch(state, item);
      }
      return true;
    }
    case "message_update": {
      const delta = str(pick(ev, "delta"), "");
      if (!delta) return true;
      // older than a persisted event already applied: its text is covered (or superseded)
      if (seq !== null && seq < state.lastSeq && !state.openAssistant) return true;
      // already in the text an inflight frame gave for this message
      if (seq !== null && seq <= state.inflightSeq && (!state.openAssistant || state.openAssistant === state.inflightId)) return true;
      let id = state.openAssistant;
      if (!id) {
        // joined mid-message (or the start was not persisted yet): open a draft
        id = `draft-${s}`;
        state.openAssistant = id;
        state.openTs = ts;
      }
      const item = ensureItem(state, messageKey(id), s, () => newMessage(id, "assistant", state.openTs ?? ts));
      if (item.final) return true; // already complete; a late delta changes nothing
      item.streaming = true;
      item.text += delta;
      touch(state, item);
      if (state.phase !== "running") state.phase = "running";
      return true;
    }
    case "message_end": {
      const msg = ev.message || {};
      const role = str(msg.role, "unknown");
      const id = str(msg.id, `seq-${s}`);
      if (role === "toolResult") {
        const callId = str(msg.toolCallId, "");
        if (callId) {
          const tool = ensureTool(state, callId, msg.toolName, s);
          tool.resultText = str(msg.text, "");
          if (msg.isError === true) tool.isError = true;
          touch(state, tool);
          deriveFromTool(state, tool);
          return true;
        }
      }
      if (role === "system" && !str(msg.text)) return true;
      let key = messageKey(id);
      if (role === "assistant" && !str(msg.text) && !msg.thinking && !(Array.isArray(msg.toolCalls) && msg.toolCalls.length)) {
        // an assistant message that said nothing (a run that failed or was cancelled before any text): no empty
        // bubble. Its message_end is the message: a draft streamed before it goes too (a run a restart interrupted
        // may be closed so), so this page shows what a page loaded now shows, and nothing is left "streaming".
        const empty = state.byKey.get(key) || (state.openAssistant ? state.byKey.get(messageKey(state.openAssistant)) : null);
        if (empty && empty.kind === "message" && !empty.final) removeItem(state, empty);
        state.openAssistant = null;
        return true;
      }
      // the streamed draft of a message whose start we never saw takes the real id
      if (role === "assistant" && state.openAssistant && state.openAssistant !== id) {
        const draft = state.byKey.get(messageKey(state.openAssistant));
        if (draft && !draft.final && String(state.openAssistant).startsWith("draft-")) {
          state.byKey.delete(draft.key);
          draft.key = key;
          draft.id = id;
          state.byKey.set(key, draft);
          state.structureRev += 1;
        }
      }
      const item = ensureItem(state, key, s, () => newMessage(id, role, ts));
      item.role = role;
      item.text = str(msg.text, "");
      item.thinking = msg.thinking ? str(msg.thinking) : null;
      item.toolCalls = Array.isArray(msg.toolCalls) ? msg.toolCalls : [];
      item.stopReason = msg.stopReason ? str(msg.stopReason) : null;
      item.errorMessage = msg.errorMessage ? str(msg.errorMessage) : null;
      item.streaming = false;
      item.final = true;
      item.notice = ev.kind === "notice";
      item.interim = ev.interim === true;
      if (ts) item.ts = ts;
      touch(state, item);
      if (state.openAssistant === id || role === "assistant") state.openAssistant = null;
      for (const call of item.toolCalls) {
        if (!call || !call.id) continue;
        const tool = ensureTool(state, str(call.id), call.name, s);
        if (tool.args === null && call.argsJson !== undefined) tool.args = parseArgs(call.argsJson);
        touch(state, tool);
        deriveFromTool(state, tool);
      }
      return true;
    }
    case "tool_execution_start": {
      const id = str(pick(ev, "toolCallId", "tool_call_id"), `seq-${s}`);
      const tool = ensureTool(state, id, pick(ev, "toolName"), s);
      if (ev.args !== undefined) tool.args = parseArgs(ev.args);
      if (tool.status === "pending") tool.status = "running";
      tool.startedAt = ts;
      touch(state, tool);
      deriveFromTool(state, tool);
      return true;
    }
    case "tool_execution_update": {
      const id = str(pick(ev, "toolCallId", "tool_call_id"), "");
      const tool = ensureTool(state, id, pick(ev, "toolName"), s);
      tool.partial = str(pick(ev, "partial"), "");
      if (tool.status === "pending") tool.status = "running";
      touch(state, tool);
      deriveFromTool(state, tool);
      return true;
    }
    case "tool_execution_end": {
      const id = str(pick(ev, "toolCallId", "tool_call_id"), "");
      const tool = ensureTool(state, id, pick(ev, "toolName"), s);
      const status = str(pick(ev, "status"), "");
      tool.isError = ev.isError === true || status === "failed";
      tool.status = status === "cancelled" ? "cancelled" : tool.isError ? "failed" : "completed";
      tool.resultPreview = str(pick(ev, "resultPreview", "result_preview"), tool.resultPreview);
      const err = pick(ev, "error");
      if (err) tool.error = str(err);
      tool.endedAt = ts;
      tool.durationMs = num(pick(ev, "durationMs", "duration_ms"));
      if (tool.durationMs === null && tool.startedAt && ts) tool.durationMs = Math.max(0, ts - tool.startedAt);
      touch(state, tool);
      deriveFromTool(state, tool);
      return true;
    }
    case "agent_start":
      if (state.phase !== "running") state.runUsage = null;
      state.phase = "running";
      state.aborted = false;
      state.lastError = null;
      state.lastStatus = "";
      return true;
    case "agent_end": {
      const usage = ev.usage && typeof ev.usage === "object" ? ev.usage : null;
      if (usage && USAGE_FIELDS.some((k) => num(usage[k]) !== null)) {
        state.runUsage = addUsage(state.runUsage || {}, usage);
        state.usage = addUsage({}, usage);
        addUsage(state.totalUsage, usage);
        state.totalUsage.runs += 1;
      }
      const err = pick(ev, "error", "errorMessage");
      const status = str(pick(ev, "status"), "");
      if (err) state.lastError = str(err);
      state.lastStatus = status || (err ? "failed" : "");
      if (status === "cancelled") state.aborted = true;
      closeDrafts(state);
      return true;
    }
    case "agent_settled":
      state.phase = "done";
      if (ev.aborted === true) state.aborted = true;
      closeDrafts(state);
      insertItem(state, {
        key: `s:${s}`,
        seq: s,
        kind: "settled",
        aborted: state.aborted,
        failed: !state.aborted && (state.lastStatus === "failed" || Boolean(state.lastError)),
        error: state.lastError,
        usage: state.runUsage,
        ts,
      });
      state.runUsage = null;
      for (const item of state.items) {
        if (item.kind === "tool" && (item.status === "running" || item.status === "pending") && state.aborted) {
          item.status = "cancelled";
          touch(state, item);
        }
      }
      return true;
    case "hello":
    case "session_info":
      if (ev.session && typeof ev.session === "object") state.info = ev.session;
      return true;
    case "buffer_overflow":
      state.lostEvents = true;
      insertItem(state, {
        key: `o:${s}`,
        seq: s,
        kind: "notice",
        level: "warn",
        text: `Some events of this session were lost${num(pick(ev, "dropped")) ? ` (${num(pick(ev, "dropped"))} dropped)` : ""}.`,
        ts,
      });
      return true;
    case "bye":
      closeDrafts(state);
      return true;
    case "approval_request": {
      const id = approvalId(ev);
      const item = ensureItem(state, `a:${id}`, s, () => ({ kind: "approval", id, resolved: null }));
      item.command = str(pick(ev, "command"), "");
      item.description = str(pick(ev, "description", "title"), "");
      const choices = pick(ev, "choices");
      item.choices = Array.isArray(choices) && choices.length ? choices.map((c) => str(c)) : APPROVAL_CHOICES;
      item.deadline = num(pick(ev, "deadlineTs", "deadline_ts", "deadline", "expiresAt"));
      item.ts = ts;
      touch(state, item);
      return true;
    }
    case "approval_resolved": {
      const id = approvalId(ev);
      const item = ensureItem(state, `a:${id}`, s, () => ({ kind: "approval", id, command: "", choices: [] }));
      item.resolved = { choice: str(pick(ev, "choice"), ""), reason: str(pick(ev, "reason"), ""), ...decidedFields(ev) };
      touch(state, item);
      return true;
    }
    case "clarify_request": {
      const id = clarifyId(ev);
      const item = ensureItem(state, `c:${id}`, s, () => ({ kind: "clarify", id, resolved: null }));
      item.question = str(pick(ev, "question", "prompt"), "");
      const choices = pick(ev, "choices");
      item.choices = Array.isArray(choices) ? choices.map((c) => str(c)) : [];
      const free = pick(ev, "allowFreeText", "allow_free_text");
      item.allowFreeText = free === undefined ? true : Boolean(free);
      item.ts = ts;
      touch(state, item);
      return true;
    }
    case "clarify_resolved": {
      const id = clarifyId(ev);
      const item = ensureItem(state, `c:${id}`, s, () => ({ kind: "clarify", id, question: "", choices: [] }));
      item.resolved = { response: str(pick(ev, "response", "answer"), ""), ...decidedFields(ev) };
      touch(state, item);
      return true;
    }
    case "attachment_added": {
      const fields = attachmentFields(ev);
      const item = ensureItem(state, `f:${fields.attachmentId || s}`, s, () => ({ kind: "attachment" }));
      Object.assign(item, fields, { ts });
      touch(state, item);
      return true;
    }
    case "notification":
    case "notice": {
      const text = str(pick(ev, "text", "message"), "");
      const title = str(pick(ev, "title"), "");
      insertItem(state, { key: `n:${s}`, seq: s, kind: "notice", level: "info", title, text, ts });
      return true;
    }
    default:
      return true; // unknown types are ignored (forward compatible)
  }
}

const USAGE_FIELDS = ["inputTokens", "outputTokens", "totalCost"];

/** Add the numeric usage fields that are present into target (absent ones stay absent). */
function addUsage(target, usage) {
  for (const k of USAGE_FIELDS) {
    const v = num(usage[k]);
    if (v !== null) target[k] = (num(target[k]) || 0) + v;
  }
  return target;
}

function removeItem(state, item) {
  const i = state.items.indexOf(item);
  if (i >= 0) state.items.splice(i, 1);
  state.byKey.delete(item.key);
  state.structureRev += 1;
  state.rev += 1;
}

/**
 * The daemon's `inflight` extension frame: the text so far of the message open when this
 * client subscribed (the spec persists only message_end, so a page opened mid-stream would
 * miss it). Deltas of that message up to `seq` are already in `text`.
 */
function applyInflight(state, ev) {
  const text = str(ev.text, "");
  const msg = ev.message && typeof ev.message === "object" ? ev.message : {};
  const seq = num(ev.seq) ?? 0;
  let id = msg.id !== undefined && msg.id !== null ? str(msg.id) : state.openAssistant || `draft-${seq}`;
  const existing = state.byKey.get(messageKey(id));
  if (existing && existing.final) return false; // completed meanwhile: the message_end is authoritative
  if (!text && !existing) {
    // nothing said yet: the bubble appears with the first delta, as for a client that watched
    state.openAssistant = id;
    state.inflightSeq = Math.max(state.inflightSeq, seq);
    state.inflightId = id;
    return true;
  }
  // a reloaded page: the message's start (persisted, applied before this frame) gives its time
  const started = id === state.openAssistant ? state.openTs : null;
  const item = existing || insertItem(state, { ...newMessage(id, "assistant", num(ev.ts) ?? started), key: messageKey(id), seq, rev: 0 });
  if (text.length >= item.text.length || !item.text.startsWith(text)) item.text = text;
  item.streaming = true;
  state.openAssistant = id;
  state.inflightSeq = Math.max(state.inflightSeq, seq);
  state.inflightId = id;
  if (state.phase !== "running") state.phase = "running";
  touch(state, item);
  return true;
}

function newMessage(id, role, ts) {
  return { kind: "message", id, role, text: "", thinking: null, toolCalls: [], streaming: false, final: false, ts };
}

function closeDrafts(state) {
  if (state.openAssistant) {
    const item = state.byKey.get(messageKey(state.openAssistant));
    if (item && item.streaming) {
      item.streaming = false;
      touch(state, item);
    }
    state.openAssistant = null;
  }
}

/** Apply a batch in seq order (a REST page, or a buffered live batch). Returns the number applied. */
export function applyEvents(state, events) {
  if (!Array.isArray(events)) return 0;
  const sorted = events
    .filter((e) => e && typeof e === "object")
    .slice()
    .sort((a, b) => (num(a.seq) ?? 0) - (num(b.seq) ?? 0));
  let n = 0;
  for (const ev of sorted) if (applyEvent(state, ev)) n += 1;
  return n;
}

const decisionsOf = new WeakMap(); // state -> {items, structureRev, list}: its approvals and clarifications

/**
 * Pending (unanswered) approvals and clarifications, oldest first. Asked at every draw: the decisions are
 * picked out of the items again only when items were added or removed (not at every event of a stream,
 * in a conversation of tens of thousands of items).
 */
export function pendingDecisions(state) {
  let memo = decisionsOf.get(state);
  if (!memo || memo.items !== state.items || memo.structureRev !== state.structureRev) {
    const list = state.items.filter((i) => i.kind === "approval" || i.kind === "clarify");
    memo = { items: state.items, structureRev: state.structureRev, list };
    decisionsOf.set(state, memo);
  }
  return memo.list.filter((i) => !i.resolved);
}

/** Human text for who settled a decision: "you", "Pheby", "timeout"... */
export function describeDecider(resolved, answeredHere) {
  if (!resolved) return "";
  if (resolved.decidedBy === "timeout") return "timed out";
  if (resolved.decidedBy === "agent") return "decided by the agent";
  // a run that ended with the decision still open resolves it as denied, saying why
  const ended = { cancelled: "run cancelled", failed: "run failed", completed: "run ended", restart: "bridge restarted" };
  if (ended[resolved.decidedBy]) return `denied: ${ended[resolved.decidedBy]}`;
  const surface = resolved.surface;
  if (answeredHere && (!surface || surface === "lvmh")) return "answered here";
  if (surface) return `answered from ${surface}`;
  if (resolved.decidedBy === "local") return "answered in the agent's terminal";
  return "answered elsewhere";
}
