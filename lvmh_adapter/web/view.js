// Rendering of one session's timeline items and side panel. Pure DOM building from reducer state;
// actions are callbacks supplied by app.js. Every piece of data is placed as text.

import { h } from "./dom.js";
import { copyButton, renderMarkdown } from "./markdown.js";
import { describeDecider } from "./reducer.js";
import { clock, formatBytes, formatUsage, relativeTime, toMillis, untilText } from "./format.js";

const CHOICE_LABELS = { once: "Allow once", session: "Allow for session", always: "Always allow", deny: "Deny" };
const CHOICE_PAST = { once: "Allowed once", session: "Allowed for the session", always: "Always allowed", deny: "Denied" };
const STATUS_LABELS = {
  pending: "called",
  running: "running",
  completed: "completed",
  failed: "failed",
  cancelled: "cancelled",
};

// One formatter for every timestamp's tooltip (toLocaleString with options builds a new one per call). The page's
// first Intl formatter costs it the locale data's set-up (20-60 ms): not on the way to a first paint. The tooltips
// of the <time>s drawn before are written the frame after (a tooltip shows on hover, never in that first frame).
let fullDate = null;
const untitled = []; // [element, Date] drawn before the formatter was made

function titleOf(el, d) {
  if (fullDate) {
    el.title = fullDate.format(d);
    return;
  }
  if (!untitled.length) {
    const make = () => {
      fullDate = fullDate || new Intl.DateTimeFormat([], { dateStyle: "full", timeStyle: "medium" });
      for (const [e, at] of untitled.splice(0)) e.title = fullDate.format(at);
    };
    requestAnimationFrame(() => setTimeout(make, 0));
    setTimeout(make, 1000); // a page opened hidden draws no frame: its <time>s are not held for long
  }
  untitled.push([el, d]);
}

/** A <time> showing "5 min ago" (refreshed by app.js), the full date and time on hover. */
export function timeEl(ts, cls = "") {
  const ms = toMillis(ts);
  if (ms === null) return null;
  const d = new Date(ms);
  const el = h(`time.rel${cls}`, { datetime: d.toISOString(), "data-ts": String(ms) }, relativeTime(ms));
  titleOf(el, d);
  return el;
}

/** "denied automatically in 4 min (14:05)": a <time> app.js refreshes; null for what never expires. */
export function expiryEl(expiresAt, what = "expires") {
  const ms = toMillis(expiresAt);
  if (ms === null) return null;
  const d = new Date(ms);
  const el = h("time.until", { datetime: d.toISOString(), "data-until": String(ms), "data-what": what },
    untilLine(ms, what));
  titleOf(el, d);
  return el;
}

export function untilLine(expiresAt, what = "expires", now = Date.now()) {
  const when = untilText(expiresAt, now);
  return when === "now" ? `${what} now` : `${what} ${when} (${clock(expiresAt)})`;
}

function pretty(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A one-line summary of tool args: the command/path/query if there is one, else compact JSON. */
export function argsSummary(args) {
  if (args === null || args === undefined) return "";
  if (typeof args === "string") return args.split("\n")[0].slice(0, 120);
  if (typeof args !== "object") return String(args);
  for (const k of ["command", "cmd", "path", "file_path", "filePath", "file", "pattern", "query", "url", "task", "prompt", "agent"]) {
    if (typeof args[k] === "string" && args[k]) return args[k].split("\n")[0].slice(0, 120);
  }
  if (Array.isArray(args.todos)) return `${args.todos.length} item${args.todos.length === 1 ? "" : "s"}`;
  let json = "";
  try {
    json = JSON.stringify(args);
  } catch {}
  return json.length > 120 ? json.slice(0, 119) + "…" : json;
}

function durationText(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  return `${Math.floor(ms / 60000)} min ${Math.round((ms % 60000) / 1000)} s`;
}

// --- items ----------------------------------------------------------------------

export function renderItem(item, ctx) {
  switch (item.kind) {
    case "message":
      return renderMessage(item);
    case "tool":
      return renderTool(item, ctx);
    case "approval":
      return renderApproval(item, ctx);
    case "clarify":
      return renderClarify(item, ctx);
    case "attachment":
      return renderAttachment(item, ctx);
    case "settled":
      return renderSettled(item);
    case "notice":
      return h(`div.notice.notice-${item.level || "info"}`, { role: item.level === "error" ? "alert" : null },
        item.title ? h("strong", item.title + " ") : null, item.text);
    default:
      return h("div.hidden");
  }
}

function renderMessage(item) {
  const role = item.role || "unknown";
  const known = role === "user" || role === "assistant";
  const cls = known ? role : "other";
  const who = item.notice ? "Notice" : role === "user" ? "You" : role === "assistant" ? "Agent" : role;
  const body = h("div.bubble");
  if (item.thinking) {
    body.appendChild(
      h("details.thinking", h("summary", "Thinking"), h("div.thinking-text", item.thinking)),
    );
  }
  if (item.text) {
    // the user's and the agent's words alike: markdown, sanitized (markdown.js), raw HTML shown as text
    body.appendChild(h("div.md", renderMarkdown(item.text, { highlightCode: !item.streaming })));
  } else if (item.streaming) body.appendChild(h("div.text.muted", "…"));
  if (item.errorMessage) body.appendChild(h("div.error-text", item.errorMessage));
  else if (item.stopReason === "aborted") body.appendChild(h("div.muted.small", "cancelled"));
  const text = item.text;
  return h(
    `article.msg.msg-${cls}${item.notice ? ".msg-notice" : ""}`,
    { "data-role": role, "data-id": item.id, "aria-busy": item.streaming ? "true" : null, class: item.streaming ? "streaming" : null },
    h("div.msg-meta", h("span.who", who), item.ts ? timeEl(item.ts) : null,
      item.streaming ? h("span.live-dot", { title: "streaming" }) : null,
      text && !item.streaming ? copyButton(() => text, "Copy message") : null),
    body,
  );
}

function renderTool(item, ctx) {
  const status = item.status;
  const open = ctx.openTools.has(item.id);
  const details = h(`details.tool.tool-${status}`, { "data-tool-id": item.id, "data-status": status, open });
  details.addEventListener("toggle", () => {
    if (details.open) ctx.openTools.add(item.id);
    else ctx.openTools.delete(item.id);
  });
  const summary = h(
    "summary",
    h("span.tool-icon", { "aria-hidden": "true" }, status === "running" ? "" : status === "failed" ? "✕" : status === "completed" ? "✓" : "•"),
    h("span.tool-name", item.name),
    h("span.tool-args", argsSummary(item.args)),
    h("span.tool-status", STATUS_LABELS[status] || status),
    item.durationMs !== null && item.durationMs !== undefined ? h("span.tool-dur", durationText(item.durationMs)) : null,
  );
  details.appendChild(summary);
  const body = h("div.tool-body");
  if (item.args !== null && item.args !== undefined) {
    body.appendChild(h("div.tool-label", "Arguments"));
    body.appendChild(h("pre.tool-pre", pretty(item.args)));
  }
  if (status === "running" && item.partial) {
    body.appendChild(h("div.tool-label", "Output so far"));
    body.appendChild(h("pre.tool-pre", item.partial));
  }
  const result = item.resultPreview || item.resultText || (status !== "running" ? item.partial : "");
  if (result) {
    body.appendChild(h("div.tool-label", item.isError ? "Error" : "Result"));
    body.appendChild(h(`pre.tool-pre${item.isError ? ".error-text" : ""}`, result));
  }
  if (item.error && item.error !== result) body.appendChild(h("div.error-text", item.error));
  if (!body.childNodes.length) body.appendChild(h("div.muted.small", "No details."));
  details.appendChild(body);
  return details;
}

function resolvedLine(item, what, ctx) {
  const r = item.resolved;
  const decider = describeDecider(r, ctx.answeredHere.has(item.key));
  return h("div.decision-result", { "data-decided-by": r.decidedBy || "", "data-surface": r.surface || "" },
    h("strong", what), decider ? h("span.muted", ` · ${decider}`) : null,
    r.reason ? h("div.muted.small", `Reason: ${r.reason}`) : null);
}

function renderApproval(item, ctx) {
  const card = h(`section.card.approval${item.resolved ? ".resolved" : ".pending"}`, { "data-approval-id": item.id, "aria-label": "Approval" });
  card.appendChild(h("div.card-title", item.resolved ? "Approval" : "Approval needed"));
  if (item.command) card.appendChild(h("pre.command", item.command));
  if (item.description) card.appendChild(h("div.muted", item.description));
  if (item.resolved) {
    const choice = item.resolved.choice;
    const what = item.resolved.decidedBy === "timeout" ? "Timed out" : CHOICE_PAST[choice] || choice || "Resolved";
    card.appendChild(resolvedLine(item, what, ctx));
  } else {
    const busy = ctx.busy.has(item.key);
    const reason = h("input.reason", { type: "text", placeholder: "Reason (optional, sent with Deny)", maxlength: "500", "aria-label": "Reason" });
    const buttons = h("div.choices");
    for (const choice of item.choices) {
      buttons.appendChild(
        h(`button.choice${choice === "deny" ? ".danger" : choice === "once" ? ".primary" : ""}`,
          { type: "button", "data-choice": choice, disabled: busy,
            onclick: () => ctx.resolveApproval(item, choice, choice === "deny" ? reason.value.trim() : "") },
          CHOICE_LABELS[choice] || choice),
      );
    }
    card.appendChild(buttons);
    card.appendChild(reason);
    // unanswered, the agent denies it by itself at its deadline (the demo: [demo] approval_timeout)
    if (item.deadline) card.appendChild(h("div.muted.small.expiry", "If nobody answers, ", expiryEl(item.deadline, "denied automatically")));
  }
  const err = ctx.errors.get(item.key);
  if (err) card.appendChild(h("div.error-text", { role: "alert" }, err));
  return card;
}

function renderClarify(item, ctx) {
  const card = h(`section.card.clarify${item.resolved ? ".resolved" : ".pending"}`, { "data-clarify-id": item.id, "aria-label": "Question" });
  card.appendChild(h("div.card-title", item.resolved ? "Question" : "The agent asks"));
  card.appendChild(h("div.question", item.question || "(no question text)"));
  if (item.resolved) {
    card.appendChild(resolvedLine(item, `Answer: ${item.resolved.response}`, ctx));
  } else {
    const busy = ctx.busy.has(item.key);
    if (item.choices.length) {
      const row = h("div.choices");
      for (const c of item.choices) {
        row.appendChild(h("button.choice", { type: "button", "data-choice": c, disabled: busy, onclick: () => ctx.answerClarify(item, c) }, c));
      }
      card.appendChild(row);
    }
    if (item.allowFreeText) {
      const input = h("input.free", { type: "text", placeholder: "Type an answer", maxlength: "4000", "aria-label": "Answer" });
      const form = h("form.free-form", {
        onsubmit: (e) => {
          e.preventDefault();
          const v = input.value.trim();
          if (v) ctx.answerClarify(item, v);
        },
      }, input, h("button.primary", { type: "submit", disabled: busy }, "Answer"));
      card.appendChild(form);
    }
  }
  const err = ctx.errors.get(item.key);
  if (err) card.appendChild(h("div.error-text", { role: "alert" }, err));
  return card;
}

function renderAttachment(item, ctx) {
  const isImage = item.mimeType.startsWith("image/") && /^image\/(png|jpeg|gif|webp|avif|bmp)$/.test(item.mimeType);
  const card = h("section.card.attachment", { "data-attachment-id": item.attachmentId });
  const meta = [item.mimeType, formatBytes(item.size)].filter(Boolean).join(" · ");
  card.appendChild(
    h("div.attachment-row",
      h(`span.file-icon${isImage ? ".file-image" : ""}`, { "aria-hidden": "true" }, fileBadge(item.filename, item.mimeType)),
      h("div.attachment-meta", h("div.filename", item.filename), h("div.muted.small", meta)),
      h("button.download", { type: "button", onclick: () => ctx.download(item) }, "Download")),
  );
  if (isImage) {
    const img = h("img.preview", { alt: item.filename, loading: "lazy" });
    card.appendChild(img);
    ctx.preview(item, img);
  }
  const err = ctx.errors.get(item.key);
  if (err) card.appendChild(h("div.error-text", { role: "alert" }, err));
  return card;
}

/** A short badge for a file: its extension (or the MIME subtype), at most 4 characters. */
export function fileBadge(filename, mimeType) {
  const m = /\.([A-Za-z0-9]{1,8})$/.exec(filename || "");
  const ext = m ? m[1] : String(mimeType || "").split("/")[1] || "file";
  return ext.replace(/[^A-Za-z0-9]/g, "").slice(0, 4).toUpperCase() || "FILE";
}

function renderSettled(item) {
  const usage = formatUsage(item.usage);
  const kind = item.aborted ? "cancelled" : item.failed ? "failed" : "done";
  const label = { cancelled: "Cancelled", failed: "Failed", done: "Done" }[kind];
  const line = h(`div.settled.settled-${kind}`, { "data-settled": kind === "failed" ? null : kind },
    h("span.settled-label", label),
    usage ? h("span.settled-usage", ` · ${usage}`) : null,
    item.ts ? h("span.settled-time", " · ", timeEl(item.ts)) : null);
  if (kind !== "failed") return line;
  return h("div.run-failed", { "data-settled": "failed", role: "alert" }, line,
    h("div.failed-error", h("strong", "The run failed: "), item.error || "no reason given"));
}

// --- side panel: todos, subagents, usage ----------------------------------------------

const TODO_MARK = { completed: "✓", in_progress: "▸", cancelled: "–", canceled: "–" };

export function renderPanel(state) {
  const parts = [];
  const todos = state.todos ? state.todos.items : [];
  const done = todos.filter((t) => t.status === "completed").length;
  parts.push(
    h("section.panel-section.todos",
      h("h3", "Tasks", todos.length ? h("span.count", ` ${done}/${todos.length}`) : null),
      todos.length
        ? h("ul.todo-list", todos.map((t) =>
            h(`li.todo.todo-${t.status}`, { "data-status": t.status },
              h("span.todo-mark", { "aria-hidden": "true" }, TODO_MARK[t.status] || "○"),
              h("span.todo-text", t.text || "(untitled)"))))
        : h("div.muted.small", "No task list yet."),
    ),
  );
  const subs = state.subagents;
  parts.push(
    h("section.panel-section.subagents",
      h("h3", "Subagents", subs.length ? h("span.count", ` ${subs.length}`) : null),
      subs.length
        ? h("ul.sub-list", subs.map((s) =>
            h(`li.sub.sub-${s.status}`,
              h("div.sub-head", h("span.sub-agent", s.agent || "subagent"), h("span.sub-status", STATUS_LABELS[s.status] || s.status || "")),
              s.task ? h("div.sub-task", s.task.length > 200 ? s.task.slice(0, 199) + "…" : s.task) : null,
              Array.isArray(s.tasks) && s.tasks.length ? h("div.muted.small", `${s.tasks.length} parallel tasks`) : null,
              s.resultPreview && s.status !== "running"
                ? h("details.sub-result", h("summary", "Result"), h("pre.tool-pre", s.resultPreview))
                : null)))
        : h("div.muted.small", "No subagents."),
    ),
  );
  const last = formatUsage(state.usage);
  const total = formatUsage(state.totalUsage);
  parts.push(
    h("section.panel-section.usage",
      h("h3", "Usage"),
      last ? h("div.usage-line", h("span.muted", "Last run: "), last) : h("div.muted.small", "No usage reported yet."),
      total && state.totalUsage.runs > 1
        ? h("div.usage-line", h("span.muted", `${state.totalUsage.runs} runs${state.hasOlder ? " loaded" : ""}: `), total) : null),
  );
  return parts;
}
