// Tiny DOM builder. Text is always set through text nodes / textContent: data never reaches innerHTML.

/**
 * h("div.card.big#main", {title: "x", onclick: fn, dataset: {k: "v"}}, "text", child, [more])
 * Attribute values are set with setAttribute/properties; children strings become text nodes.
 */
export function h(spec, attrs, ...children) {
  // "tag.class.class#id" (the id may come anywhere after the tag)
  let id = "";
  const rest = String(spec).replace(/#([\w-]+)/, (_, m) => {
    id = m;
    return "";
  });
  const [tag, ...classes] = rest.split(".");
  const el = document.createElement(tag || "div");
  if (id) el.id = id;
  if (classes.length) el.className = classes.filter(Boolean).join(" ");
  if (attrs && (typeof attrs !== "object" || attrs instanceof Node || Array.isArray(attrs))) {
    children.unshift(attrs);
    attrs = null;
  }
  if (attrs) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v);
      else if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "class") el.className = [el.className, v].filter(Boolean).join(" ");
      else if (k === "value" || k === "checked" || k === "disabled" || k === "open" || k === "selected") el[k] = v;
      else if (k === "text") el.textContent = String(v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false || c === true) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.appendChild(c);
    else el.appendChild(document.createTextNode(String(c)));
  }
  return el;
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Replace all children of el. */
export function replaceChildren(el, ...children) {
  clear(el);
  return append(el, children);
}

/**
 * Render message text: fenced code blocks (```) become <pre><code>, inline `code` spans become <code>,
 * the rest stays text (white-space: pre-wrap in CSS). Nothing is parsed as HTML.
 */
export function richText(text) {
  const frag = document.createDocumentFragment();
  const parts = String(text ?? "").split(/```/);
  parts.forEach((part, i) => {
    if (i % 2 === 1) {
      const nl = part.indexOf("\n");
      const lang = nl > 0 ? part.slice(0, nl).trim() : "";
      const body = nl >= 0 && /^[\w+#.-]*$/.test(lang) ? part.slice(nl + 1) : part;
      const code = h("code", lang ? { "data-lang": lang } : null, body.replace(/\n$/, ""));
      frag.appendChild(h("pre.code", code));
    } else if (part) {
      const p = h("div.text");
      const spans = part.split(/`([^`\n]+)`/);
      spans.forEach((s, j) => {
        if (j % 2 === 1) p.appendChild(h("code.inline", s));
        else if (s) p.appendChild(document.createTextNode(s));
      });
      frag.appendChild(p);
    }
  });
  return frag;
}
