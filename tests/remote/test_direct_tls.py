"""The page's direct-TLS set-up (docs/remote-access.md, block ``remote-access:direct``), run as
written with its address, ports and paths filled in: openssl makes the certificate, ``serve`` takes
the flags, the Loomi QR pins the certificate, a phone pairs with that pin, and doctor passes."""

from __future__ import annotations

import hashlib
import json
import shlex
import ssl
import subprocess

import aiohttp
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from tests.loomi.test_cli import cli

from .proxies import PROXY_HOST, doc_block, free_port


async def test_direct_tls_as_documented(tmp_path):
    ports = {"8620": free_port(PROXY_HOST), "8621": free_port(PROXY_HOST), "8686": free_port(PROXY_HOST)}
    text = doc_block("direct").replace("~/.agent-bridge", str(tmp_path)).replace("192.168.1.20", PROXY_HOST)
    text = text.replace("--host 0.0.0.0", f"--host {PROXY_HOST}")
    for doc_port, port in ports.items():
        text = text.replace(f":{doc_port}/", f":{port}/").replace(f":{doc_port},", f":{port},")
        text = text if not text.endswith(f":{doc_port}\n") else text[: -len(doc_port) - 1] + f"{port}\n"
    commands = text.replace("\\\n", " ").strip().splitlines()
    assert commands[0].startswith("openssl req") and commands[1].startswith("agent-bridge serve")
    made = subprocess.run(["bash", "-c", commands[0]], capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    argv = shlex.split(commands[1])[2:]
    argv += ["--pheby-port", ports["8620"], "--loomi-port", ports["8621"], "--lvmh-port", ports["8686"]]
    argv = [str(a) for a in argv]
    bridge = BridgeProcess(str(tmp_path / "bridge"), extra_args=argv)
    bridge.start()
    try:
        with open(tmp_path / "cert.pem", "rb") as f:
            fp = hashlib.sha256(x509.load_pem_x509_certificate(f.read()).public_bytes(serialization.Encoding.DER)).hexdigest()
        rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", bridge.data_dir)
        assert rc == 0, err
        qr = json.loads(out)
        assert qr["url"] == f"wss://{PROXY_HOST}:{ports['8621']}/ws" and qr["fp"] == fp
        pin = ssl.create_default_context()
        pin.check_hostname, pin.verify_mode = False, ssl.CERT_NONE  # the app checks the QR's fp instead
        async with aiohttp.ClientSession() as http:
            async with http.ws_connect(qr["url"], ssl=pin) as ws:
                der = ws.get_extra_info("ssl_object").getpeercert(binary_form=True)
                assert hashlib.sha256(der).hexdigest() == qr["fp"]
                await ws.send_str(json.dumps({"v": 1, "type": "hello", "payload": {"token": qr["token"]}}))
                assert (await ws.receive_json(timeout=15))["type"] == "hello.ok"
        rc, out, err = await cli("doctor", "--json", "--ca", str(tmp_path / "cert.pem"), "--data-dir", bridge.data_dir,
                                 PHEBY_SECRET=PHEBY_SECRET, LVMH_TOKEN=LVMH_TOKEN)
        assert rc == 0, [c for c in json.loads(out) if not c["ok"]]
    finally:
        assert bridge.stop() == 0
