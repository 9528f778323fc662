// The prompt box. Send, or Stop in its place while a run streams; Esc stops the run too (from
// anywhere on the page but a dialog or another text field). In a pi session Enter still delivers a message
// during a run (pi queues it, as typed-ahead input); the bridge's own agent takes one run at a time,
// so there the text waits in the box.

import { h } from "./dom.js";

export class Composer {
  /**
   * `session()` describes the open session: `{id, reason, running, queues}` (`reason`: why prompts
   * cannot be sent now, or ""; `queues`: its agent takes messages during a run).
   */
  constructor({ api, toast, session }) {
    this.api = api;
    this.toast = toast;
    this.session = session;
    this.sending = false;
    this.stopping = null; // the session id a stop was asked for, until its run ends
    this.focusNext = false; // a conversation was just created: focus the box once it can take text
    document.addEventListener("keydown", (e) => this.onGlobalKey(e), true);
  }

  build() {
    const ta = h("textarea#prompt-input", { rows: "2", placeholder: "Message the agent… (Enter to send, Shift+Enter for a new line)", "aria-label": "Prompt", maxlength: "100000" });
    ta.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        this.send();
      }
    });
    ta.addEventListener("input", () => {
      ta.style.height = "auto";
      ta.style.height = Math.min(ta.scrollHeight, 240) + "px";
    });
    return h("form.composer#composer", { onsubmit: (e) => { e.preventDefault(); this.send(); } },
      h("div.composer-reason#composer-reason", { role: "status" }),
      h("div.composer-row", ta,
        h("button.primary#send-btn", { type: "submit" }, "Send"),
        h("button.danger-solid#stop-run-btn", { type: "button", hidden: true, title: "Stop the run (Esc)", "aria-keyshortcuts": "Escape",
                                                onclick: () => this.stop() }, "Stop")));
  }

  /** Put text in the box (an example command from the empty state) and focus it. */
  fill(text) {
    const ta = document.getElementById("prompt-input");
    if (!ta || ta.disabled) return;
    ta.value = text;
    ta.focus();
    ta.setSelectionRange(text.length, text.length);
  }

  render() {
    const ta = document.getElementById("prompt-input");
    if (!ta) return;
    const s = this.session();
    if (!s.running && this.stopping === s.id) this.stopping = null;
    const send = document.getElementById("send-btn");
    const stop = document.getElementById("stop-run-btn");
    ta.disabled = Boolean(s.reason);
    ta.placeholder = s.running && !s.queues
      ? "The agent is at work: Stop or Esc cancels it"
      : "Message the agent… (Enter to send, Shift+Enter for a new line)";
    send.hidden = s.running;
    send.disabled = Boolean(s.reason) || this.sending;
    stop.hidden = !s.running;
    stop.disabled = !s.running || this.stopping === s.id || Boolean(s.reason);
    stop.textContent = this.stopping === s.id ? "Stopping…" : "Stop";
    const el = document.getElementById("composer-reason");
    el.textContent = s.reason;
    el.hidden = !s.reason;
    document.getElementById("composer").classList.toggle("offline", Boolean(s.reason));
    if (this.focusNext && !ta.disabled && s.id) {
      this.focusNext = false;
      ta.focus();
    }
  }

  async send() {
    const ta = document.getElementById("prompt-input");
    const s = this.session();
    if (!ta || !s.id || this.sending) return;
    const message = ta.value;
    if (!message.trim() || s.reason) return;
    if (s.running && !s.queues) {
      this.toast("A run is already active: Stop it (Esc) or wait for it to end. Your message stays in the box.", "info", 4000);
      return;
    }
    this.sending = true;
    this.render();
    try {
      await this.api.prompt(s.id, message);
      if (this.session().id === s.id) {
        ta.value = "";
        ta.style.height = "auto";
      }
    } catch (err) {
      // 409: offline, or a run is active (the daemon's message says which)
      this.toast(err.status === 409 ? `Not sent: ${err.message}` : `Prompt failed: ${err.message}`, "error");
    } finally {
      this.sending = false;
      this.render();
      ta.focus();
    }
  }

  async stop() {
    const s = this.session();
    if (!s.id || !s.running || this.stopping === s.id || s.reason) return;
    this.stopping = s.id;
    this.render();
    try {
      await this.api.abort(s.id);
    } catch (err) {
      this.stopping = null;
      this.toast(`Stop failed: ${err.message}`, "error");
      this.render();
    }
  }

  onGlobalKey(e) {
    if (e.key !== "Escape" || e.isComposing || e.defaultPrevented) return;
    if (document.querySelector("dialog[open]") || !document.getElementById("gate").hidden) return; // Esc closes those
    // Esc in another field (a deny reason, an answer, the search) leaves the run alone: it may be an undo
    const field = document.activeElement;
    if (field && field.id !== "prompt-input" && (field.matches("input, textarea, select") || field.isContentEditable)) return;
    if (!this.session().running) return;
    e.preventDefault();
    this.stop();
  }
}
