// REST client for /api (the lvmh protocol, "Transport 2"). Every call carries the bearer token.

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

/** The response boot.js asked for this very request while the page loaded (same token), once; else null. */
function takeEarly(method, path, token) {
  const early = typeof window !== "undefined" ? window.lvmhEarly : null;
  if (!early || method !== "GET" || early.token !== token) return null;
  const response = early.responses.get(path);
  if (response) early.responses.delete(path);
  return response || null;
}

/**
 * The page's first requests are asked (app.js's start): what boot.js asked for and was not taken is let go, and a
 * boot.js that runs only now (an async script: after app.js's one script, under load) asks nothing. A response left
 * waiting would answer the same request made later (a search cleared, a reconnect's newest page) with the page
 * load's list or events: a session connected since missing from the list until the next change or a reload.
 */
export function closeEarly() {
  if (typeof window !== "undefined") window.lvmhEarly = null;
}

export class Api {
  constructor(getToken, onUnauthorized) {
    this.getToken = getToken;
    this.onUnauthorized = onUnauthorized || (() => {});
  }

  async request(method, path, body) {
    return (await this.exchange(method, path, body)).data;
  }

  /** The request and its response headers: `{data, headers}`. */
  async exchange(method, path, body) {
    const token = this.getToken() || "";
    const headers = { Authorization: `Bearer ${token}` };
    const init = { method, headers, cache: "no-store" };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    let res;
    try {
      res = await (takeEarly(method, path, token) || fetch(path, init));
    } catch (err) {
      throw new ApiError(0, "The daemon cannot be reached.", null);
    }
    let data = null;
    const text = await res.text().catch(() => "");
    if (text) {
      try {
        data = JSON.parse(text);
      } catch {
        data = null;
      }
    }
    if (!res.ok) {
      const message = (data && typeof data.error === "string" && data.error) || `${res.status} ${res.statusText}`;
      if (res.status === 401) this.onUnauthorized(message);
      throw new ApiError(res.status, message, data);
    }
    return { data, headers: res.headers };
  }

  /** The spec's full list (GET /api/sessions). */
  sessions() {
    return this.request("GET", "/api/sessions");
  }

  /** A page of the list, in the web UI's order: `{sessions, total, next}` (docs/lvmh.md, "The session list in pages"). */
  sessionsPage({ limit = 50, cursor = null, q = "" } = {}) {
    const query = new URLSearchParams({ limit: String(limit) });
    if (cursor) query.set("cursor", cursor);
    if (q) query.set("q", q);
    return this.request("GET", `/api/sessions?${query}`);
  }

  /** One session's entry. */
  session(id) {
    return this.request("GET", `/api/sessions/${encodeURIComponent(id)}`);
  }

  /** The newest `limit` stored events below `before` ("latest": the newest page): `{events, older}`. */
  async eventsPage(id, { before = "latest", limit = 200 } = {}) {
    const { data, headers } = await this.exchange("GET", `/api/sessions/${encodeURIComponent(id)}/events?before=${before}&limit=${limit}`);
    return { events: Array.isArray(data) ? data : [], older: headers.get("X-Lvmh-Older") === "true" };
  }

  /** Find in a conversation: `{hits: [{seq, type, kind, id, snippet, match}], next}`, newest first. */
  search(id, q, { before = null, limit = 100 } = {}) {
    const query = new URLSearchParams({ q, limit: String(limit) });
    if (before !== null) query.set("before", String(before));
    return this.request("GET", `/api/sessions/${encodeURIComponent(id)}/search?${query}`);
  }

  prompt(id, message) {
    return this.request("POST", `/api/sessions/${encodeURIComponent(id)}/prompt`, { message });
  }
  abort(id) {
    return this.request("POST", `/api/sessions/${encodeURIComponent(id)}/abort`, {});
  }
  stopContainer(id) {
    return this.request("DELETE", `/api/sessions/${encodeURIComponent(id)}/container`);
  }
  resolveApproval(id, choice, reason) {
    const body = { choice };
    if (reason) body.reason = reason;
    return this.request("POST", `/api/approvals/${encodeURIComponent(id)}`, body);
  }
  answerClarify(id, response) {
    return this.request("POST", `/api/clarifications/${encodeURIComponent(id)}`, { response });
  }
  // the bridge's own conversations (lvmh_adapter/conversations.py)
  models() {
    return this.request("GET", "/api/models");
  }
  /** `{name, label, commands: [{command, usage, description}], reasoning}` (lvmh_adapter/conversations.py). */
  agent() {
    return this.request("GET", "/api/agent");
  }
  createConversation(body) {
    return this.request("POST", "/api/conversations", body || {});
  }
  renameConversation(id, name) {
    return this.request("PATCH", `/api/conversations/${encodeURIComponent(id)}`, { name });
  }
  deleteConversation(id) {
    return this.request("DELETE", `/api/conversations/${encodeURIComponent(id)}`);
  }
  spawn(repo, branch) {
    const body = { repo };
    if (branch) body.branch = branch;
    return this.request("POST", "/api/spawn", body);
  }
  /** `{jobs, unavailable}`: without a Docker engine the daemon answers `[]` and says why in a header. */
  async spawnStatus() {
    const { data, headers } = await this.exchange("GET", "/api/spawn/status");
    return { jobs: Array.isArray(data) ? data : [], unavailable: headers.get("X-Lvmh-Spawn-Unavailable") || "" };
  }
  gitlabStatus() {
    return this.request("GET", "/api/gitlab/status");
  }
  gitlabConnect(token) {
    return this.request("POST", "/api/gitlab/connect", { token });
  }
  gitlabDisconnect() {
    return this.request("DELETE", "/api/gitlab/connect");
  }
  gitlabRepos() {
    return this.request("GET", "/api/gitlab/repos");
  }

  /** Download an attachment as a Blob (the bearer header cannot ride on a plain link). */
  async attachment(id, url) {
    const path = url && url.startsWith("/api/") ? url : `/api/attachments/${encodeURIComponent(id)}`;
    let res;
    try {
      res = await fetch(path, { headers: { Authorization: `Bearer ${this.getToken() || ""}` }, cache: "no-store" });
    } catch {
      throw new ApiError(0, "The daemon cannot be reached.", null);
    }
    if (!res.ok) {
      let message = `${res.status} ${res.statusText}`;
      try {
        const data = await res.json();
        if (data && data.error) message = data.error;
      } catch {}
      if (res.status === 401) this.onUnauthorized(message);
      throw new ApiError(res.status, message, null);
    }
    return res.blob();
  }
}
