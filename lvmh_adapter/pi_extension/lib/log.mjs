// Append-only log file for the plugin. Never throws, never blocks pi for long: lines are
// written with one appendFileSync each (small, rare: state changes and errors only) and a
// failing write is swallowed. The file is rotated once to `<path>.1` past `maxBytes`.
//
// Path: $LVMH_LOG, else ~/.pi/lvmh-agent.log. Secrets must never be passed in; use
// fingerprint() for tokens.

import { appendFileSync, existsSync, mkdirSync, renameSync, statSync } from "node:fs";
import { createHash } from "node:crypto";
import { homedir } from "node:os";
import { dirname, join } from "node:path";

export function defaultLogPath(env = process.env) {
  if (env.LVMH_LOG) return env.LVMH_LOG;
  return join(env.HOME || homedir(), ".pi", "lvmh-agent.log");
}

/** Short, non-reversible tag for a secret, e.g. "sha256:3f1a2b4c". */
export function fingerprint(secret) {
  if (!secret) return "none";
  return "sha256:" + createHash("sha256").update(String(secret)).digest("hex").slice(0, 8);
}

function describe(value) {
  if (value instanceof Error) return value.stack || `${value.name}: ${value.message}`;
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

// mkdirSync(..., {recursive: true}) never returns for some paths (e.g. under /proc, node 20
// and 22), so create the missing levels one by one.
function mkdirParents(dir) {
  const missing = [];
  for (let d = dir, i = 0; i < 32 && !existsSync(d); i++) {
    missing.push(d);
    const parent = dirname(d);
    if (parent === d) break;
    d = parent;
  }
  for (const d of missing.reverse()) mkdirSync(d);
}

export function createLogger({ path = defaultLogPath(), maxBytes = 5 * 1024 * 1024, echo = null } = {}) {
  let ready = false;
  let written = 0;
  let failed = false;

  function prepare() {
    if (ready) return;
    ready = true;
    try {
      mkdirParents(dirname(path));
      try {
        written = statSync(path).size;
      } catch {
        written = 0;
      }
    } catch {
      /* the write below will fail and be swallowed */
    }
  }

  function write(level, parts) {
    try {
      prepare();
      const line = `${new Date().toISOString()} ${level} ${parts.map(describe).join(" ")}\n`;
      if (written + line.length > maxBytes) {
        try {
          renameSync(path, path + ".1");
        } catch {
          /* nothing to rotate */
        }
        written = 0;
      }
      appendFileSync(path, line);
      written += line.length;
      failed = false;
      if (echo) echo(line);
    } catch {
      // Logging must never break pi. Remember once that it failed; nothing else to do.
      failed = true;
    }
  }

  return {
    path,
    get failed() {
      return failed;
    },
    info: (...parts) => write("INFO", parts),
    warn: (...parts) => write("WARN", parts),
    error: (...parts) => write("ERROR", parts),
    debug: (...parts) => {
      if (process.env.LVMH_DEBUG) write("DEBUG", parts);
    },
  };
}
