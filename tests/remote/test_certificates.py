"""The served certificate: one-line errors for the pairs a user gets wrong (never a pass-phrase
prompt), a warning when it does not name the public host, and a reload when its files change or on
SIGHUP (new connections get the new certificate, the Loomi QR and the CLI's pin follow it)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys

import pytest

from tests.hardening.proc import ROOT, BridgeProcess
from tests.loomi.test_cli import cli
from tests.waiting import until, until_sync

from .certs import make_cert


def _serve(tmp_path, *args):
    e = {k: v for k, v in os.environ.items() if k not in ("AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG")}
    e["PYTHONPATH"] = ROOT
    # no controlling terminal and no stdin: a pass-phrase prompt would hang or fail, never be answered
    return subprocess.run([sys.executable, "-m", "cli", "serve", "--data-dir", str(tmp_path / "d"),
                           "--adapters", "loomi", "--loomi-port", "0", *args], capture_output=True, text=True,
                          timeout=60, env=e, cwd=ROOT, stdin=subprocess.DEVNULL, start_new_session=True)


def _one_line(proc) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("agent-bridge: "), proc.stderr
    return lines[0]


def test_swapped_cert_and_key(tmp_path):
    c = make_cert(str(tmp_path))
    line = _one_line(_serve(tmp_path, "--tls-cert", c.key, "--tls-key", c.cert))
    assert "holds no PEM certificate (are --tls-cert and --tls-key swapped?)" in line


def test_encrypted_key_is_refused_without_a_prompt(tmp_path):
    c = make_cert(str(tmp_path), password=b"pass phrase")
    line = _one_line(_serve(tmp_path, "--tls-cert", c.cert, "--tls-key", c.key))
    assert "is encrypted: give an unencrypted key" in line and "never prompts" in line


def test_key_of_another_certificate(tmp_path):
    a, b = make_cert(str(tmp_path), stem="a"), make_cert(str(tmp_path), stem="b")
    line = _one_line(_serve(tmp_path, "--tls-cert", a.cert, "--tls-key", b.key))
    assert f"TLS key {b.key} does not belong to the certificate {a.cert}" in line


def test_garbage_certificate(tmp_path):
    c = make_cert(str(tmp_path))
    with open(c.cert, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    assert "is not a valid PEM certificate" in _one_line(_serve(tmp_path, "--tls-cert", c.cert, "--tls-key", c.key))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stdout(bridge: BridgeProcess, marker: str) -> str:
    path = os.path.join(bridge.log_dir, f"stdout.{bridge.starts}.log")

    def printed():
        with open(path) as f:
            text = f.read()
        return text if marker in text else None

    return until_sync(printed, 20, marker)


def test_a_certificate_not_naming_the_public_host_is_a_warning(tmp_path):
    c = make_cert(str(tmp_path / "certs"), names=("other.example.com",))
    b = BridgeProcess(str(tmp_path / "b"), adapters="loomi", extra_args=[
        "--tls-cert", c.cert, "--tls-key", c.key, "--public-url", "loomi=wss://loomi.example.com/ws"])
    b.start()
    try:
        text = _stdout(b, "loomi ")
        assert ("warning: the served certificate does not name loomi.example.com (loomi's public URL; it names "
                "other.example.com)") not in text  # a proxy on another port (443) presents its own certificate
    finally:
        assert b.stop() == 0
    port = free_port()  # direct TLS on the public URL's port: the phone sees this certificate
    b = BridgeProcess(str(tmp_path / "b2"), adapters="loomi", extra_args=[
        "--tls-cert", c.cert, "--tls-key", c.key, "--loomi-port", str(port),
        "--public-url", f"loomi=wss://loomi.example.com:{port}/ws"])
    b.start()
    try:
        text = _stdout(b, "loomi ")
        assert ("warning: the served certificate does not name loomi.example.com (loomi's public URL; it names "
                "other.example.com)") in text
    finally:
        assert b.stop() == 0


async def served_fp(port: int) -> str:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return hashlib.sha256(der).hexdigest()


def _replace(src, dst) -> None:
    """Swap the files in as a renewal would: new files moved over the old ones."""
    for s, d in ((src.cert, dst.cert), (src.key, dst.key)):
        shutil.copyfile(s, d + ".new")
        os.replace(d + ".new", d)


def _log(bridge: BridgeProcess) -> str:
    with open(os.path.join(bridge.log_dir, f"stderr.{bridge.starts}.log")) as f:
        return f.read()


@pytest.mark.parametrize("how", ["files", "sighup"])
async def test_certificate_reload(tmp_path, how):
    live = make_cert(str(tmp_path / "live"))
    renewed = make_cert(str(tmp_path / "renewed"))
    b = BridgeProcess(str(tmp_path / "b"), adapters="pheby,loomi",
                      config={"tls": {"watch_interval": 0.2 if how == "files" else 0}},
                      extra_args=["--tls-cert", live.cert, "--tls-key", live.key])
    b.start()
    try:
        old_fp = live.fp
        assert await served_fp(b.ports["loomi"]) == old_fp == await served_fp(b.ports["pheby"])
        _replace(renewed, live)
        if how == "sighup":
            b.proc.send_signal(signal.SIGHUP)

        async def switched():
            return await served_fp(b.ports["loomi"]) == renewed.fp

        await until(switched, 15, "the renewed certificate")
        assert await served_fp(b.ports["pheby"]) == renewed.fp
        text = until_sync(lambda: (t := _log(b)) and f"new sha256 {renewed.fp}" in t and t, 10, "the log line")
        assert f"TLS certificate reloaded ({'files changed' if how == 'files' else 'SIGHUP'}): new sha256 {renewed.fp}" in text
        # new pairings carry the new fingerprint, and the CLI pins it on 127.0.0.1
        rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", b.data_dir)
        assert rc == 0, err
        assert json.loads(out)["fp"] == renewed.fp
        with open(os.path.join(b.data_dir, "run", "endpoints.json")) as f:
            assert json.load(f)["loomi_fp"] == renewed.fp  # what doctor compares the served certificate with
        # a broken renewal is refused with one log line and the old certificate stays
        with open(live.key, "w") as f:
            f.write("garbage\n")
        if how == "sighup":
            b.proc.send_signal(signal.SIGHUP)
        until_sync(lambda: "TLS reload" in _log(b) and "refused" in _log(b), 10, "the refusal")
        assert await served_fp(b.ports["loomi"]) == renewed.fp and b.alive
    finally:
        assert b.stop() == 0


def test_a_corrupt_key(tmp_path):
    c = make_cert(str(tmp_path))
    with open(c.key, "w") as f:
        f.write("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert f"TLS key {c.key} is not a usable private key" in _one_line(_serve(tmp_path, "--tls-cert", c.cert,
                                                                             "--tls-key", c.key))
