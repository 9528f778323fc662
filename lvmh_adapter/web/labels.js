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
