// Start, rename and delete the bridge's own conversations (REST /api/conversations, /api/models).
// pi plugin sessions are named and ended in pi: the daemon cannot rename or delete them.

import { ApiError } from "./api.js";
import { h, clear } from "./dom.js";
import { isPiSession } from "./labels.js";

const EFFORT_LABELS = { none: "none (no thinking)" };

/** A bridge conversation (demo or Hermes) rather than a pi plugin session. */
export function isBridgeConversation(s) {
  return Boolean(s) && !isPiSession(s);
}

export class ConversationDialogs {
  constructor({ api, toast, openSession, currentId, agent }) {
    this.api = api;
    this.agent = agent || (() => null); // GET /api/agent, or null: `reasoning: false` hides the effort picker
    this.toast = toast;
    this.openSession = openSession;
    this.currentId = currentId;
    this.models = null;
    this.mode = "new";
    this.target = null;
    const $ = (id) => document.getElementById(id);
    this.dialog = $("new-dialog");
    this.form = $("new-form");
    this.name = $("new-name");
    this.model = $("new-model");
    this.reasoning = $("new-reasoning");
    this.pickers = $("new-pickers");
    this.error = $("new-error");
    this.submit = $("new-create");
    this.confirm = $("confirm-dialog");
    $("new-close").addEventListener("click", () => this.dialog.close());
    $("new-cancel").addEventListener("click", () => this.dialog.close());
    $("confirm-cancel").addEventListener("click", () => this.confirm.close("cancel"));
    this.form.addEventListener("submit", (e) => {
      e.preventDefault();
      this.onSubmit();
    });
    this.dialog.addEventListener("click", (e) => {
      if (e.target === this.dialog) this.dialog.close();
    });
  }

  async loadModels() {
    if (this.models) return this.models;
    try {
      this.models = await this.api.models();
    } catch (err) {
      this.models = { providers: [], reasoningEfforts: [], error: err.message || String(err) };
    }
    return this.models;
  }

  fillPickers(m) {
    clear(this.model);
    clear(this.reasoning);
    const providers = Array.isArray(m.providers) ? m.providers : [];
    for (const p of providers) {
      const group = providers.length > 1 ? h("optgroup", { label: p.name || p.slug }) : this.model;
      for (const name of p.models || []) {
        const selected = name === m.currentModel && p.slug === m.currentProvider;
        group.appendChild(h("option", { value: JSON.stringify([p.slug, name]), selected }, providers.length > 1 ? name : `${name} · ${p.name || p.slug}`));
      }
      if (group !== this.model) this.model.appendChild(group);
    }
    for (const effort of m.reasoningEfforts || []) {
      this.reasoning.appendChild(h("option", { value: effort, selected: effort === m.currentReasoning }, EFFORT_LABELS[effort] || effort));
    }
    this.model.closest("label").hidden = !this.model.options.length;
    // an agent whose runs ignore the effort (the demo) gets no picker: its levels would promise nothing
    const agent = this.agent();
    this.reasoning.closest("label").hidden = !this.reasoning.options.length || Boolean(agent && agent.reasoning === false);
    this.pickers.hidden = !this.model.options.length && !this.reasoning.options.length;
  }

  async openNew() {
    this.mode = "new";
    this.target = null;
    document.getElementById("new-title").textContent = "New conversation";
    this.submit.textContent = "Start";
    this.name.value = "";
    this.error.textContent = "";
    this.pickers.hidden = true;
    if (!this.dialog.open) this.dialog.showModal();
    this.name.focus();
    const m = await this.loadModels();
    if (this.mode === "new") this.fillPickers(m);
  }

  rename(session) {
    this.mode = "rename";
    this.target = session;
    document.getElementById("new-title").textContent = "Rename conversation";
    this.submit.textContent = "Save";
    this.name.value = session.name || "";
    this.error.textContent = "";
    this.pickers.hidden = true;
    if (!this.dialog.open) this.dialog.showModal();
    this.name.focus();
    this.name.select();
  }

  async onSubmit() {
    this.error.textContent = "";
    this.submit.disabled = true;
    try {
      if (this.mode === "rename") {
        const name = this.name.value.trim();
        if (!name) {
          this.error.textContent = "A name cannot be empty.";
          return;
        }
        await this.api.renameConversation(this.target.id, name);
        this.dialog.close();
        return;
      }
      const body = {};
      const name = this.name.value.trim();
      if (name) body.name = name;
      if (!this.pickers.hidden && this.models && !this.model.closest("label").hidden && this.model.value) {
        const [provider, model] = JSON.parse(this.model.value);
        if (model !== this.models.currentModel || provider !== this.models.currentProvider) Object.assign(body, { model, provider });
      }
      if (!this.pickers.hidden && this.models && !this.reasoning.closest("label").hidden && this.reasoning.value
          && this.reasoning.value !== this.models.currentReasoning) body.reasoning = this.reasoning.value;
      const made = await this.api.createConversation(body);
      this.dialog.close();
      this.openSession(String(made.id));
    } catch (err) {
      this.error.textContent = err instanceof ApiError ? err.message : String(err);
    } finally {
      this.submit.disabled = false;
    }
  }

  /** Delete after a confirmation in a dialog. */
  remove(session) {
    const title = session.name || "this conversation";
    document.getElementById("confirm-title").textContent = "Delete this conversation?";
    const text = document.getElementById("confirm-text");
    clear(text);
    text.append("“", h("strong", title), "” and its messages will be deleted for every client. This cannot be undone.");
    this.confirm.returnValue = "";
    this.confirm.showModal();
    document.getElementById("confirm-cancel").focus();
    this.confirm.addEventListener("close", async () => {
      if (this.confirm.returnValue === "cancel" || this.confirm.returnValue === "") return;
      try {
        await this.api.deleteConversation(session.id);
        // the session list that follows takes the page back to the list (and says so)
        if (this.currentId() === String(session.id)) location.hash = "#";
      } catch (err) {
        this.toast(`Delete failed: ${err.message}`, "error");
      }
    }, { once: true });
  }
}
