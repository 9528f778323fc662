// Times, sizes and usage as people read them (pure: no DOM).

function num(v) {
  return typeof v === "number" && Number.isFinite(v) ? v : null;
}

/** Epoch milliseconds for a protocol timestamp (ms per spec; tolerates seconds). */
export function toMillis(t) {
  const n = num(t);
  if (n === null) return null;
  return n < 1e11 ? n * 1000 : n;
}

/** "just now", "5 min ago", "3 h ago", "2 d ago", or a date. */
export function relativeTime(t, now = Date.now()) {
  const ms = toMillis(t);
  if (ms === null) return "";
  const d = Math.max(0, now - ms) / 1000;
  if (d < 45) return "just now";
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  if (d < 86400 * 14) return `${Math.round(d / 86400)} d ago`;
  return new Date(ms).toISOString().slice(0, 10);
}

/** How long until `t`: "in 45 s", "in 4 min", "in 2 h", or "now" once it passed. */
export function untilText(t, now = Date.now()) {
  const ms = toMillis(t);
  if (ms === null) return "";
  const d = (ms - now) / 1000;
  if (d <= 0) return "now";
  if (d < 60) return `in ${Math.ceil(d)} s`;
  if (d < 3600) return `in ${Math.ceil(d / 60)} min`;
  return `in ${Math.round(d / 3600)} h`;
}

/** The local time of day of `t` ("14:05", "02:05\u00a0PM"): one unbreakable piece, so a narrow card
 * never leaves "PM" alone on the next line. */
export function clock(t) {
  const ms = toMillis(t);
  if (ms === null) return "";
  return new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }).replace(/\s/g, "\u00a0");
}

export function formatBytes(n) {
  if (typeof n !== "number" || !Number.isFinite(n)) return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

/** `n` as `toLocaleString("en-US")` writes it ("12,345"); an integer without Intl, whose first use costs the page
 * its locale data's set-up (view.js, `timeEl`): the side panel's usage is drawn in a conversation's first paint. */
export function grouped(n) {
  if (!Number.isSafeInteger(n)) return n.toLocaleString("en-US");
  return String(n).replace(/\B(?=(\d{3})+$)/g, ",");
}

export function formatUsage(u) {
  if (!u) return "";
  const parts = [];
  if (num(u.inputTokens) !== null) parts.push(`${grouped(u.inputTokens)} in`);
  if (num(u.outputTokens) !== null) parts.push(`${grouped(u.outputTokens)} out`);
  if (num(u.totalCost) !== null && u.totalCost > 0) parts.push(`$${u.totalCost.toFixed(4)}`);
  return parts.join(" · ");
}
