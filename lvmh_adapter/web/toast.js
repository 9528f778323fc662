// Short messages above the composer (errors announced as alerts); a click dismisses one.

import { h } from "./dom.js";

export function toast(message, kind = "info", timeout = 5000) {
  const el = h(`div.toast.toast-${kind}`, { role: kind === "error" ? "alert" : "status", title: "Click to dismiss", onclick: () => el.remove() }, message);
  document.getElementById("toasts").appendChild(el);
  setTimeout(() => el.remove(), timeout);
}
