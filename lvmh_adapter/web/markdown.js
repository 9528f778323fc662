// Message text as markdown: parsed by marked, sanitized by DOMPurify into a DocumentFragment
// (never assigned as HTML), code blocks highlighted by highlight.js (its output sanitized too).
// Raw HTML in a message is shown as text: agents' words are data, not markup.
// The libraries are vendored, pinned, under ./vendor/ (scripts/vendor-web.sh).

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.mjs";
// highlight.js's core runs at its first use (lvmh_adapter/webbundle.py, `late`): in the page's one script, set up once
// the grammars come, after the first paint (nothing is highlighted before them: `highlight`)
import * as core from "./vendor/hljs-core.min.js";
import { h } from "./dom.js";

// highlight.js's grammars (70 KB, 13 files) are not on the way to a first paint: they load once the page is idle
// (`loadGrammars`), and a code block drawn before they were in is drawn again then (`codeEpoch`, `onGrammars`).
const GRAMMARS = {
  bash: () => import("./vendor/hljs-bash.min.js"),
  css: () => import("./vendor/hljs-css.min.js"),
  diff: () => import("./vendor/hljs-diff.min.js"),
  go: () => import("./vendor/hljs-go.min.js"),
  javascript: () => import("./vendor/hljs-javascript.min.js"),
  json: () => import("./vendor/hljs-json.min.js"),
  python: () => import("./vendor/hljs-python.min.js"),
  rust: () => import("./vendor/hljs-rust.min.js"),
  shell: () => import("./vendor/hljs-shell.min.js"),
  sql: () => import("./vendor/hljs-sql.min.js"),
  typescript: () => import("./vendor/hljs-typescript.min.js"),
  xml: () => import("./vendor/hljs-xml.min.js"),
  yaml: () => import("./vendor/hljs-yaml.min.js"),
};
const GRAMMARS_LATEST_MS = 1000;
let grammarsIn = false;
let drawnEarly = false; // a code block was drawn before the grammars were in
let epoch = 0;
let loading = null;
const listeners = [];

/** Load the grammars (once); then, if a code block was drawn without them, bump `codeEpoch` and tell `onGrammars`. */
export function loadGrammars() {
  if (!loading) {
    loading = Promise.all(Object.entries(GRAMMARS).map(([name, load]) => load().then((m) => core.default.registerLanguage(name, m.default))))
      .catch(() => {}) // a grammar that failed to load leaves its blocks plain
      .then(() => {
        grammarsIn = true;
        if (!drawnEarly) return;
        epoch += 1;
        for (const cb of listeners) cb();
      });
  }
  return loading;
}

/** Changes when code drawn earlier would now be drawn otherwise (part of a drawn item's version). */
export function codeEpoch() {
  return epoch;
}

export function onGrammars(cb) {
  listeners.push(cb);
}

/** The first message drawn pays for marked's and DOMPurify's first use (their set-up): pay it while a
 * conversation's first page is on its way instead. */
export function warmUp() {
  renderMarkdown("*warm* up", { highlightCode: false });
}

// once the conversation the page opened on is drawn (timeline.js), or after GRAMMARS_LATEST_MS at most
setTimeout(() => loadGrammars(), GRAMMARS_LATEST_MS);

const ALIASES = { sh: "bash", zsh: "bash", console: "shell", js: "javascript", mjs: "javascript", ts: "typescript",
  py: "python", html: "xml", svg: "xml", yml: "yaml", patch: "diff", rs: "rust", golang: "go" };
const HIGHLIGHT_MAX = 20000; // characters; longer blocks stay plain

function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    // raw HTML blocks and inline tags are shown as the text they are
    html(token) {
      return escapeHtml(token.text ?? token.raw ?? "");
    },
  },
});

const PURIFY = {
  RETURN_DOM_FRAGMENT: true,
  ALLOWED_TAGS: ["a", "b", "strong", "i", "em", "del", "s", "code", "pre", "p", "br", "hr", "ul", "ol", "li",
    "blockquote", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "span", "input"],
  ALLOWED_ATTR: ["href", "title", "class", "type", "checked", "disabled", "start", "align"],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:|#)/i,
};
const PURIFY_CODE = { RETURN_DOM_FRAGMENT: true, ALLOWED_TAGS: ["span"], ALLOWED_ATTR: ["class"] };

if (typeof DOMPurify.addHook === "function") DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    if (!node.getAttribute("href")) node.removeAttribute("href");
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
  if (node.tagName === "INPUT" && node.getAttribute("type") !== "checkbox") node.remove();
  if (node.tagName === "INPUT") node.setAttribute("disabled", "");
  if (node.hasAttribute && node.hasAttribute("class")) {
    // only the classes marked and highlight.js give; never a page class (a fake "approval" card...)
    const cls = node.getAttribute("class").split(/\s+/).filter((c) => /^(hljs(-[\w-]+)?|language-[\w+#.-]+)$/.test(c));
    if (cls.length) node.setAttribute("class", cls.join(" "));
    else node.removeAttribute("class");
  }
});

/** Highlight one <code> element in place (text in, sanitized spans out). */
function highlight(code) {
  const text = code.textContent || "";
  if (!text || text.length > HIGHLIGHT_MAX) return;
  if (!grammarsIn) {
    drawnEarly = true; // the core with no grammar highlights nothing: drawn again once they are in
    return;
  }
  const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.getAttribute("class") || "");
  let lang = m ? m[1].toLowerCase() : "";
  lang = ALIASES[lang] || lang;
  let html;
  try {
    const hljs = core.default;
    if (lang && hljs.getLanguage(lang)) html = hljs.highlight(text, { language: lang, ignoreIllegals: true }).value;
    else if (!lang && text.length < 4000) {
      const auto = hljs.highlightAuto(text);
      if (auto.relevance >= 5) html = auto.value;
    }
  } catch {
    html = null;
  }
  if (!html) return;
  const frag = DOMPurify.sanitize(html, PURIFY_CODE);
  if ((frag.textContent || "") !== text) return; // never show other text than the message has
  code.replaceChildren(frag);
  code.classList.add("hljs");
}

/** A copy button that copies `getText()` and says so. */
export function copyButton(getText, label = "Copy") {
  const btn = h("button.copy-btn", { type: "button", title: label, "aria-label": label }, "Copy");
  btn.addEventListener("click", async (e) => {
    e.preventDefault();
    e.stopPropagation();
    try {
      await navigator.clipboard.writeText(getText());
      btn.textContent = "Copied";
    } catch {
      btn.textContent = "Copy failed";
    }
    setTimeout(() => {
      btn.textContent = "Copy";
    }, 1500);
  });
  return btn;
}

/** Markdown text as a sanitized DocumentFragment, code blocks highlighted and with a copy button. */
export function renderMarkdown(text, { highlightCode = true } = {}) {
  let html;
  try {
    html = marked.parse(String(text ?? ""));
  } catch {
    html = `<p>${escapeHtml(text)}</p>`;
  }
  const frag = DOMPurify.sanitize(html, PURIFY);
  for (const pre of frag.querySelectorAll("pre")) {
    const code = pre.querySelector("code");
    if (!code) continue;
    const body = code.textContent || "";
    if (body.endsWith("\n")) code.textContent = body.slice(0, -1); // marked ends every block with one
    if (highlightCode) highlight(code);
    const m = /(?:^|\s)language-([\w+#.-]+)/.exec(code.getAttribute("class") || "");
    const wrap = h("div.code-block", h("div.code-head", h("span.code-lang", m ? m[1] : "code"), copyButton(() => code.textContent || "", "Copy code")));
    pre.replaceWith(wrap);
    wrap.appendChild(pre);
  }
  return frag;
}
