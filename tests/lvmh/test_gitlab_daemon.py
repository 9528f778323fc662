"""GitLab routes through the real lvmh daemon (service_factory) against a fake GitLab."""

from __future__ import annotations

import json
import logging

import aiohttp
import pytest

from tests.conftest import LVMH_TOKEN
from tests.fakes.fake_gitlab import FakeGitLab, project

if not hasattr(pytest.importorskip("lvmh_adapter.server", reason="the lvmh daemon is not in this build"),
               "LvmhFrontEnd"):
    pytest.skip("the lvmh daemon is not in this build", allow_module_level=True)

PAT = "glpat-DAEMONsecret0123456789"
AUTH = {"Authorization": f"Bearer {LVMH_TOKEN}"}


@pytest.fixture
async def fake_gitlab():
    gitlab = await FakeGitLab().start()
    gitlab.add_user(PAT, "alice")
    yield gitlab
    await gitlab.stop()


async def call(port, method, path, body=None, headers=AUTH):
    async with aiohttp.ClientSession() as s:
        async with s.request(method, f"http://127.0.0.1:{port}{path}", json=body, headers=headers) as r:
            text = await r.text()
            return r.status, (json.loads(text) if text else None), text


async def test_gitlab_through_the_daemon(service_factory, fake_gitlab, caplog):
    caplog.set_level(logging.DEBUG)
    gitlab = fake_gitlab
    gitlab.projects = [project("g/new", "2026-11-20T00:00:00Z"), project("g/old", "2026-01-01T00:00:00Z")]
    svc = await service_factory(adapters=("lvmh",), gitlab_url=gitlab.url + "/")
    port = svc.ports["lvmh"]
    texts = []
    st, body, t = await call(port, "POST", "/api/gitlab/connect", {"token": "glpat-nope-nope"})
    texts.append(t)
    assert st == 400 and "rejected" in body["error"]
    st, body, t = await call(port, "POST", "/api/gitlab/connect", {"token": PAT})
    texts.append(t)
    assert (st, body) == (200, {"username": "alice"})
    st, body, t = await call(port, "GET", "/api/gitlab/status")
    texts.append(t)
    assert (st, body) == (200, {"connected": True, "baseUrl": gitlab.url, "username": "alice"})
    st, repos, t = await call(port, "GET", "/api/gitlab/repos")
    texts.append(t)
    assert st == 200 and [r["path"] for r in repos] == ["g/new", "g/old"]
    st, body, t = await call(port, "DELETE", "/api/gitlab/connect")
    assert (st, body) == (200, {"ok": True})
    st, body, _ = await call(port, "POST", "/api/gitlab/connect", [1])
    assert st == 400 and "error" in body
    for t in texts + [caplog.text]:
        assert PAT not in t
