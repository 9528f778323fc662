"""The LVMH token never appears in a log line or in any response."""

from __future__ import annotations

import logging

import aiohttp
import pytest

from tests.conftest import LVMH_TOKEN
from tests.lvmh.helpers import AUTH, FakePlugin


async def test_token_is_never_logged_or_returned(lvmh, caplog):
    caplog.set_level(logging.DEBUG)
    port = lvmh.ports["lvmh"]
    base = f"http://127.0.0.1:{port}"
    bodies: list[str] = []
    near_misses = [LVMH_TOKEN + "x", LVMH_TOKEN[:-1], "Bearer " + LVMH_TOKEN]
    async with aiohttp.ClientSession() as http:
        for wrong in near_misses:
            async with http.get(f"{base}/api/sessions", headers={"Authorization": f"Bearer {wrong}"}) as resp:
                assert resp.status == 401
                bodies.append(await resp.text())
                bodies.append(str(resp.headers))
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await http.ws_connect(f"{base}/ws?token={wrong}")
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await http.ws_connect(f"{base}/agent/ws", headers={"Authorization": f"Bearer {wrong}"})
        ws = await http.ws_connect(f"{base}/ws?token={LVMH_TOKEN}")
        bodies.append((await ws.receive(timeout=5)).data)
        await ws.close()
        for path in ("/api/sessions", "/api/sessions/none/events", "/api/gitlab/status", "/api/spawn/status", "/"):
            async with http.get(base + path, headers=AUTH) as resp:
                bodies.append(await resp.text())
                bodies.append(str(resp.headers))
        async with http.post(f"{base}/api/sessions/none/prompt", headers=AUTH, data=b"{bad") as resp:
            bodies.append(await resp.text())
    p = FakePlugin(port, "secret-test-session")
    try:
        bodies.append(str(await p.connect()))
        await p.event("agent_start")
        await p.send_raw("garbage")
        bodies.append(str(await p.recv_type("error")))
    finally:
        await p.close()

    for body in bodies:
        assert LVMH_TOKEN not in body
    logged = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert LVMH_TOKEN not in logged
    assert LVMH_TOKEN[:12] not in logged
    assert any("refused an unauthenticated request" in r.getMessage() for r in caplog.records)
