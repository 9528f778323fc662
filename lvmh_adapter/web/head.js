// The open conversation's header: back (phones), its name and run state, who answers and whether
// it can ("Demo agent · ready", "pi · connected": the bridge's own agent is never "online"), its
// chips, and its actions (behind "⋯" on a phone: docs/web-ui.md).

import { h, replaceChildren } from "./dom.js";
import { isPiSession, presence, sessionTitle, shortPath } from "./labels.js";

/**
 * `o`: {info, phase, outcome, online, known, connOpen, menuOpen, stopArmed} and the actions offered
 * (`onFind`, `onRename`, `onDelete`, `onStopContainer`: null when the session has none), `onMenu` toggles "⋯".
 */
export function drawHead(head, o) {
  const { info } = o;
  const pi = isPiSession(info);
  const chips = [];
  if (info.repo) chips.push(h("span.chip", { title: "repository" }, info.repo));
  if (info.cwd) chips.push(h("span.chip.mono", { title: info.cwd }, shortPath(info.cwd)));
  const model = [info.model, info.provider].filter(Boolean).join(" · ");
  if (model) chips.push(h("span.chip", { title: "model" }, model));
  if (o.known && pi) chips.push(h(`span.chip${info.agent ? ".chip-agent" : ""}`, info.agent ? "pi · container" : "pi · terminal"));
  const status =
    o.phase === "running" ? h("span.pill.pill-running", { "data-phase": "running" }, h("span.spinner", { "aria-hidden": "true" }), "running")
    : o.phase === "done" ? h(`span.pill.pill-${o.outcome}`, { "data-phase": "done", "data-outcome": o.outcome }, o.outcome)
    : null;
  const who = !o.connOpen ? "status unknown"
    : !o.known ? "not connected yet"
    : `${pi ? "pi" : `${info.agentLabel || "The"} agent`} · ${presence({ ...info, online: o.online })}`;
  const actions = h("div.head-actions#head-actions", { class: o.menuOpen ? "open" : "" });
  if (o.onFind) actions.appendChild(h("button#find-btn", { type: "button", onclick: o.onFind, title: "Find in this conversation (Ctrl+F)", "aria-keyshortcuts": "Control+F" }, "Find"));
  if (o.onRename) actions.appendChild(h("button#rename-btn", { type: "button", onclick: o.onRename, title: "Rename this conversation" }, "Rename"));
  if (o.onDelete) actions.appendChild(h("button.danger#delete-btn", { type: "button", onclick: o.onDelete, title: "Delete this conversation" }, "Delete"));
  if (o.onStopContainer) {
    actions.appendChild(h("button#stop-btn", { type: "button", class: o.stopArmed ? "danger" : "", onclick: o.onStopContainer },
      o.stopArmed ? "Confirm stop" : "Stop container"));
  }
  const menu = actions.childNodes.length
    ? h("button.icon-btn.head-menu-btn#head-menu-btn", { type: "button", "aria-label": "More actions", title: "More actions",
                                                        "aria-expanded": o.menuOpen ? "true" : "false", "aria-controls": "head-actions",
                                                        onclick: o.onMenu }, "⋯")
    : null;
  replaceChildren(head,
    h("a.back.icon-btn", { href: "#", "aria-label": "Back to sessions", title: "Back to sessions" }, "‹"),
    h("div.head-main",
      h("div.head-title",
        h(`span.dot${o.online ? ".online" : ".offline"}`, { "aria-hidden": "true" }),
        h("h2#session-title", sessionTitle(info)),
        status),
      h("div.chips", h("span.muted.presence#presence", who), chips)),
    menu,
    actions);
}
