import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createLogger, defaultLogPath, fingerprint } from "../lib/log.mjs";
import { tempLog } from "./helpers/fake-pi.mjs";

test("log path: LVMH_LOG, else ~/.pi/lvmh-agent.log", () => {
  assert.equal(defaultLogPath({ LVMH_LOG: "/tmp/x.log", HOME: "/h" }), "/tmp/x.log");
  assert.equal(defaultLogPath({ HOME: "/home/u" }), join("/home/u", ".pi", "lvmh-agent.log"));
});

test("fingerprint is short and does not contain the secret", () => {
  const f = fingerprint("super-secret-token");
  assert.match(f, /^sha256:[0-9a-f]{8}$/);
  assert.ok(!f.includes("super"));
  assert.equal(fingerprint(""), "none");
});

test("writes lines with errors and stacks, creates the folder, rotates", () => {
  const t = tempLog();
  const path = join(t.dir, "sub", "a.log");
  const log = createLogger({ path, maxBytes: 2000 });
  log.info("hello", { a: 1 });
  log.error("boom", new Error("kaput"));
  const text = readFileSync(path, "utf8");
  assert.match(text, /INFO hello {"a":1}/);
  assert.match(text, /ERROR boom Error: kaput/);
  for (let i = 0; i < 40; i++) log.info("filler line number", i);
  assert.ok(existsSync(path + ".1"));
});

test("an unwritable log never throws", () => {
  const t = tempLog();
  createLogger({ path: t.path }).info("a file where a folder is expected below");
  const log = createLogger({ path: join(t.path, "not-a-dir", "x.log") });
  log.error("x");
  assert.equal(log.failed, true);
  const proc = createLogger({ path: "/proc/definitely/not/writable.log" }); // must not hang
  proc.error("x");
  assert.equal(proc.failed, true);
});
