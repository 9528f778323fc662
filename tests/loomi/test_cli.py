"""``agent-bridge loomi ...`` and ``serve``'s bind check, as real processes."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time

import aiohttp

from .helpers import Client, admin, pair, resume, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECRETISH = re.compile(r"[A-Za-z0-9_-]{40,}")


def env(**extra: str) -> dict:
    e = {k: v for k, v in os.environ.items() if k not in ("LOOMI_ALLOW_INSECURE_BIND", "AGENT_BRIDGE_DATA",
                                                           "AGENT_BRIDGE_CONFIG")}
    e["PYTHONPATH"] = ROOT
    e.update(extra)
    return e


async def cli(*args: str, **extra_env: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", *args, cwd=ROOT, env=env(**extra_env),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


def data_dir(svc) -> str:
    return svc.cfg.data_dir


async def test_pair_json_prints_exactly_the_payload(loomi):
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", data_dir(loomi))
    assert rc == 0, err
    lines = out.splitlines()
    assert len(lines) == 1
    payload = json.loads(lines[0])
    assert list(payload) == ["v", "url", "token", "name", "fp"]
    assert payload["v"] == 1 and payload["url"] == f"ws://127.0.0.1:{loomi.ports['loomi']}/ws"
    c = await Client.connect(loomi)
    assert (await c.hello(token=payload["token"]))["type"] == "hello.ok"
    await c.close()


async def test_pair_renders_a_qr_code_and_honours_ttl(loomi):
    rc, out, err = await cli("loomi", "pair", "--ttl", "42", "--data-dir", data_dir(loomi))
    assert rc == 0, err
    assert "█" in out and "Scan this code" in out and "expires: in 42 s" in out
    assert not SECRETISH.search(out + err)  # the token is only inside the QR code
    (expires,) = loomi.frontends["loomi"].registry._tokens.values()
    assert 0 < expires - time.time() <= 42


async def test_pair_needs_a_running_server(tmp_path):
    rc, out, err = await cli("loomi", "pair", "--data-dir", str(tmp_path / "nothing"))
    assert rc == 1 and out == ""
    assert "not running" in err and len(err.strip().splitlines()) == 1


async def test_devices_and_revoke_reach_the_running_server(loomi):
    c, creds = await pair(loomi, "Pixel 9")
    did = creds["device_id"]
    rc, out, err = await cli("loomi", "devices", "--json", "--data-dir", data_dir(loomi))
    assert rc == 0, err
    (d,) = json.loads(out)
    assert d == {"device_id": did, "name": "Pixel 9", "model": "Pixel 9", "os": "Android 16", "app_version": "1.0",
                 "paired_at": d["paired_at"], "last_seen": d["last_seen"], "online": True}
    rc, table, err = await cli("loomi", "devices", "--data-dir", data_dir(loomi))
    assert rc == 0 and did in table and "yes" in table and "ONLINE" in table
    rc, out2, err2 = await cli("loomi", "revoke", did, "--data-dir", data_dir(loomi))
    assert rc == 0 and out2.strip() == f"revoked device {did}"
    frames, close = await c.closed()
    assert frames[-1]["type"] == "error" and frames[-1]["payload"]["code"] == "revoked"
    assert close == 4004
    await c.close()
    c2, refused = await resume(loomi, creds, last_seq=1)
    assert refused["payload"]["code"] == "unauthorized"
    await c2.close()
    rc, out3, err3 = await cli("loomi", "revoke", did, "--data-dir", data_dir(loomi))
    assert rc == 1 and "no paired device" in err3
    for text in (out, table, err, out2, err2, out3, err3):
        assert creds["credential"] not in text


async def test_revoke_over_http_closes_the_live_socket_at_once(loomi):
    c, creds = await pair(loomi)
    async with aiohttp.ClientSession() as http:
        url = f"http://127.0.0.1:{loomi.ports['loomi']}/internal/devices/revoke"
        async with http.post(url, json={"device_id": creds["device_id"]}, headers=admin(loomi)) as r:
            assert r.status == 200 and (await r.json()) == {"revoked": True, "device_id": creds["device_id"]}
        async with http.post(url, json={"device_id": creds["device_id"]}, headers=admin(loomi)) as r:
            assert r.status == 404
    frames, close = await c.closed()
    assert [f["payload"]["code"] for f in frames if f["type"] == "error"] == ["revoked"]
    await c.close()


async def test_devices_and_revoke_fall_back_to_the_database(service_factory):
    svc = await service_factory(adapters=("loomi",))
    c, creds = await pair(svc)
    await svc.stop()
    await c.close()
    rc, out, err = await cli("loomi", "devices", "--json", "--data-dir", data_dir(svc))
    assert rc == 0
    (d,) = json.loads(out)
    assert d["device_id"] == creds["device_id"] and d["online"] is False
    rc, out, err = await cli("loomi", "revoke", creds["device_id"], "--data-dir", data_dir(svc))
    assert rc == 0
    svc2 = await service_factory(adapters=("loomi",))
    c2, refused = await resume(svc2, creds, last_seq=1)
    assert refused["payload"]["code"] == "unauthorized"
    await c2.close()


async def test_serve_refuses_a_non_loopback_bind_without_tls(tmp_path):
    rc, out, err = await cli("serve", "--host", "0.0.0.0", "--adapters", "loomi", "--loomi-port", "0",
                             "--data-dir", str(tmp_path / "d"))
    assert rc != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "refusing to bind 0.0.0.0" in lines[0] and "LOOMI_ALLOW_INSECURE_BIND" in lines[0]
    assert not os.path.exists(tmp_path / "d" / "run" / "ports.json")


async def test_serve_binds_when_insecure_bind_is_allowed_and_logs_no_secrets(tmp_path):
    d = str(tmp_path / "d")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "cli", "serve", "--host", "0.0.0.0", "--adapters", "loomi", "--loomi-port", "0",
        "--data-dir", d, "--log-level", "DEBUG", cwd=ROOT, env=env(LOOMI_ALLOW_INSECURE_BIND="true"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        ports_file = os.path.join(d, "run", "ports.json")
        await wait_for(lambda: os.path.exists(ports_file) or proc.returncode is not None, timeout=30)
        with open(ports_file) as f:
            port = json.load(f)["loomi"]
        rc, line, err = await cli("loomi", "pair", "--json", "--data-dir", d)
        assert rc == 0, err
        payload = json.loads(line)
        assert payload["url"].endswith(f":{port}/ws") and "0.0.0.0" not in payload["url"]
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:
                await ws.send_json({"v": 1, "type": "hello", "payload": {"token": payload["token"]}})
                ok = await ws.receive_json(timeout=10)
                credential = ok["payload"]["credential"]
                await ws.send_json({"v": 1, "type": "hello", "payload": {"token": payload["token"]}})
                await ws.receive_json(timeout=10)
            async with http.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws:  # a refused reuse of the token
                await ws.send_json({"v": 1, "type": "hello", "payload": {"token": payload["token"]}})
                assert (await ws.receive_json(timeout=10))["payload"]["code"] == "unauthorized"
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0
    text = out.decode() + err.decode()
    assert "paired device" in text and "refused hello" in text  # it did log, at DEBUG even
    assert payload["token"] not in text and credential not in text


def self_signed(tmp_path) -> tuple[str, str, bytes]:
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=30)).sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path), cert.public_bytes(serialization.Encoding.DER)


async def test_tls_puts_the_certificate_fingerprint_into_the_qr_payload(service_factory, tmp_path):
    import hashlib

    cert, key, der = self_signed(tmp_path)
    svc = await service_factory(adapters=("loomi",), tls_cert=cert, tls_key=key)
    rc, line, err = await cli("loomi", "pair", "--json", "--data-dir", data_dir(svc))
    assert rc == 0, err
    payload = json.loads(line)
    assert payload["fp"] == hashlib.sha256(der).hexdigest()
    assert payload["url"] == f"wss://127.0.0.1:{svc.ports['loomi']}/ws"
    async with aiohttp.ClientSession() as http:
        async with http.ws_connect(payload["url"], ssl=False) as ws:
            await ws.send_json({"v": 1, "type": "hello", "payload": {"token": payload["token"]}})
            assert (await ws.receive_json(timeout=10))["type"] == "hello.ok"
    rc, out, err = await cli("loomi", "devices", "--json", "--data-dir", data_dir(svc))
    assert rc == 0 and json.loads(out)[0]["online"] is False
    # the CLI pins the certificate: another one on that port gets no token request
    run_file = os.path.join(data_dir(svc), "run", "loomi.json")
    with open(run_file) as f:
        info = json.load(f)
    with open(run_file, "w") as f:
        json.dump(dict(info, fp="0" * 64), f)
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", data_dir(svc))
    assert rc == 1 and out == "" and "does not present the configured certificate" in err
