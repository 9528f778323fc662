"""Secrets never leak: a full session across every front end, then grep everything the processes wrote.

The server runs at DEBUG. Secrets in play: the Pheby secret, the lvmh token, Loomi
pairing tokens (used, unused, guessed) and device credentials, and a GitLab
personal access token connected through lvmh against the fake GitLab. Searched:
every line the server printed (stdout, stderr), every file in the data
directory except ``secrets/`` (the database and its WAL included: tokens and
credentials are stored as SHA-256, the PAT is the one secret the database keeps
by design and is excluded there), and what the CLI commands printed (except
``loomi pair --json``, whose whole point is to print the pairing payload).
"""

from __future__ import annotations

import asyncio
import os
import sys

import aiohttp
import orjson
import pytest

from tests.fakes.fake_gitlab import FakeGitLab, project
from tests.forged import forged

from .clients import LoomiClient, PhebyClient, lvmh_api, lvmh_browser, lvmh_plugin
from .proc import LVMH_TOKEN, PHEBY_SECRET, ROOT
from .summary import SUMMARY
from .wsraw import HandshakeRefused, RawWS

pytestmark = pytest.mark.hardening

PAT = "glpat-HARDENINGsecretPAT0123456789"


async def cli(srv, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", *args, "--data-dir", srv.data_dir, cwd=ROOT, env=srv.env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    return proc.returncode, out.decode(), err.decode()


async def test_no_secret_in_any_log_or_output(bridge_factory):
    gitlab = await FakeGitLab().start()
    gitlab.add_user(PAT, "hardening")
    gitlab.projects = [project("group/app", "2026-11-01T00:00:00Z")]
    try:
        await _session(bridge_factory, gitlab)
    finally:
        await gitlab.stop()


async def _session(bridge_factory, gitlab) -> None:
    srv = bridge_factory("secrets", log_level="DEBUG", env={"LVMH_GITLAB_URL": gitlab.url})
    ports = srv.ports
    printed: list[str] = []  # everything the CLI printed that must be clean

    # Pheby: right and wrong secrets, a run with a tool, an approval, an attachment download
    pheby = await PhebyClient.connect(ports["pheby"])
    bad = await RawWS.connect(ports["pheby"])
    bad.send_text(orjson.dumps({"type": "hello", "secret": PHEBY_SECRET[:-1] + "X", "protocol_version": 1}))
    await bad.recv_text()
    bad.abort()
    cid = await pheby.create("secrets")
    await pheby.run(cid, "/tool secret_tool")
    frames = await pheby.run(cid, "/attach")
    att = next(f for f in frames if f["type"] == "attachment.added")["attachment"]
    async with aiohttp.ClientSession() as http:
        for auth in (f"Bearer {PHEBY_SECRET}", f"ApiKey {PHEBY_SECRET}", "Bearer wrong-secret-guess"):
            async with http.get(f"http://127.0.0.1:{ports['pheby']}{att['download_path']}",
                                headers={"Authorization": auth}) as r:
                await r.read()

    # Loomi: pairing through the CLI (QR and JSON), a used token, an unused one, a guessed one, credentials
    rc, out, err = await cli(srv, "loomi", "pair")
    assert rc == 0, err
    printed += [out, err]
    rc, out, err = await cli(srv, "loomi", "pair", "--json")
    assert rc == 0, err
    payload = orjson.loads(out)
    used_token = payload["token"]
    printed.append(err)  # stdout is the pairing payload the user asked for
    rc, out, err = await cli(srv, "loomi", "pair", "--json")
    unused_token = orjson.loads(out)["token"]
    printed.append(err)
    ws = await RawWS.connect(ports["loomi"])
    ws.send_text(orjson.dumps({"v": 1, "type": "hello", "payload": {"protocol_version": 1, "token": used_token,
                                                                    "device_info": {"model": "secret-phone"}}}))
    ok = orjson.loads(await ws.recv_text())
    assert ok["type"] == "hello.ok"
    device = (ok["payload"]["device_id"], ok["payload"]["credential"])
    ws.abort()
    for hello in ({"token": used_token}, {"token": "guessed-token-0123456789abcdef"},
                  {"device_id": device[0], "credential": forged(device[1])}):
        ws = await RawWS.connect(ports["loomi"], local_addr="127.0.0.90")
        ws.send_text(orjson.dumps({"v": 1, "type": "hello", "payload": {"protocol_version": 1, **hello}}))
        await ws.recv_text()
        ws.abort()
    loomi = await LoomiClient.connect(ports["loomi"], device)
    ack = await loomi.request("session.send", {"task_id": cid, "text": "/approve cat ~/.ssh/id_rsa"})
    req = (await loomi.until(lambda f: f["type"] == "approval.required"))[-1]["payload"]
    await loomi.request("approval.resolve", {"approval_id": req["approval_id"], "choice": "deny"})
    await loomi.until(lambda f: f["type"] == "run.completed")
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{ports['loomi']}/attachments/{att['attachment_id']}",
                            headers={"Authorization": f"Bearer {device[0]}:{device[1]}"}) as r:
            assert r.status == 200
    await loomi.close()
    assert ack["type"] == "ack"
    for args in (("loomi", "devices"), ("loomi", "devices", "--json"), ("loomi", "revoke", device[0])):
        rc, out, err = await cli(srv, *args)
        assert rc == 0, err
        printed += [out, err]

    # lvmh: REST with the token, a wrong token, the browser socket (?token=), a plugin, GitLab with a PAT
    api = lvmh_api(ports["lvmh"])
    try:
        assert (await api.get("/api/sessions"))[0] == 200
        assert (await api.get("/api/sessions", headers={"Authorization": "Bearer not-the-token"}))[0] == 401
        status, body = await api.post("/api/gitlab/connect", {"token": PAT})
        assert status == 200 and body["username"] == "hardening", (status, body)
        status, body = await api.get("/api/gitlab/status")
        assert status == 200 and PAT not in orjson.dumps(body).decode()
        status, repos = await api.get("/api/gitlab/repos")
        assert status == 200, repos
        status, body = await api.post("/api/gitlab/connect", {"token": PAT[:-3] + "bad"})
        assert status in (400, 401, 403), (status, body)
        status, _ = await api.get(f"/api/attachments/{att['attachment_id']}")
        assert status == 200
        browser = lvmh_browser(ports["lvmh"])
        await browser.open()
        await browser.send({"type": "subscribe", "sessionId": cid})
        plugin = lvmh_plugin(ports["lvmh"], "secret-session")
        await plugin.connect()
        await plugin.run("use the token", "ok")
        await plugin.close()
        await browser.close()
        with pytest.raises(HandshakeRefused):
            await RawWS.connect(ports["lvmh"], "/agent/ws", {"Authorization": "Bearer wrong-plugin-token"})
        with pytest.raises(HandshakeRefused):
            await RawWS.connect(ports["lvmh"], "/ws?token=wrong-browser-token")
    finally:
        await api.close()
    await pheby.close()
    admin_key = srv.admin_key()
    assert admin_key
    assert srv.stop() == 0  # a clean shutdown removes run/admin.key, so the walk below would find it nowhere

    secrets = {"Pheby secret": PHEBY_SECRET, "lvmh token": LVMH_TOKEN, "admin key": admin_key,
               "pairing token (used)": used_token,
               "pairing token (unused)": unused_token, "device credential": device[1], "GitLab PAT": PAT}
    hits = []
    sources = {"server output": srv.all_output(), "CLI output": "\n".join(printed)}
    for root, _, files in os.walk(srv.data_dir):
        if os.path.basename(root) == "secrets":
            continue
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                sources[os.path.relpath(path, srv.data_dir)] = f.read().decode("latin-1")
    for label, text in sources.items():
        for what, value in secrets.items():
            if what == "GitLab PAT" and label.startswith("bridge.db"):
                continue  # stored by design (spec: "PAT stored daemon-side"), never returned or logged
            if value in text:
                hits.append(f"{what} in {label}")
    SUMMARY.note(f"secrets: {len(secrets)} secrets grepped in {len(sources)} outputs/files at DEBUG: {len(hits)} hits")
    assert not hits, hits
    # the log did say what happened, with fingerprints at most
    out = srv.all_output()
    assert "failed hello" in out and "paired device" in out
