// The empty state's list of what the agent can do: its commands, as the daemon describes them
// (GET /api/agent, from the agent itself: the demo's table in bridge_core/bridge/demo.py).

import { h } from "./dom.js";

/**
 * The list, or null when the agent names no commands. With `onPick(text)` each command is a button
 * that puts it in the prompt box (a conversation is open); without it, plain text (none is open).
 */
export function agentIntro(agent, onPick) {
  if (!agent || !Array.isArray(agent.commands) || !agent.commands.length) return null;
  const label = agent.label || "this";
  return h("section.intro#agent-intro", { "aria-label": `What the ${label} agent can do` },
    h("p.intro-lead", `Write anything, or try one of the ${label} agent's commands:`),
    h("ul.intro-list", agent.commands.map((c) => {
      const usage = String(c.usage || c.command);
      const text = usage === c.command ? usage : `${c.command} `;
      return h("li.intro-item",
        onPick
          ? h("button.intro-cmd", { type: "button", "data-command": c.command, title: `Put “${text.trim()}” in the box`,
                                    onclick: () => onPick(text) }, usage)
          : h("code.intro-cmd", usage),
        h("span.intro-desc", String(c.description || "")));
    })));
}
