import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff } from "../lib/backoff.mjs";

test("grows exponentially from the base, jitter within [ceiling/2, ceiling]", () => {
  const hi = new Backoff({ baseMs: 500, maxMs: 30_000, random: () => 1 });
  assert.deepEqual([1, 2, 3, 4, 5].map(() => hi.next()), [500, 1000, 2000, 4000, 8000]);
  const lo = new Backoff({ baseMs: 500, maxMs: 30_000, random: () => 0 });
  assert.deepEqual([1, 2, 3].map(() => lo.next()), [250, 500, 1000]);
});

test("is capped at 30 s forever (no overflow after many attempts)", () => {
  const b = new Backoff({ random: () => 1 });
  let last = 0;
  for (let i = 0; i < 5000; i++) last = b.next();
  assert.equal(last, 30_000);
  assert.equal(b.ceiling(), 30_000);
  const r = new Backoff({ random: Math.random });
  for (let i = 0; i < 2000; i++) {
    const d = r.next();
    assert.ok(d >= 250 && d <= 30_000, `delay ${d}`);
    if (i > 20) assert.ok(d >= 15_000, `capped delay keeps at least half the cap, got ${d}`);
  }
});

test("jitter spreads delays", () => {
  const b = new Backoff({ baseMs: 1000 });
  const seen = new Set();
  for (let i = 0; i < 20; i++) {
    b.reset();
    seen.add(b.next());
  }
  assert.ok(seen.size > 5, `expected different delays, got ${[...seen]}`);
});

test("reset goes back to the base; bad settings are refused", () => {
  const b = new Backoff({ baseMs: 100, random: () => 1 });
  b.next();
  b.next();
  b.reset();
  assert.equal(b.next(), 100);
  assert.throws(() => new Backoff({ baseMs: 0 }), RangeError);
  assert.throws(() => new Backoff({ baseMs: 100, maxMs: 50 }), RangeError);
  assert.equal(new Backoff({ random: () => NaN }).next(), 250);
});
