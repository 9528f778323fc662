"""`agent-bridge serve --log-format json` as an operator runs it: a real process driven through a run,
an approval, wrong credentials on every front end and the metrics endpoint, a Loomi pairing; every
line it writes on stderr is one JSON object, printable ASCII, holding no secret."""

from __future__ import annotations

import json
import signal
import subprocess

import aiohttp
import orjson

from bridge_core.kit.security import read_admin_key
from tests.cli.test_serve import EXE, _env, _wait_ports
from tests.conftest import ROOT
from tests.pheby.client import PhebyClient

SECRET = "json-logs-pheby-secret-4b9e2d7a1c"
TOKEN = "json-logs-lvmh-token-8f3c6a0e5d"
METRICS_TOKEN = "json-logs-metrics-token-2a7d9c4e1b"
WRONG = "json-logs-wrong-guess-6e1f0b3d8a"
HOSTILE_NAME = "Pixel\x1b[2K\r\x9b31m\u202eevil"  # a device name that would drive a terminal


def _start(data, conf, *args):
    return subprocess.Popen(
        EXE + ["serve", "--data-dir", str(data), "--config", str(conf), "--pheby-port", "0", "--loomi-port", "0",
               "--lvmh-port", "0", "--metrics-port", "0", "--log-format", "json", "--log-level", "DEBUG", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env=_env(PHEBY_SECRET=SECRET, LVMH_TOKEN=TOKEN),
    )


async def _pheby(port: int) -> None:
    bad = await PhebyClient.connect(port, hello=False)
    await bad.send({"type": "hello", "secret": WRONG, "protocol_version": 1})
    assert (await bad.recv())["error"]["code"] == "unauthorized"
    await bad.close()
    c = await PhebyClient.connect(port, secret=SECRET)
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/approve ls", "request_id": "r1"})
    req = await c.recv_type("approval.request")
    await c.send({"type": "approval.respond", "approval_id": req["approval_id"], "choice": "once", "request_id": "r2"})
    assert (await c.recv_type("run.finished"))["status"] == "completed"
    await c.close()


async def _loomi(http: aiohttp.ClientSession, port: int, admin: str) -> list[str]:
    """A pairing (its token, the device's credential) and a wrong credential; the secrets it saw."""
    async with http.post(f"http://127.0.0.1:{port}/internal/pair/new", json={},
                         headers={"Authorization": f"Bearer {admin}"}) as r:  # fmt: skip
        assert r.status == 200
        pairing = (await r.json())["payload"]["token"]
    info = {"model": HOSTILE_NAME, "os": "Android 16", "app_version": "1.0"}
    async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
        await ws.send_str(orjson.dumps({"v": 1, "type": "hello", "payload": {
            "protocol_version": 1, "token": pairing, "device_info": info}}).decode())  # fmt: skip
        ok = orjson.loads((await ws.receive(timeout=10)).data)
        assert ok["type"] == "hello.ok", ok
    device, credential = ok["payload"]["device_id"], ok["payload"]["credential"]
    async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
        await ws.send_str(orjson.dumps({"v": 1, "type": "hello", "payload": {
            "protocol_version": 1, "device_id": device, "credential": WRONG, "device_info": info}}).decode())  # fmt: skip
        assert orjson.loads((await ws.receive(timeout=10)).data)["type"] == "error"
    return [pairing, credential]


async def test_every_stderr_line_is_a_json_object_without_a_secret(tmp_path):
    data = tmp_path / "data"
    conf = tmp_path / "c.toml"
    conf.write_text(f'[metrics]\ntoken = "{METRICS_TOKEN}"\n')
    proc = _start(data, conf)
    seen: list[str] = [SECRET, TOKEN, METRICS_TOKEN, WRONG]
    try:
        ports = _wait_ports(data, proc)
        seen.append(read_admin_key(str(data)))
        await _pheby(ports["pheby"])
        async with aiohttp.ClientSession() as http:
            seen += await _loomi(http, ports["loomi"], seen[-1])
            async with http.get(f"http://127.0.0.1:{ports['lvmh']}/api/sessions",
                                headers={"Authorization": f"Bearer {WRONG}"}) as r:  # fmt: skip
                assert r.status == 401
            url = f"http://127.0.0.1:{ports['metrics']}/metrics"
            async with http.get(url, headers={"Authorization": f"Bearer {WRONG}"}) as r:
                assert r.status == 401
            async with http.get(url, headers={"Authorization": f"Bearer {METRICS_TOKEN}"}) as r:
                assert r.status == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    lines = err.splitlines()
    assert lines, "the run logged nothing"
    records = []
    for line in lines:
        assert line.isascii() and line.isprintable(), line  # nothing a terminal would obey
        record = json.loads(line)
        assert isinstance(record, dict) and {"time", "level", "logger", "message"} <= set(record), line
        records.append(record)
    messages = " | ".join(r["message"] for r in records)
    for expected in ("pheby: failed hello", "paired device", "refused an unauthenticated request",
                     "metrics: refused a scrape", "shutting down"):  # fmt: skip
        assert expected in messages, expected
    for secret in seen:
        assert secret and secret not in err and secret not in out
    assert "\x1b" not in err and "\x9b" not in err


def test_a_refusal_is_a_json_object_too(tmp_path):
    conf = tmp_path / "c.toml"
    conf.write_text("")
    proc = subprocess.run(
        EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--config", str(conf), "--adapters", "pheby",
               "--pheby-port", "0", "--metrics-host", "0.0.0.0", "--metrics-port", "0", "--log-format", "json"],
        capture_output=True, text=True, timeout=30, cwd=ROOT, env=_env())  # fmt: skip
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR" and "[metrics] token" in record["message"]
