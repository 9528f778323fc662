// Short messages at the corner of the page (errors announced as alerts).

import { h } from "./dom.js";

export function toast(message, kind = "info", timeout = 5000) {
  const el = h(`div.toast.toast-${kind}`, { role: kind === "error" ? "alert" : "status" }, message);
  document.getElementById("toasts").appendChild(el);
  setTimeout(() => el.remove(), timeout);
}
