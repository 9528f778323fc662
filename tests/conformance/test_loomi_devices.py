"""Loomi §3 from the phones' side: several devices, one of them misbehaving.

Behind a reverse proxy every phone has the proxy's address. One phone that keeps retrying with a
revoked or wrong credential must not lock out the others or block a new pairing (docs/loomi.md close
code 4029, docs/security.md: a limit never refuses a valid device credential or a valid pairing token).
"""

from __future__ import annotations

import pytest

from .loomi_client import HelloRefused, LoomiApp, close_all


@pytest.fixture(autouse=True)
async def _close_apps():
    yield
    await close_all()


def ws_url(server) -> str:
    return server.url("loomi", "/ws", scheme="ws")


async def paired(server, name: str) -> LoomiApp:
    app = LoomiApp(name)
    await app.pair(server.pair_payload())
    return app


async def test_many_devices_get_every_event_each_with_its_own_seqs(server):
    a = await paired(server, "Phone A")
    b = await paired(server, "Phone B")
    ack = await a.request("session.send", {"text": "to every phone"})
    run_id = ack["payload"]["result"]["run_id"]
    for app in (a, b):
        done = await app.wait_for("run.completed", run_id=run_id)
        assert app.run_text(run_id) == done["payload"]["text"] == "Echo: to every phone"
        assert app.dropped == [] and app.connections[-1] == sorted(set(app.connections[-1]))
    listed = server.cli("loomi", "devices", "--json")
    assert listed.returncode == 0
    await a.disconnect()
    await b.disconnect()


async def test_a_revoked_device_gets_refused_and_its_socket_closes(server):
    app = await paired(server, "Lost phone")
    res = server.cli("loomi", "revoke", app.device_id)
    assert res.returncode == 0, res.stderr
    await app.until(lambda: app.close_code is not None)
    assert [e["payload"]["code"] for e in app.find("error")] == ["revoked"]
    with pytest.raises(HelloRefused) as refused:
        await app.connect(ws_url(server))
    assert refused.value.frame["type"] == "error" and refused.value.frame["payload"]["fatal"] is True
    assert refused.value.frame["payload"]["code"] == "unauthorized"


async def test_one_misbehaving_phone_behind_one_address_locks_out_no_one(server):
    good = await paired(server, "Good phone")
    revoked = await paired(server, "Revoked phone")
    assert server.cli("loomi", "revoke", revoked.device_id).returncode == 0
    await revoked.until(lambda: revoked.close_code is not None)
    wrong = LoomiApp("Misconfigured phone")
    wrong.url, wrong.device_id, wrong.credential = ws_url(server), good.device_id, "not-the-credential"
    await good.disconnect()
    # both bad phones retry, again and again, from the same address as everyone else
    for _ in range(8):
        for bad in (revoked, wrong):
            with pytest.raises(HelloRefused) as refused:
                await bad.connect(ws_url(server))
            assert refused.value.frame["payload"]["fatal"] is True
    # the good phone reconnects, and a new phone pairs
    ok = await good.connect(ws_url(server))
    assert ok["type"] == "hello.ok" and ok["payload"]["device_id"] == good.device_id
    new = await paired(server, "New phone")
    assert new.device_id and new.device_id != good.device_id
    await good.disconnect()
    await new.disconnect()
