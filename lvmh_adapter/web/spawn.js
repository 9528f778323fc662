// "New agent" dialog: connect GitLab with a personal access token, pick a repo and a branch,
// spawn a container session (POST /api/spawn) and watch its jobs (spawn_status frames).

import { ApiError } from "./api.js";
import { h, clear, replaceChildren } from "./dom.js";
import { relativeTime } from "./format.js";

// the daemon's job states (lvmh spawn): active, then running, or a terminal state
const ACTIVE = new Set(["queued", "cloning", "pulling", "building", "creating", "starting"]);
const JOB_LABELS = {
  queued: "queued",
  cloning: "cloning",
  building: "building image",
  starting: "starting container",
  running: "running",
  failed: "failed",
  exited: "exited",
  stopped: "stopped",
  cancelled: "cancelled",
};

export class SpawnDialog {
  constructor({ api, toast, openSession, sessionKnown }) {
    this.api = api;
    this.toast = toast;
    this.openSession = openSession;
    this.sessionKnown = sessionKnown;
    this.jobs = [];
    this.unavailable = ""; // why spawning is not possible (no Docker engine), from GET /api/spawn/status
    this.checking = false; // open() is asking the daemon; it renders once both answers are in
    this.repos = null;
    this.status = null;
    this.filter = "";
    this.selected = null;
    this.dialog = document.getElementById("spawn-dialog");
    this.body = document.getElementById("spawn-body");
    this.jobsEl = document.getElementById("spawn-jobs");
    document.getElementById("spawn-close").addEventListener("click", () => this.dialog.close());
    this.dialog.addEventListener("click", (e) => {
      if (e.target === this.dialog) this.dialog.close(); // click on the backdrop
    });
  }

  async open() {
    if (!this.dialog.open) this.dialog.showModal();
    this.error = "";
    this.checking = true;
    replaceChildren(this.body, h("div.muted", "Checking Docker and GitLab…"));
    const gitlab = this.api.gitlabStatus().then(
      (st) => { this.status = st; },
      (err) => {
        this.status = null;
        this.error = this.describe(err, "GitLab status");
      });
    await Promise.all([this.refreshJobs(), gitlab]);
    if (this.status && this.status.connected) await this.loadRepos();
    this.checking = false;
    this.render();
  }

  describe(err, what) {
    if (err instanceof ApiError && err.status === 503) return err.message || `${what} is unavailable on this daemon.`;
    if (err instanceof ApiError && err.status === 404) return `${what} is not supported by this daemon.`;
    return `${what}: ${err.message || err}`;
  }

  async loadRepos() {
    this.repos = null;
    try {
      const repos = await this.api.gitlabRepos();
      this.repos = Array.isArray(repos) ? repos : [];
    } catch (err) {
      this.repos = [];
      this.error = this.describe(err, "Listing repositories");
    }
  }

  render() {
    if (!this.dialog.open) return;
    const parts = [];
    if (this.unavailable) parts.push(this.renderUnavailable());
    if (this.error && this.error !== this.unavailable) parts.push(h("div.error-text", { role: "alert" }, this.error));
    const st = this.status;
    if (st && st.connected) parts.push(this.renderConnected(st));
    else if (st) parts.push(this.renderConnect(st));
    replaceChildren(this.body, parts);
    this.renderJobs();
  }

  /** No Docker engine: nothing can be spawned, and the daemon's one-line reason says why. */
  renderUnavailable() {
    return h("div.spawn-unavailable#spawn-unavailable", { role: "alert" },
      h("strong", "Docker cannot be reached, so no agent can be spawned."),
      h("div.spawn-reason#spawn-reason", this.unavailable),
      h("div.small", "A spawned agent runs in a container on this daemon's Docker engine. Start Docker, or point ",
        h("code", "[lvmh] docker_url"), " at it, then check again. ",
        h("strong", "New conversation"), " works without Docker."),
      h("button#spawn-recheck", { type: "button", onclick: () => this.open() }, "Check again"));
  }

  renderConnect(st) {
    const input = h("input#pat-input", { type: "password", autocomplete: "off", placeholder: "glpat-…", required: true, "aria-label": "GitLab personal access token" });
    const btn = h("button.primary#pat-connect", { type: "submit" }, "Connect");
    const form = h("form.stack", {
      onsubmit: async (e) => {
        e.preventDefault();
        const token = input.value.trim();
        if (!token) return;
        btn.disabled = true;
        this.error = "";
        try {
          const res = await this.api.gitlabConnect(token);
          input.value = "";
          this.toast(`GitLab connected as ${res && res.username ? res.username : "you"}.`, "info");
          this.status = await this.api.gitlabStatus();
          await this.loadRepos();
        } catch (err) {
          this.error = err instanceof ApiError && (err.status === 401 || err.status === 400)
            ? `GitLab refused the token: ${err.message}` : this.describe(err, "Connecting GitLab");
        } finally {
          btn.disabled = false;
          this.render();
        }
      },
    },
      h("p", "Connect GitLab to spawn an agent in a container from one of your repositories."),
      st.baseUrl ? h("div.muted.small", `GitLab: ${st.baseUrl}`) : null,
      h("label", { for: "pat-input" }, "Personal access token (scope read_api, read_repository)"),
      h("div.row", input, btn),
      h("div.muted.small", "The token is kept by the daemon and never shown again."));
    return form;
  }

  renderConnected(st) {
    const wrap = h("div.stack");
    wrap.appendChild(
      h("div.row.spread",
        h("div", "GitLab: ", h("strong", st.username ? `@${st.username}` : "connected"),
          st.baseUrl ? h("span.muted", ` on ${st.baseUrl}`) : null),
        h("button.linkish", { type: "button", onclick: () => this.disconnect() }, "Disconnect")),
    );
    const search = h("input#repo-filter", { type: "search", placeholder: "Filter repositories", value: this.filter, "aria-label": "Filter repositories" });
    const list = h("ul.repo-list#repo-list", { role: "listbox", "aria-label": "Repositories" });
    const branch = h("input#branch-input", { type: "text", placeholder: "default branch", "aria-label": "Branch" });
    const go = h("button.primary#spawn-go", { type: "button", disabled: !this.selected || Boolean(this.unavailable),
      title: this.unavailable ? "Docker cannot be reached" : null }, "Spawn agent");
    const fill = () => {
      clear(list);
      const q = this.filter.toLowerCase();
      const repos = (this.repos || []).filter((r) => !q || String(r.path || "").toLowerCase().includes(q) || String(r.name || "").toLowerCase().includes(q));
      if (this.repos === null) list.appendChild(h("li.muted", "Loading…"));
      else if (!repos.length) list.appendChild(h("li.muted", this.repos.length ? "No match." : "No repositories."));
      for (const r of repos.slice(0, 200)) {
        const selected = this.selected && this.selected.path === r.path;
        list.appendChild(
          h(`li.repo${selected ? ".selected" : ""}`, {
            role: "option", "aria-selected": selected ? "true" : "false", tabindex: "0", "data-repo": r.path,
            onclick: () => select(r),
            onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); select(r); } },
          },
            h("div.repo-path", r.path || r.name),
            h("div.muted.small", [r.defaultBranch, relativeTime(Date.parse(r.lastActivityAt) || null)].filter(Boolean).join(" · "))),
        );
      }
    };
    const select = (r) => {
      this.selected = r;
      branch.placeholder = r.defaultBranch || "default branch";
      go.disabled = Boolean(this.unavailable);
      fill();
    };
    search.addEventListener("input", () => {
      this.filter = search.value;
      fill();
    });
    go.addEventListener("click", async () => {
      if (!this.selected) return;
      go.disabled = true;
      this.error = "";
      try {
        const res = await this.api.spawn(this.selected.path, branch.value.trim() || undefined);
        this.unavailable = "";
        this.toast(`Spawning ${this.selected.path}…`, "info");
        this.refreshJobs();
        if (res && res.sessionId) {
          this.dialog.close();
          this.openSession(String(res.sessionId));
        }
      } catch (err) {
        this.error = this.describe(err, "Spawn");
        if (err instanceof ApiError && err.status === 503) this.unavailable = err.message; // the engine went away
        this.render();
      } finally {
        go.disabled = !this.selected || Boolean(this.unavailable);
      }
    });
    if (this.selected) branch.placeholder = this.selected.defaultBranch || "default branch";
    fill();
    wrap.appendChild(search);
    wrap.appendChild(list);
    wrap.appendChild(h("div.row", h("label", { for: "branch-input" }, "Branch"), branch, go));
    return wrap;
  }

  async disconnect() {
    try {
      await this.api.gitlabDisconnect();
      this.status = await this.api.gitlabStatus();
      this.repos = null;
      this.selected = null;
    } catch (err) {
      this.error = this.describe(err, "Disconnecting GitLab");
    }
    this.render();
  }

  async refreshJobs() {
    const before = this.unavailable;
    try {
      const { jobs, unavailable } = await this.api.spawnStatus();
      this.unavailable = unavailable;
      this.setJobs(jobs);
    } catch (err) {
      // an older daemon answers 503 without an engine; the list stays as the last frames said
      if (err instanceof ApiError && err.status === 503) this.unavailable = err.message;
      else if (err instanceof ApiError && err.status === 404) this.unavailable = "This daemon cannot spawn agents.";
    }
    if (this.unavailable !== before && !this.checking) this.render();
  }

  setJobs(jobs) {
    this.jobs = jobs.filter((j) => j && typeof j === "object");
    this.renderJobs();
  }

  renderJobs() {
    // the sidebar strip shows what is in flight (and failures); the dialog lists every job
    const strip = this.jobsEl;
    clear(strip);
    const shown = this.jobs.filter((j) => {
      const state = String(j.state);
      if (ACTIVE.has(state) || state === "failed") return true;
      // a running container whose agent has not connected yet
      return state === "running" && j.sessionId && !this.sessionKnown(String(j.sessionId));
    });
    strip.hidden = !shown.length;
    for (const j of shown) strip.appendChild(this.jobRow(j));
    const inDialog = document.getElementById("spawn-dialog-jobs");
    if (inDialog) {
      clear(inDialog);
      if (!this.jobs.length) inDialog.appendChild(h("li.muted.small", "No spawn jobs."));
      for (const j of this.jobs) inDialog.appendChild(this.jobRow(j));
    }
  }

  jobRow(j) {
    const state = String(j.state || "");
    const label = JOB_LABELS[state] || state || "pending";
    const failed = state === "failed";
    const sid = j.sessionId ? String(j.sessionId) : "";
    return h(`li.job${failed ? ".job-failed" : ""}`, { "data-state": state, "data-session-id": sid || null },
      h("span.job-repo", String(j.repo || "")),
      h("span.job-state", ACTIVE.has(state) ? h("span.spinner.small", { "aria-hidden": "true" }) : null, label),
      j.error ? h("div.error-text.small", String(j.error)) : null,
      sid && !failed ? h("a.job-link", { href: `#/s/${encodeURIComponent(sid)}`, onclick: () => this.dialog.open && this.dialog.close() }, "open") : null);
  }
}
