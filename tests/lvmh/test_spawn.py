"""lvmh spawn over real HTTP against a fake Docker Engine that records the exact requests."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import socket
import tempfile
import uuid

import aiohttp
import pytest
from aiohttp import web

from cli.config import build_config
from bridge_core.bridge.sqlite import Store
from lvmh_adapter.gitlab import PAT_KEY
from lvmh_adapter.auth import token_hash
from lvmh_adapter.spawn import (
    CHECKOUT_SCRIPT,
    FETCH_SCRIPT,
    SpawnManager,
    agent_ws_url,
    git_host,
    mirror_volume,
    repo_volume,
    sessions_volume,
    valid_branch,
    valid_repo,
)
from tests.fakes.fake_docker import FakeDocker
from tests.lvmh.helpers import bearer_app
from tests.waiting import turns, until

API_TOKEN = "test-lvmh-token-0123456789"
PAT = "glpat-SECRETsecret0123456789"
ZAI_KEY = "zai-SECRET-provider-key-0123"
GITLAB = "http://gitlab.test:8929"
DAEMON_URL = "ws://bridge.test:8686/agent/ws"
V = "/v1.50"


class Env:
    """A SpawnManager on a bearer-checked aiohttp app, a fake engine, a store."""

    def __init__(self, tmp_path, *, docker_url=None, lvmh_toml="", unix=False, pat=PAT):
        self.tmp_path = tmp_path
        self.docker_url = docker_url
        self.lvmh_toml = lvmh_toml
        self.unix = unix
        self.pat = pat
        self.changes: list[list[dict]] = []
        self.responses: list[str] = []

    async def __aenter__(self):
        self.fake = None
        self._sockdir = None
        if self.docker_url is None:
            if self.unix:  # unix socket paths are short: keep it out of the long pytest tmp path
                self._sockdir = tempfile.mkdtemp(prefix="fd", dir="/tmp")
                self.fake = await FakeDocker().start(unix_path=os.path.join(self._sockdir, "docker.sock"))
            else:
                self.fake = await FakeDocker().start()
            self.docker_url = self.fake.url
        cfg_path = self.tmp_path / "config.toml"
        cfg_path.write_text("[lvmh]\n" + self.lvmh_toml)
        self.cfg = build_config(
            {"data_dir": str(self.tmp_path / "data"), "config": str(cfg_path), "docker_url": self.docker_url,
             "gitlab_url": GITLAB, "adapters": "lvmh", "lvmh_port": 0},
            {"LVMH_TOKEN": API_TOKEN, "PHEBY_SECRET": "x" * 20},
        )
        self.store = Store(str(self.tmp_path / "bridge.db")).open()
        if self.pat:
            await self.store.set_setting(PAT_KEY, self.pat)
        self.mgr = SpawnManager(self.cfg, self.store, self.changes.append, daemon_url=DAEMON_URL)
        self.runner = web.AppRunner(bearer_app(self.mgr.routes()), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {API_TOKEN}"})
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.runner.cleanup()
        await self.mgr.close()
        self.store.close()
        if self.fake is not None:
            await self.fake.stop()
        if self._sockdir:
            for name in os.listdir(self._sockdir):
                os.unlink(os.path.join(self._sockdir, name))
            os.rmdir(self._sockdir)

    async def call(self, method, path, **kw):
        async with self.http.request(method, self.url + path, **kw) as resp:
            text = await resp.text()
            self.responses.append(text)
            return resp.status, json.loads(text)

    def states(self, sid):
        return [next(j["state"] for j in jobs if j["sessionId"] == sid)
                for jobs in self.changes if any(j["sessionId"] == sid for j in jobs)]


@pytest.fixture
async def env(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", ZAI_KEY)
    async with Env(tmp_path) as e:
        yield e


def dead_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def fetch_env(pat=PAT, repo="group/project"):
    env = [f"LVMH_CLONE_URL={GITLAB}/{repo}.git", "LVMH_GIT_PROTOCOL=http", "LVMH_GIT_HOST=gitlab.test:8929",
           "GIT_TERMINAL_PROMPT=0"]
    if pat:
        env.append(f"LVMH_GIT_TOKEN={pat}")
    return env


def checkout_env(branch="", repo="group/project"):
    return [f"LVMH_CLONE_URL={GITLAB}/{repo}.git", f"LVMH_BRANCH={branch}", "GIT_TERMINAL_PROMPT=0"]


def worker_token(env, sid) -> str:
    """The worker's LVMH_TOKEN from its create request; checked to be a credential of that session only."""
    [create] = [r for r in env.fake.requests if r.path == f"{V}/containers/create"
                and r.body["Labels"].get("lvmh.role") == "agent" and r.body["Labels"].get("lvmh.session") == sid]
    token = create.body["Env"][0].removeprefix("LVMH_TOKEN=")
    assert token != API_TOKEN and len(token) >= 40
    assert env.store.query("SELECT sessionId FROM lvmh_worker_tokens WHERE hash=?", (token_hash(token),)) == [(sid,)]
    return token


MIRROR = mirror_volume("group/project")
REPO_VOL = repo_volume("group/project")


# --- the happy path, request by request -------------------------------------------------------


async def test_spawn_exact_request_sequence(env):
    status, body = await env.call("POST", "/api/spawn", json={"repo": "group/project", "branch": "dev"})
    assert status == 200, body
    sid, wid = body["sessionId"], body["containerId"]
    assert str(uuid.UUID(sid)) == sid and set(body) == {"sessionId", "containerId"}
    fetch = env.fake.by_name(f"lvmh-fetch-{sid}")
    clone = env.fake.by_name(f"lvmh-checkout-{sid}")
    worker = env.fake.by_name(f"lvmh-agent-{sid}")
    assert worker.id == wid
    await until(lambda: f"POST {V}/containers/{wid}/wait" in env.fake.lines())
    assert env.fake.lines() == [
        "GET /version",  # aiodocker's API version negotiation
        f"GET {V}/version",  # engine reachable?
        f"POST {V}/volumes/create",  # the mirror
        f"POST {V}/volumes/create",  # the repo volume
        f"GET {V}/images/alpine/git:latest/json",
        f"POST {V}/containers/create",  # fetch container (with the PAT, the mirror only)
        f"POST {V}/containers/{fetch.id}/start",
        f"POST {V}/containers/{fetch.id}/wait",
        f"DELETE {V}/containers/{fetch.id}",
        f"POST {V}/containers/create",  # checkout container (no token)
        f"POST {V}/containers/{clone.id}/start",
        f"POST {V}/containers/{clone.id}/wait",
        f"DELETE {V}/containers/{clone.id}",
        f"GET {V}/images/lvmh-worker:latest/json",
        f"POST {V}/volumes/create",  # this session's sessions volume
        f"POST {V}/containers/create",  # worker
        f"POST {V}/containers/{wid}/start",
        f"POST {V}/containers/{wid}/wait",  # background: watches the worker after the response
    ]
    r = env.fake.requests
    assert r[2].body == {"Name": MIRROR, "Labels": {"lvmh.repo": "group/project", "lvmh.role": "mirror",
                                                    "lvmh.managed": "true"}}
    assert r[3].body == {"Name": REPO_VOL, "Labels": {"lvmh.repo": "group/project", "lvmh.role": "repo",
                                                      "lvmh.managed": "true"}}
    assert r[5].query == {"name": f"lvmh-fetch-{sid}"}
    assert r[5].body == {
        "Image": "alpine/git:latest",
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": [FETCH_SCRIPT],
        "Env": fetch_env(),
        "WorkingDir": "/",
        "Labels": {"lvmh.role": "fetch", "lvmh.repo": "group/project", "lvmh.spawn": sid},
        "HostConfig": {"Mounts": [{"Type": "volume", "Source": MIRROR, "Target": "/mirror"}]},
    }
    assert PAT not in json.dumps(r[5].body["Cmd"])  # the PAT reaches git through the environment only
    assert r[8].query == {"force": "1"}
    assert r[9].query == {"name": f"lvmh-checkout-{sid}"}
    assert r[9].body == {
        "Image": "alpine/git:latest",
        "Entrypoint": ["/bin/sh", "-c"],
        "Cmd": [CHECKOUT_SCRIPT],
        "Env": checkout_env("dev"),
        "WorkingDir": "/",
        "Labels": {"lvmh.role": "checkout", "lvmh.repo": "group/project", "lvmh.spawn": sid},
        "HostConfig": {"Mounts": [{"Type": "volume", "Source": MIRROR, "Target": "/mirror", "ReadOnly": True},
                                  {"Type": "volume", "Source": REPO_VOL, "Target": "/workspace"}]},
    }
    assert PAT not in json.dumps(r[9].body)  # no token where the worker's files are
    assert r[12].query == {"force": "1"}
    assert r[14].body == {"Name": f"lvmh-sessions-{sid}", "Labels": {"lvmh.session": sid, "lvmh.role": "sessions",
                                                                      "lvmh.managed": "true"}}
    assert r[15].query == {"name": f"lvmh-agent-{sid}"}
    token = worker_token(env, sid)
    assert r[15].body == {
        "Image": "lvmh-worker:latest",
        "Cmd": ["node", "/bridge/index.mjs"],
        "WorkingDir": "/workspace",
        "Env": [
            f"LVMH_TOKEN={token}",
            f"LVMH_URL={DAEMON_URL}",
            f"LVMH_SESSION_ID={sid}",
            "LVMH_REPO=group/project",
            "LVMH_AGENT=1",
            "LVMH_BRANCH=dev",
            f"ZAI_RENAUD_API_KEY={ZAI_KEY}",
        ],
        "Labels": {"lvmh.session": sid, "lvmh.repo": "group/project", "lvmh.role": "agent", "lvmh.managed": "true"},
        "HostConfig": {"Mounts": [
            {"Type": "volume", "Source": REPO_VOL, "Target": "/workspace"},
            {"Type": "volume", "Source": f"lvmh-sessions-{sid}", "Target": "/pi-sessions"},
        ]},
    }
    assert PAT not in json.dumps(r[15].body) and API_TOKEN not in json.dumps(r[15].body)
    assert fetch not in env.fake.containers.values()  # the git containers are gone
    assert clone not in env.fake.containers.values()  # the clone container is gone
    assert worker.running
    # status and the pushes
    status, jobs = await env.call("GET", "/api/spawn/status")
    assert status == 200
    assert jobs == [{"repo": "group/project", "state": "running", "containerId": wid, "sessionId": sid, "branch": "dev"}]
    assert env.states(sid) == ["queued", "cloning", "starting", "running"]


async def test_default_branch_no_pat_no_provider_key_models_json_and_agent_url(tmp_path, monkeypatch):
    monkeypatch.delenv("ZAI_RENAUD_API_KEY", raising=False)
    toml = ('models_json = "/srv/lvmh/models.json"\nagent_url = "http://alarm:8686"\n'
            'models_json_target = "/home/node/.pi/agent/models.json"\n')
    async with Env(tmp_path, lvmh_toml=toml, pat=None) as e:
        status, body = await e.call("POST", "/api/spawn", json={"repo": "a/b/c.d_e-f"})
        assert status == 200, body
        [fetch_create, clone_create, worker_create] = [r for r in e.fake.requests
                                                       if r.path == f"{V}/containers/create"]
        assert fetch_create.body["Env"] == fetch_env(pat=None, repo="a/b/c.d_e-f")
        assert clone_create.body["Env"] == checkout_env("", repo="a/b/c.d_e-f")
        assert clone_create.body["HostConfig"]["Mounts"][1]["Source"] == repo_volume("a/b/c.d_e-f")
        assert worker_create.body["Env"] == [
            f"LVMH_TOKEN={worker_token(e, body['sessionId'])}",
            "LVMH_URL=ws://alarm:8686/agent/ws",  # [lvmh] agent_url wins over the daemon's own URL
            f"LVMH_SESSION_ID={body['sessionId']}",
            "LVMH_REPO=a/b/c.d_e-f",
            "LVMH_AGENT=1",
        ]
        assert worker_create.body["HostConfig"]["Mounts"][2] == {
            "Type": "bind", "Source": "/srv/lvmh/models.json", "Target": "/home/node/.pi/agent/models.json",
            "ReadOnly": True}


def test_helpers():
    h = hashlib.sha256(b"group/sub/project").hexdigest()[:10]
    assert repo_volume("group/sub/project") == f"lvmh-repo-group-sub-project-{h}"
    assert mirror_volume("group/sub/project") == f"lvmh-mirror-group-sub-project-{h}"
    # the spec's slug alone would make these one volume
    assert repo_volume("team-a/tools") != repo_volume("team/a-tools")
    assert mirror_volume("team-a/tools") != mirror_volume("team/a-tools")
    assert repo_volume("team-a/tools").startswith("lvmh-repo-team-a-tools-")
    assert sessions_volume("s-1") == "lvmh-sessions-s-1"
    assert git_host("https://gitlab.com/g/p.git") == ("https", "gitlab.com")
    assert git_host("http://gitlab.test:8929/g/p.git") == ("http", "gitlab.test:8929")
    assert git_host("https://[::1]:8443/g/p.git") == ("https", "[::1]:8443")
    assert agent_ws_url("http://h:1") == "ws://h:1/agent/ws"
    assert agent_ws_url("https://h:1/") == "wss://h:1/agent/ws"
    assert agent_ws_url("ws://h:1/agent/ws") == "ws://h:1/agent/ws"
    for ok in ("g/p", "Group.1/sub_2/Pro-ject", "a/_b"):
        assert valid_repo(ok), ok
    for bad in ("", "p", "/g/p", "g/p/", "g//p", "g/../p", "g/p.git", "-g/p", "g/p;rm", "g/p q", "g/.", "g/p\n",
                "g/" + "x" * 300, 42, None, ["g/p"]):
        assert not valid_repo(bad), bad
    for ok in ("main", "feature/x-1", "v1.2.3", "release_2"):
        assert valid_branch(ok), ok
    for bad in ("", "-x", "a..b", "a//b", "a/", "a.lock", "a b", "a;b", "$(x)", "a\nb", 1):
        assert not valid_branch(bad), bad


def test_lvmh_url_for_containers(tmp_path):
    cfg = build_config({"data_dir": str(tmp_path), "lvmh_port": 0}, {}, with_secrets=False)
    mgr = SpawnManager(cfg, None)
    for given, want in (("http://127.0.0.1:41000", "ws://host.docker.internal:41000/agent/ws"),
                        ("http://0.0.0.0:41000", "ws://host.docker.internal:41000/agent/ws"),
                        ("https://[::1]:8686", "wss://host.docker.internal:8686/agent/ws"),
                        ("http://10.1.2.3:8686", "ws://10.1.2.3:8686/agent/ws"),
                        ("wss://alarm.example:443/agent/ws", "wss://alarm.example:443/agent/ws")):
        mgr.daemon_url = given
        assert mgr._lvmh_url() == want, given
    mgr.daemon_url = lambda: "http://alarm:1"
    assert mgr._lvmh_url() == "ws://alarm:1/agent/ws"
    mgr.agent_url = "ws://override:2"
    assert mgr._lvmh_url() == "ws://override:2/agent/ws"


# --- serialisation per volume -----------------------------------------------------------------


async def test_concurrent_spawns_on_one_repo_serialise_their_clones(env):
    env.fake.clone_gate = asyncio.Event()
    p1 = asyncio.ensure_future(env.call("POST", "/api/spawn", json={"repo": "group/project"}))
    await until(lambda: any(line.endswith("/wait") for line in env.fake.lines()))
    p2 = asyncio.ensure_future(env.call("POST", "/api/spawn", json={"repo": "group/project", "branch": "b2"}))
    await until(lambda: len(env.mgr.jobs()) == 2 and env.mgr.jobs()[1]["state"] == "queued")
    await turns(20)  # let the second job run as far as it can: it must stay queued
    status, jobs = await env.call("GET", "/api/spawn/status")
    assert [j["state"] for j in jobs] == ["cloning", "queued"]
    creates = [r for r in env.fake.requests if r.path == f"{V}/containers/create"]
    assert len(creates) == 1  # the second spawn's git containers wait for the first
    env.fake.clone_gate.set()
    (s1, b1), (s2, b2) = await asyncio.gather(p1, p2)
    assert s1 == s2 == 200 and b1["sessionId"] != b2["sessionId"]
    c1 = env.fake.by_name(f"lvmh-checkout-{b1['sessionId']}").id
    f2 = env.fake.by_name(f"lvmh-fetch-{b2['sessionId']}").id
    lines = env.fake.lines()
    # spawn 1's fetch and checkout are created, run and removed before spawn 2's fetch starts
    i_del1 = lines.index(f"DELETE {V}/containers/{c1}")
    i_start2 = lines.index(f"POST {V}/containers/{f2}/start")
    assert lines.index(f"POST {V}/containers/{c1}/wait") < i_del1 < i_start2
    git_creates = [i for i, r in enumerate(env.fake.requests)
                   if r.path == f"{V}/containers/create" and r.body["Labels"].get("lvmh.role") in ("fetch", "checkout")]
    assert len(git_creates) == 4 and git_creates[1] < i_del1 < git_creates[2]
    assert env.fake.requests[git_creates[3]].body["Env"][1] == "LVMH_BRANCH=b2"


async def test_different_repos_clone_in_parallel(env):
    env.fake.clone_gate = asyncio.Event()
    p1 = asyncio.ensure_future(env.call("POST", "/api/spawn", json={"repo": "group/one"}))
    p2 = asyncio.ensure_future(env.call("POST", "/api/spawn", json={"repo": "group/two"}))
    await until(lambda: sum(line.endswith("/wait") for line in env.fake.lines()) == 2)
    assert sorted(j["state"] for j in env.mgr.jobs()) == ["cloning", "cloning"]
    env.fake.clone_gate.set()
    assert [s for s, _ in await asyncio.gather(p1, p2)] == [200, 200]
    sids = [j["sessionId"] for j in env.mgr.jobs()]
    assert set(env.fake.volumes) == {repo_volume("group/one"), repo_volume("group/two"), mirror_volume("group/one"),
                                     mirror_volume("group/two")} | {sessions_volume(s) for s in sids}


async def test_too_many_spawns_in_flight_is_429(tmp_path):
    async with Env(tmp_path, lvmh_toml="max_active_spawns = 1\n") as e:
        e.fake.clone_gate = asyncio.Event()
        p1 = asyncio.ensure_future(e.call("POST", "/api/spawn", json={"repo": "g/one"}))
        await until(lambda: any(line.endswith("/wait") for line in e.fake.lines()))
        status, body = await e.call("POST", "/api/spawn", json={"repo": "g/two"})
        assert status == 429 and "too many" in body["error"]
        e.fake.clone_gate.set()
        assert (await p1)[0] == 200


# --- images -----------------------------------------------------------------------------------


async def test_builds_missing_worker_image_from_context(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", ZAI_KEY)
    ctx = tmp_path / "ctx"
    (ctx / "docker").mkdir(parents=True)
    (ctx / "docker" / "worker.Dockerfile").write_text("FROM node:22\nCOPY bridge /bridge\n")
    (ctx / "bridge").mkdir()
    (ctx / "bridge" / "index.mjs").write_text("// bridge\n")
    (ctx / ".git").mkdir()
    (ctx / ".git" / "config").write_text("[core]\n")
    (ctx / "node_modules" / "x").mkdir(parents=True)
    (ctx / "node_modules" / "x" / "i.js").write_text("x")
    async with Env(tmp_path, lvmh_toml=f'worker_context = "{ctx}"\n') as e:
        e.fake.images.discard("lvmh-worker:latest")
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 200, body
        lines = e.fake.lines()
        i = lines.index(f"GET {V}/images/lvmh-worker:latest/json")
        assert lines[i + 1:i + 4] == [f"POST {V}/build", f"POST {V}/volumes/create", f"POST {V}/containers/create"]
        build = e.fake.requests[i + 1]
        assert build.query == {"t": "lvmh-worker:latest", "rm": "1", "q": "0", "pull": "0", "nocache": "0",
                               "forcerm": "0", "dockerfile": "docker/worker.Dockerfile"}
        assert build.content_type == "application/x-tar"
        assert sorted(e.fake.build_members) == ["bridge/index.mjs", "docker/worker.Dockerfile"]
        assert e.states(body["sessionId"]) == ["queued", "cloning", "starting", "building", "starting", "running"]
        # a second spawn finds the image and does not build again
        status, _ = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 200 and e.fake.lines().count(f"POST {V}/build") == 1


async def test_builds_missing_worker_image_from_the_shipped_worker_by_default(tmp_path, monkeypatch):
    """No [lvmh] worker_context: the context is the lvmh_adapter package, Dockerfile worker/Dockerfile."""
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", ZAI_KEY)
    async with Env(tmp_path) as e:
        e.fake.images.discard("lvmh-worker:latest")
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 200, body
        build = next(r for r in e.fake.requests if r.path.endswith("/build"))
        assert build.query["dockerfile"] == "worker/Dockerfile"
        members = set(e.fake.build_members)
        assert {"worker/Dockerfile", "worker/index.mjs", "pi_extension/lvmh-agent.mjs", "pi_extension/package.json",
                "pi_extension/lib/link.mjs"} <= members
        assert not any("__pycache__" in m or "node_modules" in m for m in members)


async def test_missing_worker_image_without_context_is_a_clear_503(tmp_path):
    async with Env(tmp_path, lvmh_toml=f'worker_context = "{tmp_path / "nothing"}"\n') as e:
        e.fake.images.discard("lvmh-worker:latest")
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 503
        assert "lvmh-worker:latest is missing" in body["error"] and "docker/worker.Dockerfile" in body["error"]
        assert not any(r.body and r.body.get("Image") == "lvmh-worker:latest" for r in e.fake.requests)
        _, jobs = await e.call("GET", "/api/spawn/status")
        assert jobs[0]["state"] == "failed" and jobs[0]["error"] == body["error"]


async def test_failed_build_is_502(tmp_path):
    ctx = tmp_path / "ctx"
    (ctx / "docker").mkdir(parents=True)
    (ctx / "docker" / "worker.Dockerfile").write_text("FROM node:22\n")
    async with Env(tmp_path, lvmh_toml=f'worker_context = "{ctx}"\n') as e:
        e.fake.images.discard("lvmh-worker:latest")
        e.fake.build_error = "npm ERR! network unreachable"
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 502 and "building lvmh-worker:latest failed" in body["error"]
        assert "npm ERR! network unreachable" in body["error"]


async def test_missing_git_image_is_pulled(env):
    env.fake.images.discard("alpine/git:latest")
    status, _ = await env.call("POST", "/api/spawn", json={"repo": "group/project"})
    assert status == 200
    lines = env.fake.lines()
    i = lines.index(f"GET {V}/images/alpine/git:latest/json")
    assert lines[i + 1:i + 3] == [f"POST {V}/images/create", f"POST {V}/containers/create"]
    assert env.fake.requests[i + 1].query == {"fromImage": "alpine/git:latest"}


# --- failures ---------------------------------------------------------------------------------


async def test_clone_failure_is_502_with_scrubbed_log_tail(env, caplog):
    caplog.set_level(logging.DEBUG)
    env.fake.clone_exit = 128
    env.fake.clone_logs = (f"Cloning into '/workspace'...\nfatal: could not read https://oauth2:{PAT}@gitlab.test\n"
                           "fatal: repository 'group/project' not found\n")
    status, body = await env.call("POST", "/api/spawn", json={"repo": "group/project"})
    assert status == 502
    assert body["error"].startswith("git fetch of group/project failed (exit 128): ")
    assert "repository 'group/project' not found" in body["error"] and "***" in body["error"]
    lines = env.fake.lines()
    clone = env.fake.removed[0]
    assert lines[-4:] == [f"POST {V}/containers/{clone.id}/wait", f"GET {V}/containers/{clone.id}/json",
                          f"GET {V}/containers/{clone.id}/logs", f"DELETE {V}/containers/{clone.id}"]
    assert env.fake.requests[-2].query == {"stdout": "1", "stderr": "1", "follow": "0", "tail": "20"}
    assert not any(r.body and r.body.get("Image") == "lvmh-worker:latest" for r in env.fake.requests)
    _, jobs = await env.call("GET", "/api/spawn/status")
    assert jobs[0]["state"] == "failed" and jobs[0]["containerId"] is None
    for text in env.responses + [caplog.text]:
        assert PAT not in text
    # the checkout container never ran, no worker credential was issued
    assert [c.role for c in env.fake.removed] == ["fetch"]
    assert env.mgr.credentials.sessions() == []


async def test_checkout_failure_is_502_and_starts_no_worker(env):
    env.fake.role_exit = {"checkout": 1}
    env.fake.clone_logs = "error: pathspec 'nope' did not match any file(s) known to git\n"
    status, body = await env.call("POST", "/api/spawn", json={"repo": "group/project", "branch": "nope"})
    assert status == 502
    assert body["error"] == ("git checkout of group/project failed (exit 1): "
                             "error: pathspec 'nope' did not match any file(s) known to git")
    assert [c.role for c in env.fake.removed] == ["fetch", "checkout"]
    assert not any(r.body and r.body.get("Image") == "lvmh-worker:latest" for r in env.fake.requests)
    assert env.mgr.credentials.sessions() == []


async def test_worker_create_refused_is_502(env):
    env.fake.create_error = (400, "invalid mount config for type \"bind\": bind source path does not exist")
    status, body = await env.call("POST", "/api/spawn", json={"repo": "group/project"})
    assert status == 502 and "bind source path does not exist" in body["error"]
    assert env.mgr.credentials.sessions() == []  # the token issued for it is revoked again


async def test_worker_exit_is_tracked_with_log_tail(env):
    _, body = await env.call("POST", "/api/spawn", json={"repo": "group/project"})
    wid = body["containerId"]
    await until(lambda: f"POST {V}/containers/{wid}/wait" in env.fake.lines())
    env.fake.worker_logs = "boom: cannot reach daemon\n"
    env.fake.by_name(f"lvmh-agent-{body['sessionId']}").logs = env.fake.worker_logs
    env.fake.exit(wid, 1)
    await until(lambda: env.mgr.jobs()[0]["state"] == "exited")
    [job] = env.mgr.jobs()
    assert job["exitCode"] == 1 and job["error"] == "worker exited with 1: boom: cannot reach daemon"
    assert env.changes[-1] == env.mgr.jobs()


# --- stopping ---------------------------------------------------------------------------------


async def test_delete_container_stops_and_removes_by_label(env):
    _, body = await env.call("POST", "/api/spawn", json={"repo": "group/project"})
    sid, wid = body["sessionId"], body["containerId"]
    assert env.mgr.credentials.sessions() == [sid]
    await until(lambda: f"POST {V}/containers/{wid}/wait" in env.fake.lines())
    n = len(env.fake.requests)
    status, out = await env.call("DELETE", f"/api/sessions/{sid}/container")
    assert (status, out) == (200, {"ok": True})
    reqs = env.fake.requests[n:]
    assert [r.line for r in reqs] == [f"GET {V}/containers/json", f"POST {V}/containers/{wid}/stop",
                                      f"DELETE {V}/containers/{wid}"]
    assert reqs[0].query == {"all": "1", "filters": json.dumps({"label": [f"lvmh.session={sid}"]})}
    assert reqs[1].query == {"t": "10"} and reqs[2].query == {"force": "1"}
    assert env.mgr.credentials.sessions() == []  # deleting the container revoked the worker's token
    await until(lambda: env.mgr.jobs()[0].get("exitCode") is not None)
    assert env.mgr.jobs()[0]["state"] == "stopped"
    status, out = await env.call("DELETE", f"/api/sessions/{sid}/container")
    assert status == 404 and "no spawned container" in out["error"]


async def test_delete_finds_containers_of_an_earlier_daemon_run(env):
    # a container the manager never saw (daemon restarted): found by its label alone
    env.fake.images.add("lvmh-worker:latest")
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{env.fake.url}{V}/containers/create", params={"name": "lvmh-agent-old"},
                          json={"Image": "lvmh-worker:latest", "Labels": {"lvmh.session": "old-session-1"}}) as r:
            cid = (await r.json())["Id"]
    status, out = await env.call("DELETE", "/api/sessions/old-session-1/container")
    assert (status, out) == (200, {"ok": True})
    assert cid not in env.fake.containers
    assert f"POST {V}/containers/{cid}/stop" in env.fake.lines()  # not running: 304, tolerated


async def test_delete_bad_or_unknown_session(env):
    assert (await env.call("DELETE", "/api/sessions/nope/container"))[0] == 404
    status, body = await env.call("DELETE", "/api/sessions/bad%20id%3B/container")
    assert status == 400 and body == {"error": "invalid session id"}


async def test_delete_during_clone_cancels_the_spawn(env):
    env.fake.clone_gate = asyncio.Event()
    p = asyncio.ensure_future(env.call("POST", "/api/spawn", json={"repo": "group/project"}))
    await until(lambda: any(line.endswith("/wait") for line in env.fake.lines()))
    [job] = env.mgr.jobs()
    status, out = await env.call("DELETE", f"/api/sessions/{job['sessionId']}/container")
    assert (status, out) == (200, {"ok": True})
    status, body = await p
    assert status == 409 and body == {"error": "spawn cancelled"}
    assert env.fake.containers == {}  # the clone container was removed
    assert env.mgr.jobs()[0]["state"] == "cancelled"
    assert not any(r.body and r.body.get("Image") == "lvmh-worker:latest" for r in env.fake.requests)


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"", b"nope", b"[]", b'"group/project"', b"{}", b'{"repo": 5}', b'{"repo": "project"}', b'{"repo": "g/p;x"}',
     b'{"repo": "g/../p"}', b'{"repo": "g/p", "branch": "--upload-pack=x"}', b'{"repo": "g/p", "branch": 7}',
     b'{"repo": "g/p", "branch": "a b"}', b"\xff\xfe"],
)
async def test_bad_bodies_are_400_and_touch_no_engine(env, raw):
    status, body = await env.call("POST", "/api/spawn", data=raw, headers={"Content-Type": "application/json"})
    assert status == 400 and isinstance(body["error"], str)
    assert env.fake.requests == []


async def test_routes_sit_behind_the_bearer_middleware(env):
    async with aiohttp.ClientSession() as anon:
        for method, path in (("POST", "/api/spawn"), ("GET", "/api/spawn/status"),
                             ("DELETE", "/api/sessions/x/container")):
            async with anon.request(method, env.url + path) as resp:
                assert resp.status == 401
    assert env.fake.requests == []


# --- no engine --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tcp", "unix"])
async def test_no_engine_is_503_everywhere(tmp_path, kind):
    url = dead_port_url() if kind == "tcp" else f"unix://{tmp_path}/no-such-docker.sock"
    async with Env(tmp_path, docker_url=url) as e:
        expected = {"error": f"Docker engine not reachable at {url}"}
        assert await e.call("POST", "/api/spawn", json={"repo": "group/project"}) == (503, expected)
        # status is the (empty) job list, not an error: the web UI asks on every page load;
        # the reason rides in a header for the spawn dialog
        async with e.http.get(e.url + "/api/spawn/status") as resp:
            assert resp.status == 200 and await resp.json() == []
            assert resp.headers["X-Lvmh-Spawn-Unavailable"] == expected["error"]
        assert await e.call("DELETE", "/api/sessions/abc/container") == (503, expected)
        assert e.mgr.jobs() == []  # no job left behind
        # bad input is still judged first
        assert (await e.call("POST", "/api/spawn", json={"repo": "x"}))[0] == 400


async def test_engine_on_a_unix_socket(tmp_path, monkeypatch):
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", ZAI_KEY)
    async with Env(tmp_path, unix=True) as e:
        assert e.docker_url.startswith("unix:///tmp/")
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 200 and body["containerId"] == e.fake.by_name(f"lvmh-agent-{body['sessionId']}").id
        status, out = await e.call("DELETE", f"/api/sessions/{body['sessionId']}/container")
        assert status == 200


async def test_unusable_docker_url_is_503(tmp_path):
    async with Env(tmp_path, docker_url="bogus-no-scheme") as e:
        status, body = await e.call("POST", "/api/spawn", json={"repo": "group/project"})
        assert status == 503 and body["error"].startswith("Docker engine URL bogus-no-scheme is not usable")
        assert (await e.call("DELETE", "/api/sessions/abc/container"))[0] == 503


@pytest.mark.parametrize("bad", ['"soon"', "-1", "0"])
def test_bad_numbers_in_config_are_config_errors(tmp_path, bad):
    from bridge_core.model.errors import ConfigError

    (tmp_path / "c.toml").write_text(f"[lvmh]\nclone_timeout = {bad}\n")
    cfg = build_config({"data_dir": str(tmp_path), "config": str(tmp_path / "c.toml")}, {}, with_secrets=False)
    with pytest.raises(ConfigError, match="lvmh.clone_timeout must be a positive number"):
        SpawnManager(cfg, None)


def test_docker_url_defaults(tmp_path, monkeypatch):
    from lvmh_adapter.spawn import docker_url_of

    cfg = build_config({"data_dir": str(tmp_path)}, {}, with_secrets=False)
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("LVMH_CONTAINER_DOCKER_SOCK", raising=False)
    assert docker_url_of(cfg) == "unix:///var/run/docker.sock"
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:2375")
    assert docker_url_of(cfg) == "http://127.0.0.1:2375"
    # the spec's variable wins over DOCKER_HOST (a path, or a URL)
    monkeypatch.setenv("LVMH_CONTAINER_DOCKER_SOCK", "/run/lvmh/docker.sock")
    assert docker_url_of(cfg) == "unix:///run/lvmh/docker.sock"
    assert docker_url_of(cfg, {"LVMH_CONTAINER_DOCKER_SOCK": "tcp://10.0.0.1:2375"}) == "http://10.0.0.1:2375"
    # an explicit [lvmh] docker_url / LVMH_DOCKER_URL wins over both
    cfg.frontend("lvmh").docker_url = "unix:///run/other.sock"
    assert docker_url_of(cfg) == "unix:///run/other.sock"


# --- secrets ----------------------------------------------------------------------------------


async def test_secrets_never_in_logs_or_responses(env, caplog):
    caplog.set_level(logging.DEBUG)
    _, body = await env.call("POST", "/api/spawn", json={"repo": "group/project", "branch": "main"})
    await env.call("GET", "/api/spawn/status")
    await env.call("DELETE", f"/api/sessions/{body['sessionId']}/container")
    env.fake.clone_exit = 1
    env.fake.clone_logs = f"token {PAT} provider {ZAI_KEY} lvmh {API_TOKEN}\n"
    status, body = await env.call("POST", "/api/spawn", json={"repo": "group/other"})
    assert status == 502 and body["error"].endswith("token *** provider *** lvmh ***")
    assert "spawn" in caplog.text  # logging happened
    for text in env.responses + [caplog.text, json.dumps(env.changes)]:
        for secret in (PAT, ZAI_KEY, API_TOKEN):
            assert secret not in text
