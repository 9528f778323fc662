"""Push tests: a real bridge (in process, real sockets) and loopback push services (receivers.py)."""

from __future__ import annotations

import json
import os

import aiohttp
import pytest

from tests.conftest import LVMH_TOKEN
from tests.push.receivers import Ntfy, PushService, Webhook

WEBHOOK_SECRET = "webhook-secret-for-tests-0123456789"


def write_push_config(path: str, push: dict) -> str:
    lines = ["[push]"]
    for k, v in push.items():
        lines.append(f"{k} = {json.dumps(v) if not isinstance(v, bool) else ('true' if v else 'false')}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


@pytest.fixture
async def push_service():
    svc = await PushService().start()
    yield svc
    await svc.stop()


@pytest.fixture
async def ntfy():
    svc = await Ntfy().start()
    yield svc
    await svc.stop()


@pytest.fixture
async def webhook():
    svc = await Webhook(WEBHOOK_SECRET).start()
    yield svc
    await svc.stop()


@pytest.fixture
def push_bridge(service_factory, tmp_path):
    """``await push_bridge(grace_seconds=..., ...)``: a Service whose config file has that ``[push]``
    (with ``allow_insecure_endpoints``: the loopback push services are plain http://, unless a test says)."""
    count = [0]

    async def start(adapters=("pheby", "loomi", "lvmh"), data_dir=None, approval_timeout=300.0, **push):
        push.setdefault("allow_insecure_endpoints", True)
        count[0] += 1
        path = write_push_config(os.path.join(str(tmp_path), f"push{count[0]}.toml"), push)
        return await service_factory(adapters, data_dir=data_dir, config=path, approval_timeout=approval_timeout)

    return start


class Rest:
    """lvmh REST with the user's token."""

    def __init__(self, svc):
        self.base = f"http://127.0.0.1:{svc.ports['lvmh']}"
        self.http = aiohttp.ClientSession(headers={"Authorization": f"Bearer {LVMH_TOKEN}"})

    async def call(self, method: str, path: str, body=None) -> tuple[int, dict]:
        async with self.http.request(method, self.base + path, json=body) as r:
            return r.status, await r.json()

    async def subscribe(self, sub) -> str:
        status, body = await self.call("POST", "/api/push/subscriptions", {"endpoint": sub.endpoint, "keys": sub.keys})
        assert status == 200, body
        return body["id"]

    async def vapid(self) -> str:
        status, body = await self.call("GET", "/api/push/vapid")
        assert status == 200, body
        return body["publicKey"]

    async def conversation(self, name: str) -> str:
        status, body = await self.call("POST", "/api/conversations", {"name": name})
        assert status == 201, body
        return body["id"]

    async def prompt(self, cid: str, text: str) -> dict:
        status, body = await self.call("POST", f"/api/sessions/{cid}/prompt", {"message": text})
        assert status == 200, body
        return body

    async def close(self) -> None:
        await self.http.close()


async def decide(url: str) -> tuple[int, dict]:
    """What a notification action does: a POST to its url, with no credential but the url."""
    async with aiohttp.ClientSession() as http:
        async with http.post(url) as r:
            return r.status, await r.json()


@pytest.fixture
async def rest_factory():
    made = []

    def make(svc) -> Rest:
        r = Rest(svc)
        made.append(r)
        return r

    yield make
    for r in made:
        await r.close()
