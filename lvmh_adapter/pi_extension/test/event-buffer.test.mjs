import { test } from "node:test";
import assert from "node:assert/strict";
import { EventBuffer, DEFAULT_CAP } from "../lib/event-buffer.mjs";

const drain = (b) => {
  const out = [];
  for (let e = b.peek(); e; e = b.peek()) {
    out.push(e.seq);
    b.markSent();
  }
  return out;
};

test("default cap is 10,000", () => {
  assert.equal(DEFAULT_CAP, 10_000);
  assert.equal(new EventBuffer().cap, 10_000);
});

test("send cursor walks entries in order; acknowledge forgets persisted ones and rewinds", () => {
  const b = new EventBuffer({ cap: 100 });
  for (const seq of [1, 2, 4, 5, 7]) b.push({ seq });
  assert.deepEqual(drain(b), [1, 2, 4, 5, 7]);
  assert.equal(b.unsentCount, 0);
  b.rewind();
  assert.equal(b.unsentCount, 5);
  b.acknowledge(4); // daemon persisted up to 4 (gaps are normal)
  assert.deepEqual(drain(b), [5, 7]);
  assert.equal(b.size, 2);
  assert.throws(() => b.push({ seq: 7 }), RangeError);
});

test("cap drops the oldest; only never-sent drops are reported, once", () => {
  const b = new EventBuffer({ cap: 3 });
  for (let s = 1; s <= 5; s++) b.push({ seq: s });
  assert.equal(b.size, 3);
  assert.deepEqual(b.entries().map((e) => e.seq), [3, 4, 5]);
  assert.deepEqual(b.takeOverflow(), { dropped: 2, fromSeq: 1, toSeq: 2 });
  assert.equal(b.takeOverflow(), null);
  assert.deepEqual(drain(b), [3, 4, 5]);
  // sent entries evicted later are not "lost"
  b.push({ seq: 6 });
  b.push({ seq: 7 });
  assert.equal(b.takeOverflow(), null);
  assert.deepEqual(drain(b), [6, 7]);
  assert.equal(b.evictedTotal, 4);
});

test("eviction of unsent entries moves the cursor forward", () => {
  const b = new EventBuffer({ cap: 2 });
  b.push({ seq: 1 });
  b.markSent();
  b.push({ seq: 2 });
  b.push({ seq: 3 });
  b.push({ seq: 4 });
  assert.deepEqual(drain(b), [3, 4]);
  assert.deepEqual(b.takeOverflow(), { dropped: 1, fromSeq: 2, toSeq: 2 });
});

test("renumber shifts provisional seqs", () => {
  const b = new EventBuffer({ cap: 10 });
  for (let s = 1; s <= 3; s++) b.push({ seq: s });
  b.renumber(40);
  assert.deepEqual(b.entries().map((e) => e.seq), [41, 42, 43]);
  assert.equal(b.firstSeq, 41);
  assert.equal(b.lastSeq, 43);
});

test("stays O(1)-ish with 100k pushes at cap 10k", () => {
  const b = new EventBuffer();
  const t0 = Date.now();
  for (let s = 1; s <= 100_000; s++) b.push({ seq: s });
  assert.equal(b.size, 10_000);
  assert.equal(b.firstSeq, 90_001);
  assert.deepEqual(b.takeOverflow(), { dropped: 90_000, fromSeq: 1, toSeq: 90_000 });
  assert.ok(Date.now() - t0 < 2000);
});
