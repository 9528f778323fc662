// How a session is named and found in the list (pure: no DOM).

export function sessionTitle(s) {
  if (s && s.name) return String(s.name);
  if (s && s.repo) return String(s.repo);
  return s ? `Session ${String(s.id).slice(0, 8)}` : "Session";
}

export function shortPath(p) {
  if (!p) return "";
  p = String(p);
  const home = p.match(/^\/(home\/[^/]+|root)(\/|$)/);
  if (home) p = "~" + p.slice(home[0].length - (home[2] ? 1 : 0));
  return p.length > 48 ? "…" + p.slice(-47) : p;
}

export function sessionMatches(s, needle) {
  if (!needle) return true;
  return [s.name, s.repo, s.cwd].some((v) => typeof v === "string" && v.toLowerCase().includes(needle));
}

/** A pi session (an lvmh plugin) rather than one of the bridge's own conversations (demo, Hermes). */
export function isPiSession(s) {
  if (!s) return false;
  if (typeof s.agentName === "string") return s.agentName === "lvmh";
  return Boolean(s.agent) || Boolean(s.cwd) || Boolean(s.repo); // a daemon that does not say
}

/** Who answers in a session, as its badge says it: "Demo", "Hermes", "pi", "pi · container". */
export function agentBadge(s) {
  if (isPiSession(s)) return s.agent ? "pi · container" : "pi";
  return (s && s.agentLabel) || "agent";
}

/**
 * Whether the session's agent can take a message, in words that fit it: a pi session is
 * "connected" (its plugin is), the bridge's own agent is "ready" (never "online": it is local).
 */
export function presence(s) {
  if (isPiSession(s)) return s.online ? "connected" : "not connected";
  return s && s.online ? "ready" : "unavailable";
}

/** The same with who it is about, for a screen reader or a tooltip: "Demo agent ready", "pi connected". */
export function presenceLabel(s) {
  const who = isPiSession(s) ? "pi" : `${(s && s.agentLabel) || "The"} agent`;
  return `${who} ${presence(s)}`;
}
