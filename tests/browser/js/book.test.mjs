// node --test tests/browser/js/book.test.mjs : the session list the page holds, in pages and by deltas.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SessionBook } from "../../../lvmh_adapter/web/book.js";

const chat = (id, at, extra = {}) => ({ id, name: `chat ${id}`, online: true, lastEventAt: at, agentName: "demo", waiting: [], ...extra });

function fakeApi(all) {
  const asked = [];
  return {
    asked,
    async sessionsPage({ limit, cursor, q }) {
      asked.push({ limit, cursor, q });
      const hits = all.filter((s) => !q || s.name.includes(q));
      const start = cursor ? Number(cursor) : 0;
      const page = hits.slice(start, start + limit);
      return { sessions: page, total: hits.length, next: start + limit < hits.length ? String(start + limit) : null };
    },
    async session(id) {
      const s = all.find((x) => x.id === id);
      if (!s) throw new Error("404");
      return s;
    },
  };
}

test("a first page, then entries added, changed and removed, the total as the daemon says", () => {
  const removed = [];
  const book = new SessionBook({ api: fakeApi([]), onRemoved: (id, before) => removed.push([id, before && before.name]) });
  book.setPage({ sessions: [chat("a", 300), chat("b", 200)], total: 120, next: "c1", attention: [chat("w", 5, { waiting: [{ kind: "approval", id: "x" }] })] });
  assert.deepEqual(book.entries.map((s) => s.id), ["a", "b", "w"]);
  assert.equal(book.total, 120);
  assert.equal(book.next, "c1");
  book.apply({ type: "session_entry", change: "added", session: chat("n", 400), total: 121 });
  assert.deepEqual(book.entries.map((s) => s.id), ["n", "a", "b", "w"]);
  assert.equal(book.total, 121);
  book.apply({ type: "session_entry", change: "changed", session: chat("b", 500, { name: "renamed" }) });
  assert.deepEqual(book.entries.map((s) => s.id), ["b", "n", "a", "w"]);
  assert.equal(book.get("b").name, "renamed");
  book.apply({ type: "session_entry", change: "removed", session: { id: "a" }, total: 120 });
  assert.deepEqual(book.entries.map((s) => s.id), ["b", "n", "w"]);
  assert.equal(book.total, 120);
  assert.deepEqual(removed, [["a", "chat a"]]);
  book.apply({ type: "session_entry", change: "exploded", session: chat("z", 1) });
  assert.equal(book.get("z"), null);
});

test("more pages as the list scrolls, each entry once; a search asked of the daemon; a late answer dropped", async () => {
  const all = Array.from({ length: 130 }, (_, i) => chat(`s${String(i).padStart(3, "0")}`, 1000 - i));
  const api = fakeApi(all);
  const book = new SessionBook({ api });
  book.setPage(await api.sessionsPage({ limit: 50 }));
  await book.more();
  await book.more();
  await book.more(); // nothing more
  assert.equal(book.entries.length, 130);
  assert.equal(new Set(book.entries.map((s) => s.id)).size, 130);
  assert.equal(book.next, null);
  const slow = book.search("s01");
  const fast = book.search("s12");
  await Promise.all([slow, fast]);
  assert.deepEqual(book.entries.map((s) => s.id), ["s120", "s121", "s122", "s123", "s124", "s125", "s126", "s127", "s128", "s129"]);
  assert.equal(book.total, 10);
  // while searching, a new entry that does not match is known but not listed
  book.apply({ type: "session_entry", change: "added", session: chat("other", 2000), total: 131 });
  assert.equal(book.entries.length, 10);
  assert.ok(book.get("other"));
  // a session opened by its address, not in any page loaded: its entry is asked for
  const fresh = new SessionBook({ api });
  await fresh.ensure("s077");
  assert.equal(fresh.get("s077").name, "chat s077");
  assert.equal(fresh.entries.length, 0);
});
