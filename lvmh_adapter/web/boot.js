// The first requests of a page load, started while the modules load: index.html loads this file first,
// `async`, with no import, so it runs as soon as it is in (often before app.js; under load, after it). It asks
// for what a page opened on a conversation shows first (the list's first page, the conversation's newest
// events); api.js takes these responses instead of asking again (`takeEarly`), once each, for app.js's first
// requests only (`closeEarly`): a response taken later would be the page load's, stale. The paths are the very
// ones app.js asks for: LIST_PAGE (book.js) and FIRST_PAGE (history.js); one that differs is simply not taken.

const TOKEN_KEY = "lvmh.token"; // prefs.js
const LIST_PAGE = 50;
const FIRST_PAGE = 200;

function early() {
  let token = "";
  try {
    token = localStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return null;
  }
  if (!token || /^#token=/.test(location.hash)) return null; // a login link: app.js takes the token first
  const headers = { Authorization: `Bearer ${token}` };
  const responses = new Map();
  const ask = (path) => responses.set(path, fetch(path, { method: "GET", headers, cache: "no-store" }));
  ask(`/api/sessions?limit=${LIST_PAGE}`);
  const m = location.hash.match(/^#\/s\/(.+)$/);
  if (m) {
    let id = null;
    try {
      id = decodeURIComponent(m[1]);
    } catch {}
    if (id) ask(`/api/sessions/${encodeURIComponent(id)}/events?before=latest&limit=${FIRST_PAGE}`);
  }
  return { token, responses };
}

// app.js ran first (it sets null once its first requests are made: api.js closeEarly): nothing left to ask early
if (window.lvmhEarly === undefined) window.lvmhEarly = early();
