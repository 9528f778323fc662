import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_URL, readConfig, repoFromGit, repoFromGitConfig, repoFromUrl } from "../lvmh-agent.mjs";
import { redactUrl } from "../lib/link.mjs";
import { tempLog } from "./helpers/fake-pi.mjs";

test("defaults: local daemon, ~/.pi log, not an agent session", () => {
  const c = readConfig({ HOME: "/nonexistent/home/u" });
  assert.equal(c.url, DEFAULT_URL);
  assert.equal(DEFAULT_URL, "ws://127.0.0.1:8686/agent/ws");
  assert.equal(c.logPath, "/nonexistent/home/u/.pi/lvmh-agent.log");
  assert.equal(c.agent, false);
  assert.equal(c.disabled, false);
  assert.match(c.problems.join("\n"), /LVMH_TOKEN is not set/);
});

test("token from LVMH_TOKEN or LVMH_TOKEN_FILE; problems never contain it", () => {
  const t = tempLog();
  const file = join(t.dir, "token");
  writeFileSync(file, "from-file-secret\n");
  assert.equal(readConfig({ LVMH_TOKEN_FILE: file }).token, "from-file-secret");
  assert.equal(readConfig({ LVMH_TOKEN: "env-secret", LVMH_TOKEN_FILE: file }).token, "env-secret");
  const c = readConfig({ LVMH_TOKEN: "env-secret", LVMH_URL: "ws://alarm:8686/agent/ws" });
  assert.match(c.problems.join("\n"), /unencrypted/);
  assert.ok(!c.problems.join("\n").includes("env-secret"));
  assert.equal(readConfig({ LVMH_TOKEN: "s", LVMH_URL: "wss://alarm/agent/ws" }).problems.length, 0);
  assert.match(readConfig({ LVMH_TOKEN_FILE: join(t.dir, "missing") }).problems.join("\n"), /cannot read LVMH_TOKEN_FILE/);
});

test("without LVMH_TOKEN(_FILE): the local bridge's generated token, if there is one", () => {
  const t = tempLog();
  mkdirSync(join(t.dir, ".agent-bridge", "secrets"), { recursive: true });
  writeFileSync(join(t.dir, ".agent-bridge", "secrets", "lvmh_token"), "generated\n");
  assert.equal(readConfig({ HOME: t.dir }).token, "generated");
  mkdirSync(join(t.dir, "data", "secrets"), { recursive: true });
  writeFileSync(join(t.dir, "data", "secrets", "lvmh_token"), "other");
  assert.equal(readConfig({ HOME: t.dir, AGENT_BRIDGE_DATA: join(t.dir, "data") }).token, "other");
  assert.equal(readConfig({ HOME: t.dir, LVMH_TOKEN: "env" }).token, "env");
  assert.equal(readConfig({ HOME: join(t.dir, "nowhere") }).token, "");
});

test("bad URL or LVMH_DISABLE disables the plugin", () => {
  assert.equal(readConfig({ LVMH_URL: "http://x/agent/ws" }).disabled, true);
  assert.equal(readConfig({ LVMH_URL: "not a url" }).disabled, true);
  assert.equal(readConfig({ LVMH_DISABLE: "1" }).disabled, true);
  assert.equal(readConfig({ LVMH_AGENT: "true" }).agent, true);
});

test("repo from git remotes", () => {
  assert.equal(repoFromUrl("git@gitlab.example:group/project.git"), "group/project");
  assert.equal(repoFromUrl("https://oauth2:pat@gitlab.example/group/sub/project.git"), "group/sub/project");
  assert.equal(repoFromUrl("ssh://git@host:2222/group/project"), "group/project");
  assert.equal(repoFromUrl("/local/path"), null);
  assert.equal(repoFromUrl("single"), null);
  assert.equal(repoFromGitConfig('[core]\n\tbare = false\n[remote "upstream"]\n\turl = git@h:up/stream.git\n[remote "origin"]\n\turl = https://h/group/project.git\n'), "group/project");
  assert.equal(repoFromGitConfig('[remote "upstream"]\n\turl = git@h:up/stream.git\n'), "up/stream");
  assert.equal(repoFromGitConfig("[core]\n"), null);
  const t = tempLog();
  const repo = join(t.dir, "checkout");
  mkdirSync(join(repo, ".git"), { recursive: true });
  mkdirSync(join(repo, "src", "deep"), { recursive: true });
  writeFileSync(join(repo, ".git", "config"), '[remote "origin"]\n\turl = git@gitlab:team/app.git\n');
  assert.equal(repoFromGit(join(repo, "src", "deep")), "team/app");
  assert.equal(repoFromGit("/nonexistent/place"), null);
});

test("URLs in the log carry no credentials", () => {
  assert.equal(redactUrl("wss://user:pw@host:8686/agent/ws?token=abc"), "wss://host:8686/agent/ws?…");
  assert.equal(redactUrl("ws://127.0.0.1:8686/agent/ws"), "ws://127.0.0.1:8686/agent/ws");
  assert.equal(redactUrl("::"), "<bad url>");
  const c = readConfig({ LVMH_URL: "http://u:secretpw@x/agent/ws", HOME: "/nonexistent" });
  assert.ok(!c.problems.join(" ").includes("secretpw"));
});
