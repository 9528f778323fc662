// Answers to approvals and questions, and attachments (download, image preview), as the timeline's
// cards call them. Per-item UI state (busy, errors, answered here, previews) lives in `ui`.

import { ApiError } from "./api.js";
import { h } from "./dom.js";

/**
 * The card callbacks for view.js: `{...ui, resolveApproval, answerClarify, download, preview}`.
 * `rerender()` draws the timeline again; `resync()` refetches the open session's events.
 */
export function cardActions({ api, ui, rerender, resync }) {
  async function decide(item, call) {
    ui.busy.add(item.key);
    ui.errors.delete(item.key);
    rerender();
    try {
      await call();
      ui.answeredHere.add(item.key);
    } catch (err) {
      if (err instanceof ApiError && err.status === 409) {
        ui.errors.set(item.key, item.resolved ? "" : "Already answered elsewhere.");
        resync(); // the *_resolved event (already in the stream or on its way) says who decided
      } else if (err instanceof ApiError && err.status === 404) {
        ui.errors.set(item.key, "This request is no longer pending.");
      } else {
        ui.errors.set(item.key, `Could not send: ${err.message}`);
      }
    } finally {
      ui.busy.delete(item.key);
      rerender();
    }
  }

  async function download(item) {
    ui.errors.delete(item.key);
    try {
      const blob = await api.attachment(item.attachmentId, item.url);
      const url = URL.createObjectURL(blob);
      const a = h("a", { href: url, download: item.filename || "attachment", hidden: true });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 60000);
    } catch (err) {
      ui.errors.set(item.key, `Download failed: ${err.message}`);
      rerender();
    }
  }

  async function preview(item, img) {
    const cached = ui.previews.get(item.attachmentId);
    if (cached) {
      img.src = cached;
      return;
    }
    try {
      const blob = await api.attachment(item.attachmentId, item.url);
      if (!blob.type.startsWith("image/") && !item.mimeType.startsWith("image/")) return;
      const url = URL.createObjectURL(blob);
      ui.previews.set(item.attachmentId, url);
      img.src = url;
    } catch {
      img.remove();
    }
  }

  return {
    resolveApproval: (item, choice, reason) => decide(item, () => api.resolveApproval(item.id, choice, reason)),
    answerClarify: (item, response) => decide(item, () => api.answerClarify(item.id, response)),
    download,
    preview,
  };
}
