"""``agent-bridge pheby connect``: the Pheby URL and secret for the app, and a QR code of
``{"v":1,"url":...,"secret":...}``, on the user's terminal only, never into a log."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import subprocess
import sys

import aiohttp

from tests.hardening.proc import PHEBY_SECRET, ROOT, BridgeProcess
from tests.loomi.test_cli import cli, env


async def test_connect_json_is_the_payload_and_the_app_connects_with_it(tmp_path):
    b = BridgeProcess(str(tmp_path / "b"), adapters="pheby")
    b.start()
    try:
        rc, out, err = await cli("pheby", "connect", "--json", "--data-dir", b.data_dir, PHEBY_SECRET=PHEBY_SECRET)
        assert rc == 0, err
        lines = out.splitlines()
        assert len(lines) == 1
        payload = json.loads(lines[0])
        assert list(payload) == ["v", "url", "secret"] and payload["v"] == 1
        assert payload["url"] == f"ws://127.0.0.1:{b.ports['pheby']}/ws" and payload["secret"] == PHEBY_SECRET
        assert "cannot dial" in err  # loopback: a phone elsewhere cannot use it, and it says so
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(payload["url"]) as ws:
                await ws.send_str(json.dumps({"type": "hello", "secret": payload["secret"], "protocol_version": 1}))
                assert (await ws.receive_json(timeout=10))["type"] == "ready"
        assert b.stop() == 0
        for name in os.listdir(b.log_dir):  # the server printed and logged no secret
            with open(os.path.join(b.log_dir, name), errors="replace") as f:
                assert PHEBY_SECRET not in f.read()
    finally:
        if b.alive:
            b.stop()


async def test_connect_uses_the_public_url(service_factory):
    svc = await service_factory(adapters=("pheby",), public_url="pheby=wss://pheby.example.com/ws")
    rc, out, err = await cli("pheby", "connect", "--json", "--data-dir", svc.cfg.data_dir,
                             PHEBY_SECRET=svc.cfg.secret("pheby"))
    assert rc == 0, err
    assert json.loads(out) == {"v": 1, "url": "wss://pheby.example.com/ws", "secret": svc.cfg.secret("pheby")}
    assert "warning" not in err


async def test_connect_refuses_to_print_the_secret_into_a_file(service_factory):
    svc = await service_factory(adapters=("pheby",))
    rc, out, err = await cli("pheby", "connect", "--data-dir", svc.cfg.data_dir, PHEBY_SECRET=svc.cfg.secret("pheby"))
    assert rc == 1 and out == "" and svc.cfg.secret("pheby") not in err
    assert "the output is not a terminal" in err


async def test_connect_on_a_terminal_shows_a_qr_code(service_factory):
    svc = await service_factory(adapters=("pheby",), public_url="pheby=wss://pheby.example.com/ws")
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "cli", "pheby", "connect", "--data-dir", svc.cfg.data_dir],
                            cwd=ROOT, env=env(PHEBY_SECRET=svc.cfg.secret("pheby"), PYTHONIOENCODING="utf-8"),
                            stdout=slave, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    loop = asyncio.get_running_loop()

    def read_all() -> bytes:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)

    text = (await loop.run_in_executor(None, read_all)).decode("utf-8", "replace")
    assert await loop.run_in_executor(None, proc.wait) == 0
    os.close(master)
    assert "█" in text and "Scan this code with the Pheby app" in text
    assert "url:     wss://pheby.example.com/ws" in text and f"secret:  {svc.cfg.secret('pheby')}" in text
