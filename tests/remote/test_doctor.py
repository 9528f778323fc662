"""``agent-bridge doctor`` against a bridge serving TLS itself (the proxies are in test_proxies.py):
every check passes when all is well, and a failure names its fix and makes the exit status 1."""

from __future__ import annotations

import json

import pytest

from cli.doctor import upgrade_verdict
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess
from tests.loomi.test_cli import cli

from .certs import make_cert

CREDS = {"PHEBY_SECRET": PHEBY_SECRET, "LVMH_TOKEN": LVMH_TOKEN}


@pytest.fixture(scope="module")
def direct(tmp_path_factory):
    base = tmp_path_factory.mktemp("doctor")
    c = make_cert(str(base / "certs"))
    b = BridgeProcess(str(base / "b"), extra_args=["--tls-cert", c.cert, "--tls-key", c.key])
    b.start()
    yield b, c
    assert b.stop() == 0


async def doctor(data_dir: str, *extra: str) -> tuple[int, list, str]:
    rc, out, err = await cli("doctor", "--json", "--data-dir", data_dir, *extra, **CREDS)
    return rc, json.loads(out) if out.strip() else [], err


def by_name(checks: list) -> dict:
    return {(c["frontend"], c["name"]): c for c in checks}


async def test_direct_tls_with_its_ca_passes_every_check(direct):
    b, c = direct
    rc, checks, err = await doctor(b.data_dir, "--ca", c.cert)
    assert rc == 0, checks
    got = by_name(checks)
    assert set(got) >= {("pheby", "tls"), ("pheby", "upgrade"), ("pheby", "attachments"), ("loomi", "tls"),
                        ("loomi", "upgrade"), ("loomi", "internal"), ("lvmh", "tls"), ("lvmh", "upgrade"),
                        ("lvmh", "attachments"), ("lvmh", "web-ui")}
    assert all(ch["ok"] for ch in checks)
    assert f"sha256 {c.fp}" in got[("pheby", "tls")]["detail"] and "expires" in got[("pheby", "tls")]["detail"]
    assert "matches the QR's fp (pinned)" in got[("loomi", "tls")]["detail"]
    assert "the hello gets ready" in got[("pheby", "upgrade")]["detail"]


async def test_a_self_signed_certificate_fails_for_browsers_but_loomi_pins_it(direct):
    b, c = direct
    rc, out, err = await cli("doctor", "--data-dir", b.data_dir, **CREDS)
    assert rc == 1
    lines = out.splitlines()
    fail = next(i for i, ln in enumerate(lines) if ln.startswith("FAIL pheby  tls"))
    assert lines[fail + 1].startswith("     fix: phones and browsers will refuse it") and "public CA" in lines[fail + 1]
    assert any(ln.startswith("ok   loomi  tls") for ln in lines)  # pinned by the QR's fp
    assert out.rstrip().endswith("failed (see docs/remote-access.md)")


async def test_a_wrong_public_fp_is_named_with_the_right_one(tmp_path):
    c = make_cert(str(tmp_path / "certs"))
    b = BridgeProcess(str(tmp_path / "b"), adapters="loomi",
                      extra_args=["--tls-cert", c.cert, "--tls-key", c.key, "--public-fp", "loomi=" + "ab" * 32])
    b.start()
    try:
        rc, checks, err = await doctor(b.data_dir)
        tls = by_name(checks)[("loomi", "tls")]
        assert rc == 1 and not tls["ok"] and f"--public-fp loomi={c.fp}" in tls["fix"]
    finally:
        assert b.stop() == 0


async def test_no_server_running(tmp_path):
    rc, checks, err = await doctor(str(tmp_path / "nothing"))
    assert rc == 1 and checks[0]["name"] == "server" and "start `agent-bridge serve`" in checks[0]["fix"]
    assert all(not ch["ok"] for ch in checks if ch["name"] == "upgrade")  # nothing answers on the default ports


@pytest.mark.parametrize("status,error,fix", [
    (400, None, "proxy_set_header Upgrade $http_upgrade"),
    (200, None, "proxy_set_header Upgrade $http_upgrade"),
    (502, None, "cannot reach the bridge"),
    (404, None, "proxy the whole host"),
    (429, None, "--trusted-proxy"),
    (None, "Connection refused", "is the proxy (or the bridge) running"),
])
def test_upgrade_verdicts(status, error, fix):
    ok, detail, got = upgrade_verdict(status, error)
    assert not ok and fix in got
