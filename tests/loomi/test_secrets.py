"""Tokens and credentials never reach a log (a short fingerprint at most)."""

from __future__ import annotations

import logging

import aiohttp

from bridge_core.model.redact import fingerprint

from .helpers import Client, admin, base, new_token, pair, resume


async def test_no_token_or_credential_in_logs(loomi, caplog):
    caplog.set_level(logging.DEBUG)
    qr = await new_token(loomi)
    c = await Client.connect(loomi)
    ok = await c.hello(token=qr["token"])
    creds = ok["payload"]
    bad = await Client.connect(loomi)
    await bad.hello(token=qr["token"])  # reuse: refused and logged
    await bad.close()
    await c.send("session.send", {"text": "/attach", "request_id": "r1"})
    att = await c.recv_type("attachment.added")
    await c.close()
    c2, _ = await resume(loomi, creds, last_seq=1)
    wrong, _ = await resume(loomi, {"device_id": creds["device_id"], "credential": creds["credential"] + "x"})
    await wrong.close()
    async with aiohttp.ClientSession() as http:
        for cred in (creds["credential"], "nope"):
            auth = {"Authorization": f"Bearer {creds['device_id']}:{cred}"}
            async with http.get(base(loomi) + att["payload"]["url"], headers=auth) as r:
                await r.read()
        async with http.post(base(loomi) + "/internal/devices/revoke", json={"device_id": creds["device_id"]},
                             headers=admin(loomi)):
            pass
    await c2.closed()
    await c2.close()
    other, other_creds = await pair(loomi)
    await other.close()

    text = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert fingerprint(qr["token"]) in text  # what was logged instead
    assert "refused hello" in text and "revoked" in text
    for secret in (qr["token"], creds["credential"], creds["credential"] + "x", other_creds["credential"]):
        assert secret not in text
