// The page's preferences in localStorage (the token, the theme), and the theme itself.

export const TOKEN_KEY = "lvmh.token";
export const THEME_KEY = "lvmh.theme";

export function readStorage(key) {
  try {
    return localStorage.getItem(key) || "";
  } catch {
    return "";
  }
}
export function writeStorage(key, value) {
  try {
    if (value) localStorage.setItem(key, value);
    else localStorage.removeItem(key);
  } catch {}
}

export function applyTheme(mode, btn) {
  const root = document.documentElement;
  if (mode === "light" || mode === "dark") root.dataset.theme = mode;
  else delete root.dataset.theme;
  const label = mode === "light" ? "Light theme" : mode === "dark" ? "Dark theme" : "Theme follows the system";
  btn.title = `${label} (click to change)`;
  btn.setAttribute("aria-label", label);
  btn.textContent = mode === "light" ? "☀" : mode === "dark" ? "☾" : "◐";
}

export function cycleTheme(btn) {
  const cur = readStorage(THEME_KEY) || "auto";
  const next = cur === "auto" ? "dark" : cur === "dark" ? "light" : "auto";
  writeStorage(THEME_KEY, next === "auto" ? "" : next);
  applyTheme(next, btn);
}
