"""lvmh GitLab routes over real HTTP against a fake GitLab that records every request."""

from __future__ import annotations

import json
import logging
import socket

import aiohttp
import pytest
from aiohttp import web

from bridge_core.bridge.sqlite import Store
from lvmh_adapter.gitlab import PAT_KEY, USERNAME_KEY, GitLabClient
from tests.fakes.fake_gitlab import FakeGitLab, project
from tests.lvmh.helpers import bearer_app

API_TOKEN = "test-lvmh-token-0123456789"
PAT = "glpat-SECRETsecret0123456789"
OTHER_PAT = "glpat-WRONGwrong9876543210"


class Env:
    def __init__(self, tmp_path, base_url=None, timeout=15.0):
        self.tmp_path = tmp_path
        self.base_url = base_url
        self.timeout = timeout
        self.responses: list[str] = []

    async def __aenter__(self):
        self.fake = await FakeGitLab().start()
        self.store = Store(str(self.tmp_path / "bridge.db")).open()
        self.client = GitLabClient(self.store, self.base_url or self.fake.url + "/", timeout=self.timeout)
        self.runner = web.AppRunner(bearer_app(self.client.routes()), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        self.http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {API_TOKEN}"})
        return self

    async def __aexit__(self, *exc):
        await self.http.close()
        await self.runner.cleanup()
        await self.client.close()
        self.store.close()
        await self.fake.stop()

    async def call(self, method, path, **kw):
        async with self.http.request(method, self.url + path, **kw) as resp:
            text = await resp.text()
            self.responses.append(text)
            return resp.status, json.loads(text)


@pytest.fixture
async def env(tmp_path):
    async with Env(tmp_path) as e:
        yield e


async def test_status_when_not_connected(env):
    status, body = await env.call("GET", "/api/gitlab/status")
    assert status == 200
    assert body == {"connected": False, "baseUrl": env.fake.url}
    assert env.fake.requests == []  # status never calls GitLab


async def test_connect_validates_via_user_and_stores_pat(env):
    env.fake.add_user(PAT, "alice")
    status, body = await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    assert (status, body) == (200, {"username": "alice"})
    [req] = env.fake.requests
    assert (req.method, req.path, req.query, req.token) == ("GET", "/api/v4/user", {}, PAT)
    assert env.store.get_setting(PAT_KEY) == PAT
    assert env.store.get_setting(USERNAME_KEY) == "alice"
    status, body = await env.call("GET", "/api/gitlab/status")
    assert (status, body) == (200, {"connected": True, "baseUrl": env.fake.url, "username": "alice"})
    assert len(env.fake.requests) == 1


async def test_invalid_pat_is_400_and_not_stored(env):
    env.fake.add_user(PAT, "alice")
    status, body = await env.call("POST", "/api/gitlab/connect", json={"token": OTHER_PAT})
    assert status == 400
    assert "rejected" in body["error"]
    assert env.store.get_setting(PAT_KEY) is None
    status, body = await env.call("GET", "/api/gitlab/status")
    assert body == {"connected": False, "baseUrl": env.fake.url}


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"[1,2]", b'"token"', b"{}", b'{"token": ""}', b'{"token": 42}', b'{"token": null}',
     b'{"token": "a b"}', b'{"token": "abc\\ndef"}', b'{"token": "' + b"x" * 600 + b'"}', b"\xff\xfe"],
)
async def test_bad_connect_bodies_are_400_without_calling_gitlab(env, raw):
    status, body = await env.call("POST", "/api/gitlab/connect", data=raw, headers={"Content-Type": "application/json"})
    assert status == 400 and isinstance(body["error"], str)
    assert env.fake.requests == []


async def test_repos_requires_connection(env):
    status, body = await env.call("GET", "/api/gitlab/repos")
    assert status == 409 and "not connected" in body["error"]
    assert env.fake.requests == []


async def test_repos_paginates_maps_and_sorts(env):
    env.fake.add_user(PAT, "alice")
    # 230 projects: three pages of 100/100/30, returned in descending activity order
    env.fake.projects = [project(f"group/sub/p{i:03d}", f"2026-11-{28 - i // 10:02d}T10:{59 - i % 60:02d}:00.000Z")
                         for i in range(230)]
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    status, repos = await env.call("GET", "/api/gitlab/repos")
    assert status == 200
    assert len(repos) == 230
    assert repos[0] == {
        "path": "group/sub/p000",
        "name": "P000",
        "namespace": "group/sub",
        "lastActivityAt": "2026-11-28T10:59:00.000Z",
        "webUrl": "https://gitlab.example/group/sub/p000",
        "defaultBranch": "main",
    }
    acts = [r["lastActivityAt"] for r in repos]
    assert acts == sorted(acts, reverse=True)
    calls = [r for r in env.fake.requests if r.path == "/api/v4/projects"]
    assert [c.query for c in calls] == [
        {"membership": "true", "order_by": "last_activity_at", "sort": "desc", "archived": "false",
         "simple": "true", "per_page": "100", "page": str(p)}
        for p in (1, 2, 3)
    ]
    assert all(c.token == PAT and c.method == "GET" for c in calls)


async def test_repos_stops_after_three_pages(env):
    env.fake.add_user(PAT, "alice")
    env.fake.projects = [project(f"g/p{i}", "2026-11-01T00:00:00Z") for i in range(450)]
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    status, repos = await env.call("GET", "/api/gitlab/repos")
    assert status == 200 and len(repos) == 300
    assert [r.query["page"] for r in env.fake.requests if r.path == "/api/v4/projects"] == ["1", "2", "3"]


async def test_repos_sorted_even_if_gitlab_is_not_and_tolerates_odd_entries(env):
    env.fake.add_user(PAT, "alice")
    p_old = project("a/old", "2025-01-01T00:00:00Z")
    p_new = project("b/c/new", "2026-06-01T00:00:00Z", default_branch="develop")
    p_new_ns = dict(p_new)
    del p_new_ns["namespace"]  # namespace derived from the path when GitLab leaves it out
    p_none = project("x/no-activity", None)
    env.fake.projects = [p_old, p_none, p_new_ns, "junk", {"no": "path"}]
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    status, repos = await env.call("GET", "/api/gitlab/repos")
    assert status == 200
    assert [r["path"] for r in repos] == ["b/c/new", "a/old", "x/no-activity"]
    assert repos[0]["namespace"] == "b/c" and repos[0]["defaultBranch"] == "develop"
    assert repos[2]["lastActivityAt"] is None


async def test_revoked_token_on_repos_is_409(env):
    env.fake.add_user(PAT, "alice")
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    env.fake.users.clear()
    status, body = await env.call("GET", "/api/gitlab/repos")
    assert status == 409 and "connect again" in body["error"]
    env.fake.projects_status = 500
    env.fake.add_user(PAT, "alice")
    status, body = await env.call("GET", "/api/gitlab/repos")
    assert status == 502 and "500" in body["error"]


async def test_disconnect_forgets_pat(env):
    env.fake.add_user(PAT, "alice")
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    status, body = await env.call("DELETE", "/api/gitlab/connect")
    assert (status, body) == (200, {"ok": True})
    assert env.store.get_setting(PAT_KEY) is None and env.store.get_setting(USERNAME_KEY) is None
    assert (await env.call("GET", "/api/gitlab/status"))[1] == {"connected": False, "baseUrl": env.fake.url}
    assert (await env.call("GET", "/api/gitlab/repos"))[0] == 409
    # disconnecting twice is fine
    assert await env.call("DELETE", "/api/gitlab/connect") == (200, {"ok": True})


async def test_gitlab_unreachable_is_502(tmp_path):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    async with Env(tmp_path, base_url=dead) as e:
        status, body = await e.call("POST", "/api/gitlab/connect", json={"token": PAT})
        assert status == 502 and body == {"error": f"GitLab not reachable at {dead}"}
        assert (await e.call("GET", "/api/gitlab/status"))[1]["baseUrl"] == dead


async def test_gitlab_timeout_is_504(tmp_path):
    async with Env(tmp_path, timeout=0.3) as e:
        e.fake.hang = True
        status, body = await e.call("POST", "/api/gitlab/connect", json={"token": PAT})
        assert status == 504 and "did not answer" in body["error"]


async def test_routes_sit_behind_the_bearer_middleware(env):
    async with aiohttp.ClientSession() as anon:
        for method, path in (("GET", "/api/gitlab/status"), ("POST", "/api/gitlab/connect"),
                             ("DELETE", "/api/gitlab/connect"), ("GET", "/api/gitlab/repos")):
            async with anon.request(method, env.url + path) as resp:
                assert resp.status == 401


async def test_pat_never_in_logs_or_responses(env, caplog):
    caplog.set_level(logging.DEBUG)
    env.fake.add_user(PAT, "alice")
    env.fake.projects = [project("g/p", "2026-11-01T00:00:00Z")]
    await env.call("POST", "/api/gitlab/connect", json={"token": OTHER_PAT})  # rejected
    await env.call("POST", "/api/gitlab/connect", json={"token": PAT})
    await env.call("GET", "/api/gitlab/status")
    await env.call("GET", "/api/gitlab/repos")
    env.fake.projects_status = 401
    await env.call("GET", "/api/gitlab/repos")
    await env.call("DELETE", "/api/gitlab/connect")
    assert env.responses
    for text in env.responses + [caplog.text]:
        assert PAT not in text and OTHER_PAT not in text
    assert "alice" in caplog.text  # the logging did happen
