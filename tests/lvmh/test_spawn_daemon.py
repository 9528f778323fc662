"""Spawn through the real lvmh daemon (service_factory) against a fake engine and a fake GitLab."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import aiohttp
import pytest

from tests.conftest import LVMH_TOKEN
from tests.fakes.fake_docker import FakeDocker
from tests.fakes.fake_gitlab import FakeGitLab

if not hasattr(pytest.importorskip("lvmh_adapter.server", reason="the lvmh daemon is not in this build"),
               "LvmhFrontEnd"):
    pytest.skip("the lvmh daemon is not in this build", allow_module_level=True)

PAT = "glpat-DAEMONsecret0123456789"
ZAI_KEY = "zai-DAEMON-provider-key-0123"
AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}
V = "/v1.50"


@pytest.fixture
async def fakes():
    docker = await FakeDocker().start()
    gitlab = await FakeGitLab().start()
    gitlab.add_user(PAT, "alice")
    yield docker, gitlab
    await docker.stop()
    await gitlab.stop()


async def call(port, method, path, body=None, headers=AUTH):
    async with aiohttp.ClientSession() as s:
        async with s.request(method, f"http://127.0.0.1:{port}{path}", json=body, headers=headers) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None), text


async def recv_until(ws, pred, timeout=10.0):
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.receive()
            assert msg.type == aiohttp.WSMsgType.TEXT, msg
            frame = json.loads(msg.data)
            if pred(frame):
                return frame


async def test_spawn_through_the_daemon_end_to_end(service_factory, fakes, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ZAI_RENAUD_API_KEY", ZAI_KEY)
    docker, gitlab = fakes
    svc = await service_factory(adapters=("lvmh",), docker_url=docker.url, gitlab_url=gitlab.url)
    port = svc.ports["lvmh"]
    texts = []
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"http://127.0.0.1:{port}/ws?token={LVMH_TOKEN}")
        st, body, text = await call(port, "POST", "/api/gitlab/connect", {"token": PAT})
        texts.append(text)
        assert (st, body) == (200, {"username": "alice"})

        st, body, text = await call(port, "POST", "/api/spawn", {"repo": "group/project", "branch": "main"})
        texts.append(text)
        assert st == 200, body
        sid, wid = body["sessionId"], body["containerId"]
        # the browser is told about the job
        frame = await recv_until(ws, lambda f: f.get("type") == "spawn_status"
                                 and any(j["sessionId"] == sid and j["state"] == "running" for j in f["jobs"]))
        [job] = frame["jobs"]
        assert job["repo"] == "group/project" and job["containerId"] == wid

        fetch_create, clone_create, worker_create = [r for r in docker.requests if r.path == f"{V}/containers/create"]
        assert f"LVMH_CLONE_URL={gitlab.url}/group/project.git" in fetch_create.body["Env"]
        assert f"LVMH_GIT_TOKEN={PAT}" in fetch_create.body["Env"]  # the connected PAT is the fetch credential
        assert not any(PAT in e for e in clone_create.body["Env"])  # never where a worker's files are
        env = worker_create.body["Env"]
        worker_token = env[0].removeprefix("LVMH_TOKEN=")
        assert worker_token != LVMH_TOKEN  # the worker has a credential of its own
        assert env[1:4] == [
                           f"LVMH_URL=ws://host.docker.internal:{port}/agent/ws",  # the daemon's bound port
                           f"LVMH_SESSION_ID={sid}", "LVMH_REPO=group/project"]
        assert f"ZAI_RENAUD_API_KEY={ZAI_KEY}" in env
        assert worker_create.body["HostConfig"]["ExtraHosts"] == ["host.docker.internal:host-gateway"]
        assert worker_create.body["Labels"]["lvmh.session"] == sid

        st, jobs, text = await call(port, "GET", "/api/spawn/status")
        texts.append(text)
        assert st == 200 and [j["sessionId"] for j in jobs] == [sid]

        # step 3: the worker's plugin says hello with the pre-chosen id; the session registers
        plugin = await http.ws_connect(f"http://127.0.0.1:{port}/agent/ws",
                                       headers={"Authorization": f"Bearer {worker_token}"})
        await plugin.send_str(json.dumps({"v": 1, "type": "hello", "sessionId": sid, "seq": 0,
                                          "ts": int(time.time() * 1000),
                                          "session": {"id": sid, "name": None, "cwd": "/workspace", "model": "glm-5.3",
                                                      "provider": "zai-renaud", "agent": True, "repo": "group/project",
                                                      "startedAt": int(time.time() * 1000)}}))
        welcome = await recv_until(plugin, lambda f: f.get("type") == "welcome")
        assert welcome["lastSeq"] == 0
        st, sessions, text = await call(port, "GET", "/api/sessions")
        [mine] = [s for s in sessions if s["id"] == sid]
        assert mine["agent"] is True and mine["repo"] == "group/project"
        await plugin.close()

        st, body, text = await call(port, "DELETE", f"/api/sessions/{sid}/container")
        texts.append(text)
        assert (st, body) == (200, {"ok": True})
        assert f"DELETE {V}/containers/{wid}" in docker.lines()
        await recv_until(ws, lambda f: f.get("type") == "spawn_status"
                         and any(j["sessionId"] == sid and j["state"] == "stopped" for j in f["jobs"]))
        await ws.close()
    for t in texts + [caplog.text]:
        assert PAT not in t and ZAI_KEY not in t and LVMH_TOKEN not in t and worker_token not in t


async def test_daemon_routes_need_the_token(service_factory, fakes):
    docker, gitlab = fakes
    svc = await service_factory(adapters=("lvmh",), docker_url=docker.url, gitlab_url=gitlab.url)
    port = svc.ports["lvmh"]
    for method, path in (("POST", "/api/spawn"), ("GET", "/api/spawn/status"), ("DELETE", "/api/sessions/x/container"),
                         ("GET", "/api/gitlab/status"), ("POST", "/api/gitlab/connect"), ("GET", "/api/gitlab/repos")):
        st, body, _ = await call(port, method, path, {"repo": "g/p", "token": PAT},
                                 headers={"Authorization": "Bearer wrong"})
        assert st == 401, (method, path)
    assert docker.requests == [] and gitlab.requests == []


async def test_daemon_without_engine_answers_503_and_keeps_serving(service_factory, fakes):
    _, gitlab = fakes
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    svc = await service_factory(adapters=("lvmh",), docker_url=dead, gitlab_url=gitlab.url)
    port = svc.ports["lvmh"]
    want = {"error": f"Docker engine not reachable at {dead}"}
    st, body, _ = await call(port, "POST", "/api/spawn", {"repo": "group/project"})
    assert (st, body) == (503, want)
    st, body, _ = await call(port, "GET", "/api/spawn/status")
    assert (st, body) == (200, [])  # the job list is empty, not an error (the web UI asks on every load)
    st, body, _ = await call(port, "DELETE", "/api/sessions/abc/container")
    assert (st, body) == (503, want)
    st, body, _ = await call(port, "GET", "/api/sessions")
    assert st == 200 and isinstance(body, list)
    st, body, _ = await call(port, "GET", "/api/gitlab/status")
    assert (st, body) == (200, {"connected": False, "baseUrl": gitlab.url})
