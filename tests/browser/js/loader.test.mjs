// node --test tests/browser/js/loader.test.mjs : the open session's pages, with a daemon played by a fake api.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Loader } from "../../../lvmh_adapter/web/loader.js";

const S = "s1";
/** A stored history of `n` user messages (seq i+1), and a fake api over it that counts what it is asked. */
function daemon(n) {
  const events = Array.from({ length: n }, (_, i) => ({ v: 1, sessionId: S, seq: i + 1, ts: 1000 + i, type: "message_end",
    message: { role: "user", id: `u${i}`, text: `m${i}`, thinking: null, toolCalls: [], toolCallId: null } }));
  const asked = [];
  let gate = null;
  return {
    asked,
    hold() { let open; gate = new Promise((r) => { open = r; }); return () => { gate = null; open(); }; },
    async eventsPage(id, { before, limit }) {
      asked.push(before);
      if (gate) await gate;
      const top = before === "latest" ? Infinity : before;
      const below = events.filter((e) => e.seq < top);
      return { events: below.slice(-limit), older: below.length > limit };
    },
    async request(method, path) {
      const after = Number(/after=(\d+)/.exec(path)[1]);
      return events.filter((e) => e.seq > after).slice(0, 1000);
    },
  };
}

function loader(api) {
  const app = { states: new Map(), current: S, rendered: {} };
  return { app, loader: new Loader({ api, app, render: () => {} }) };
}

test("opens at the newest page; an older page asked twice at once is asked once", async () => {
  const api = daemon(1200);
  const { loader: l, app } = loader(api);
  await l.sync(S);
  const st = app.states.get(S);
  assert.deepEqual([st.items.length, st.oldestSeq, st.hasOlder], [200, 1001, true]);
  const release = api.hold();
  const a = l.older(st);
  const b = l.older(st);
  assert.equal(a, b);
  release();
  await a;
  assert.deepEqual(api.asked, ["latest", 1001]);
  assert.deepEqual([st.items.length, st.oldestSeq], [700, 501]);
});

test("a hit close below what is held: the pages between load, even with one on its way (no spin)", async () => {
  const api = daemon(1200);
  const { loader: l, app } = loader(api);
  await l.sync(S);
  const st = app.states.get(S);
  const release = api.hold();
  const scrolling = l.older(st); // the reader scrolls up meanwhile
  const shown = l.reveal(S, 300);
  release();
  await Promise.all([scrolling, shown]);
  assert.ok(st.oldestSeq <= 300 && st.byKey.has("m:u299"));
  assert.equal(app.rendered.detached, undefined);
});

test("a hit far below: a view of the history around it, read down to the live one and joined", async () => {
  const api = daemon(3000);
  const { loader: l, app } = loader(api);
  await l.sync(S);
  const live = app.states.get(S);
  const view = await l.reveal(S, 500);
  assert.equal(app.rendered.detached, view);
  assert.ok(view.byKey.has("m:u499") && view.hasNewer);
  while (app.rendered.detached) await l.newer(view);
  assert.equal(live.oldestSeq, view.oldestSeq);
  const users = live.items.map((i) => i.id);
  assert.equal(new Set(users).size, users.length); // every message once
  assert.deepEqual(users.slice(-3), ["u2997", "u2998", "u2999"]);
  assert.ok(live.byKey.has("m:u499"));
});
