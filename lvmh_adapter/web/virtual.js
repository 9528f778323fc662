// A list that keeps in the DOM only the items on screen and a margin around them: a conversation of
// 10,000 turns or a sidebar of 10,000 conversations costs the page what a screenful does.
//
// Plain DOM. `list` is a flex column (CSS `gap` between items) inside the scrolling element
// `scroller`, and holds only items; two spacers just before and after it (aria-hidden) stand for the
// items not in the DOM, so the scrollbar is the whole list's. Heights are measured when an item is in the DOM (and again
// when it resizes: an image loaded, a tool row opened) and cached by key; an item never shown counts
// with an estimate (the average of its kind so far). Across a render the first visible item stays
// where it was on screen (older items loaded above, heights measured, a message growing), unless the
// list is held at its bottom (`stick`) or told which item to show where (`pin`).

export class VirtualList {
  /**
   * `keyOf(item)`, `versionOf(item)` (a new version redraws the item), `render(item)` -> Node,
   * `estimate(item)` -> px before it is measured, `kindOf(item)` (items of a kind share an average),
   * `hold(item, entry, now)` -> true to keep its current node for now (a streaming message is redrawn
   * at most so often), `onResize()` (an item changed height: render again), `overscan` (px each side),
   * `minItems` (at least this many items around the screen: a short list is drawn whole).
   */
  constructor({ scroller, list, keyOf, versionOf, render, estimate, kindOf, hold, onResize, overscan, minItems }) {
    this.scroller = scroller;
    this.list = list;
    this.keyOf = keyOf;
    this.versionOf = versionOf;
    this.renderItem = render;
    this.estimateOf = estimate || (() => 60);
    this.kindOf = kindOf || (() => "");
    this.hold = hold || (() => false);
    this.onResize = onResize || (() => {});
    this.overscan = overscan || 0;
    this.minItems = minItems || 0;
    this.entries = new Map(); // key -> {node, version, at, item}
    this.heights = new Map(); // key -> measured px
    this.kinds = new Map(); // kind -> [sum, count] of measured heights
    this.items = [];
    this.index = new Map(); // key -> position in items
    this.keys = []; // position -> key, as of the last layout
    this.held = []; // position -> item, as of the last layout
    this.measured = new Float64Array(64); // [i]: the measured heights of the items before i
    this.guessed = new Map(); // kind -> {count, sum}: [i] how many items before i are not measured, their estimates
    this.dirty = 0; // the prefix sums are right up to this position
    this.gap = null;
    this.range = [0, 0];
    this.top = document.createElement("div");
    this.bottom = document.createElement("div");
    for (const s of [this.top, this.bottom]) {
      s.className = "vspacer";
      s.setAttribute("aria-hidden", "true");
    }
    list.before(this.top);
    list.after(this.bottom);
    list.replaceChildren();
    this.observer = typeof ResizeObserver === "function" ? new ResizeObserver((changes) => this.resized(changes)) : null;
  }

  /** Forget every node (a new session, a new search): the next render starts afresh. */
  reset() {
    for (const e of this.entries.values()) this.observer?.unobserve(e.node);
    this.entries.clear();
    this.list.replaceChildren();
    this.range = [0, 0];
  }

  destroy() {
    this.reset();
    this.observer?.disconnect();
    this.top.remove();
    this.bottom.remove();
  }

  resized(changes) {
    let moved = false;
    for (const c of changes) {
      const key = c.target.dataset.vkey;
      if (key === undefined || !this.entries.has(key)) continue;
      if (this.measure(key, c.target)) moved = true;
    }
    if (moved) this.onResize();
  }

  measure(key, node) {
    const h = node.getBoundingClientRect().height;
    if (!h) return false; // not laid out (hidden): keep what was known
    const before = this.heights.get(key);
    if (before !== undefined && Math.abs(before - h) < 0.5) return false;
    const entry = this.entries.get(key);
    const kind = entry ? this.kindOf(entry.item) : "";
    const stat = this.kinds.get(kind) || [0, 0];
    if (before === undefined) stat[1] += 1;
    stat[0] += h - (before || 0);
    this.kinds.set(kind, stat);
    this.heights.set(key, h);
    const at = this.index.get(key);
    if (at !== undefined && at < this.dirty) this.dirty = at;
    return true;
  }

  /**
   * Where each item starts, as prefix sums kept from one render to the next: what a render changes (an item
   * added at the end, one measured again) is summed again from there on, not the whole list (a conversation
   * of 10,000 turns holds 36,000 items). An item not measured counts with its kind's average, which moves
   * with every measure: its share is kept as counts per kind (`off` multiplies), so a new average costs nothing.
   */
  layout(items) {
    if (this.gap === null || Number.isNaN(this.gap)) this.gap = parseFloat(getComputedStyle(this.list).rowGap) || 0;
    const n = items.length;
    const keys = this.keys;
    let from = Math.min(this.dirty, keys.length, n);
    for (let i = 0; i < from; i += 1) {
      if (items[i] !== this.held[i]) from = i; // an item replaced or moved (one changed in place is measured again)
    }
    for (let i = from; i < keys.length; i += 1) if (this.index.get(keys[i]) === i) this.index.delete(keys[i]);
    keys.length = n;
    this.held.length = n;
    this.grow(n + 1);
    for (let i = from; i < n; i += 1) this.sumAt(items[i], i);
    this.dirty = n;
    this.items = items;
  }

  /** Item `i`'s key and its place in the prefix sums (those up to `i` are done). */
  sumAt(item, i) {
    const key = String(this.keyOf(item));
    this.keys[i] = key;
    this.held[i] = item;
    this.index.set(key, i);
    const h = this.heights.get(key);
    this.measured[i + 1] = this.measured[i] + (h === undefined ? 0 : h);
    const kind = h === undefined ? this.kindOf(item) : null;
    if (kind !== null && !this.guessed.has(kind)) {
      this.guessed.set(kind, { count: new Int32Array(this.measured.length), sum: new Float64Array(this.measured.length) });
    }
    for (const [k, g] of this.guessed) {
      const mine = k === kind;
      g.count[i + 1] = g.count[i] + (mine ? 1 : 0);
      g.sum[i + 1] = g.sum[i] + (mine ? this.estimateOf(item) : 0);
    }
  }

  /** Room in the prefix sums for `size` entries. */
  grow(size) {
    if (this.measured.length >= size) return;
    const cap = Math.max(size, this.measured.length * 2, 64);
    const more = (a, Type) => {
      const b = new Type(cap);
      b.set(a);
      return b;
    };
    this.measured = more(this.measured, Float64Array);
    for (const g of this.guessed.values()) {
      g.count = more(g.count, Int32Array);
      g.sum = more(g.sum, Float64Array);
    }
  }

  /** Where item `i` starts (the items before it, each with the gap after it); `off(n)`: the whole list's height. */
  off(i) {
    let y = this.measured[i] + i * this.gap;
    for (const [kind, g] of this.guessed) {
      const stat = this.kinds.get(kind);
      y += stat && stat[1] ? g.count[i] * (stat[0] / stat[1]) : g.sum[i];
    }
    return y;
  }

  /** The first item whose bottom is below `y` (list coordinates). */
  find(y) {
    let lo = 0;
    let hi = this.items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.off(mid + 1) - this.gap <= y) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The items to draw for a view of `height` px at `viewTop`: those on screen, `margin` px each side, `least` at least. */
  window(viewTop, height, least, margin = this.overscan) {
    const n = this.items.length;
    let start = this.find(viewTop - margin);
    let end = Math.min(n, this.find(viewTop + height + margin) + 1);
    const short = least - (end - start);
    if (short > 0) {
      start = Math.max(0, start - Math.ceil(short / 2));
      end = Math.min(n, start + least);
      start = Math.max(0, end - least);
    }
    return [start, end];
  }

  /** Where the whole list (its top spacer) starts in the scroller's content, and the scroller's box. */
  geometry() {
    const box = this.scroller.getBoundingClientRect();
    const listTop = this.top.getBoundingClientRect().top - box.top + this.scroller.scrollTop;
    return { box, listTop };
  }

  /** The first item on screen and how far below the scroller's top it is (none: the screen shows a spacer). */
  visibleAnchor(box) {
    for (const child of this.list.children) {
      const key = child.dataset.vkey;
      if (key === undefined) continue;
      const r = child.getBoundingClientRect();
      if (r.bottom > box.top + 1) return r.top < box.bottom ? { key, offset: r.top - box.top } : null;
    }
    return null;
  }

  /**
   * Draw `items`. `stick`: keep the end in view; `pin`: `{key, offset}` show that item `offset` px below
   * the scroller's top; `lean`: the screen only, not the overscan nor `minItems` (a first paint).
   * Returns `{deferred}`: an item kept its older node (`hold`); render again soon.
   */
  render(items, { stick = false, pin = null, lean = false } = {}) {
    const now = performance.now();
    for (const [key, e] of this.entries) this.measure(key, e.node);
    let { box, listTop } = this.geometry();
    const anchor = pin && pin.key !== undefined ? pin : stick ? null : this.visibleAnchor(box);
    this.layout(items);
    const n = items.length;
    const view = this.scroller.clientHeight;
    let viewTop;
    if (anchor && this.index.has(String(anchor.key))) viewTop = this.off(this.index.get(String(anchor.key))) - anchor.offset;
    else if (stick) viewTop = this.off(n) - view;
    else viewTop = this.scroller.scrollTop - listTop;
    let deferred = false;
    for (let pass = 0; pass < 3; pass += 1) {
      const [start, end] = lean ? this.window(viewTop, view, 0, 0) : this.window(viewTop, view, this.minItems);
      deferred = this.place(items, start, end, now) || deferred;
      ({ box, listTop } = this.geometry());
      if (stick && !anchor) {
        this.scroller.scrollTop = this.scroller.scrollHeight;
      } else if (anchor) {
        const e = this.entries.get(String(anchor.key));
        if (e) this.scroller.scrollTop += e.node.getBoundingClientRect().top - box.top - anchor.offset;
      }
      // what is on screen now: drawn, or is the window short of it (estimates far off)?
      viewTop = this.scroller.scrollTop - listTop;
      const shown = [this.off(start), this.off(end) - this.gap];
      if (end - start === n || (shown[0] <= Math.max(0, viewTop) && shown[1] >= Math.min(this.off(n) - this.gap, viewTop + view))) break;
    }
    return { deferred };
  }

  /** Put items [start, end) in the DOM between the spacers; the others out. Returns whether one was held. */
  place(items, start, end, now) {
    let held = false;
    const keep = new Set();
    let prev = null;
    for (let i = start; i < end; i += 1) {
      const item = items[i];
      const key = String(this.keyOf(item));
      keep.add(key);
      const version = this.versionOf(item);
      let e = this.entries.get(key);
      if (!e || e.version !== version) {
        if (e && this.hold(item, e, now)) {
          held = true;
        } else {
          const node = this.renderItem(item);
          node.dataset.vkey = key;
          if (e) {
            this.observer?.unobserve(e.node);
            if (e.node.parentNode === this.list) e.node.replaceWith(node);
          }
          e = { node, version, at: now, item };
          this.entries.set(key, e);
          this.observer?.observe(node);
        }
      }
      e.item = item;
      const at = prev ? prev.nextSibling : this.list.firstChild;
      if (at !== e.node) this.list.insertBefore(e.node, at);
      prev = e.node;
    }
    for (const [key, e] of this.entries) {
      if (!keep.has(key)) {
        this.observer?.unobserve(e.node);
        e.node.remove();
        this.entries.delete(key);
      }
    }
    let measured = false;
    for (const key of keep) {
      if (!this.heights.has(key)) measured = this.measure(key, this.entries.get(key).node) || measured;
    }
    if (measured) this.layout(items); // the spacers stand for the others; the drawn ones are laid out by the page
    const above = this.off(start); // the items above, each with the gap after it
    const below = this.off(items.length) - this.off(end); // the items below, each with the gap before it
    this.top.style.height = `${Math.max(0, above)}px`;
    this.bottom.style.height = `${Math.max(0, below)}px`;
    this.range = [start, end];
    return held;
  }

  /** The node of `key` if it is in the DOM. */
  nodeOf(key) {
    const e = this.entries.get(String(key));
    return e ? e.node : null;
  }
}
