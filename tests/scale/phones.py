"""A Loomi phone's steps against a node of the cluster (the spec-built client of tests/conformance):
its socket URL, a pairing QR asked of the node, a run to its end."""

from __future__ import annotations

import aiohttp

from tests.conformance.loomi_client import LoomiApp
from tests.hardening.proc import BridgeProcess, admin_headers_for


def loomi_ws(proc: BridgeProcess) -> str:
    return f"ws://127.0.0.1:{proc.ports['loomi']}/ws"


async def pair_qr(proc: BridgeProcess) -> dict:
    port = proc.ports["loomi"]
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                             headers=admin_headers_for(port)) as r:
            assert r.status == 200, await r.text()
            return (await r.json())["payload"]


async def loomi_run(app: LoomiApp, text: str) -> str:
    ack = await app.request("session.send", {"text": text})
    assert ack["type"] == "ack" and ack["payload"]["ok"] is True, ack
    run_id = ack["payload"]["result"]["run_id"]
    await app.wait_for("run.completed", run_id=run_id)
    return run_id
