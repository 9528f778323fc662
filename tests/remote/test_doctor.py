"""``agent-bridge doctor`` against a bridge serving TLS itself (the proxies are in test_proxies.py):
every check passes when all is well, and a failure names its fix and makes the exit status 1. And what
it sends where (docs/remote-access.md, "What doctor sends where"): an impostor on a public URL gets no
credential, the admin key stays on loopback, and a data directory with no server is not probed."""

from __future__ import annotations

import asyncio
import json
import os
import socket

import pytest

from bridge_core.kit.remote import dialable_host
from cli.doctor import upgrade_verdict
from cli.doctor_trust import Seen, channel_for, loopback_host
from tests.hardening.proc import LVMH_TOKEN, PHEBY_SECRET, BridgeProcess, write_toml
from tests.loomi.test_cli import cli
from tests.waiting import until

from .certs import make_cert
from .impostor import Impostor
from .proxies import PROXY_HOST

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


class Listener:
    """A TCP listener that counts the connections it is offered (and answers nothing)."""

    def __init__(self) -> None:
        self.count, self.server = 0, None

    def _accepted(self, reader, writer) -> None:
        self.count += 1
        writer.close()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._accepted, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def offered_after(self, port: int) -> int:
        """The connections offered before this one of ours (the kernel queues them in order)."""
        before = self.count
        _, w = await asyncio.open_connection("127.0.0.1", port)
        await until(lambda: self.count > before, what="the listener to accept our own connection")
        w.close()
        return self.count - 1


async def test_no_server_running_probes_nothing(tmp_path):
    listener = Listener()
    port = await listener.start()
    config = str(tmp_path / "config.toml")  # a bridge of this configuration would listen where the listener is
    write_toml(config, {"pheby": {"port": port}, "loomi": {"port": port}, "lvmh": {"port": port}})
    try:
        data = str(tmp_path / "nothing")
        rc, checks, err = await doctor(data, "--config", config)
        rc2, out, err = await cli("doctor", "--data-dir", data, "--config", config, **CREDS)
        assert await listener.offered_after(port) == 0  # not one connection: no Pheby lockout slot burnt
        assert rc == 1 and [c["name"] for c in checks] == ["server"], checks
        assert f"no server is running on {data}" in checks[0]["detail"] and "nothing was probed" in checks[0]["detail"]
        assert "start `agent-bridge serve`" in checks[0]["fix"]
        assert rc2 == 1 and f"FAIL -      server      no server is running on {data}" in out

        b = BridgeProcess(str(tmp_path / "killed"), adapters="pheby")  # a killed server leaves run/ behind
        b.start()
        b.kill9()
        assert os.path.exists(b.portfile)
        rc, checks, err = await doctor(b.data_dir)
        assert rc == 1 and [c["name"] for c in checks] == ["server"], checks
        assert "no longer listens on its ports" in checks[0]["detail"]
    finally:
        listener.server.close()


async def test_without_proc_a_listening_port_is_told_by_a_bare_connection(tmp_path, monkeypatch):
    """Where there is no /proc, whether the server still listens is a TCP connection that sends nothing."""
    from cli.config import build_config
    from cli import doctor as doctor_module

    listener = Listener()
    port = await listener.start()
    cfg = build_config({"data_dir": str(tmp_path / "d")}, {}, with_secrets=False)
    os.makedirs(cfg.run_dir)
    with open(os.path.join(cfg.run_dir, "ports.json"), "w") as f:
        json.dump({"pheby": port}, f)
    with open(os.path.join(cfg.run_dir, "endpoints.json"), "w") as f:
        json.dump({"urls": {"pheby": f"ws://127.0.0.1:{port}/ws"}, "public": []}, f)
    monkeypatch.setattr(doctor_module, "listening_ports", lambda: None)
    assert await asyncio.to_thread(doctor_module.server_absent, cfg) is None
    assert await listener.offered_after(port) == 1
    listener.server.close()
    await listener.server.wait_closed()
    assert "no longer listens" in await asyncio.to_thread(doctor_module.server_absent, cfg)


def secrets_of(b: BridgeProcess) -> dict:
    with open(os.path.join(b.data_dir, "run", "admin.key")) as f:
        return {"the Pheby secret": PHEBY_SECRET, "LVMH_TOKEN": LVMH_TOKEN, "the admin key": f.read().strip()}


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    b = BridgeProcess(str(tmp_path_factory.mktemp("plain")))
    b.start()
    yield b
    assert b.stop() == 0


async def test_an_impostor_on_the_public_urls_gets_no_credential(tmp_path, direct, plain):
    cert = make_cert(str(tmp_path / "impostor"), names=(PROXY_HOST,))  # self-signed: nobody's CA
    impostor = Impostor()
    await impostor.start()
    try:
        ports = {n: await impostor.listen(PROXY_HOST, cert.cert, cert.key) for n in ("pheby", "loomi", "lvmh")}
        b = BridgeProcess(str(tmp_path / "b"), extra_args=["--public-url", (
            f"pheby=wss://{PROXY_HOST}:{ports['pheby']}/ws,loomi=wss://{PROXY_HOST}:{ports['loomi']}/ws,"
            f"lvmh=https://{PROXY_HOST}:{ports['lvmh']}")])
        b.start()
        try:
            rc, checks, err = await doctor(b.data_dir)
            held = secrets_of(b)
        finally:
            assert b.stop() == 0
        got = by_name(checks)
        assert impostor.saw("GET /ws ") and impostor.saw("GET / ")  # doctor did talk to it, without credentials:
        assert [name for name, value in held.items() if impostor.saw(value)] == []
        assert rc == 1
        for fe in ("pheby", "lvmh"):
            cred = got[(fe, "credential")]
            assert not cred["ok"] and "not sent" in cred["detail"] and f"sha256 {cert.fp}" in cred["detail"]
            assert "--ca" in cred["fix"] and "something else answers at this URL" in cred["fix"]
            assert (fe, "upgrade") not in got and (fe, "attachments") not in got
        assert "the admin key not sent" in got[("loomi", "internal")]["detail"]
    finally:
        await impostor.stop()

    # the legitimate paths: TLS verified against --ca, pinned to the QR's fp, plain loopback: the full check
    rc, checks, err = await doctor(direct[0].data_dir, "--ca", direct[1].cert)
    got = by_name(checks)
    assert rc == 0 and all(c["ok"] for c in checks), checks
    assert f"sent over TLS verified against --ca {direct[1].cert}" in got[("pheby", "credential")]["detail"]
    assert "the hello gets ready" in got[("pheby", "upgrade")]["detail"] and got[("lvmh", "attachments")]["ok"]
    rc, checks, err = await doctor(direct[0].data_dir)
    got = by_name(checks)
    assert "sent over TLS pinned to the Loomi QR's fp" in got[("pheby", "credential")]["detail"]
    assert got[("pheby", "upgrade")]["ok"] and got[("lvmh", "upgrade")]["ok"] and got[("lvmh", "attachments")]["ok"]
    rc, checks, err = await doctor(plain.data_dir)
    got = by_name(checks)
    assert rc == 0 and all(c["ok"] for c in checks), checks
    assert "plain ws:// to the loopback address 127.0.0.1" in got[("pheby", "credential")]["detail"]
    assert {("pheby", "upgrade"), ("pheby", "attachments"), ("lvmh", "upgrade"), ("lvmh", "attachments")} <= set(got)


async def test_the_ca_given_is_what_counts_and_the_admin_key_stays_on_loopback(tmp_path):
    lan = dialable_host("0.0.0.0")
    if loopback_host(lan) or ":" in lan:
        pytest.skip("this machine has no non-loopback IPv4 address")
    cert = make_cert(str(tmp_path / "lan"), names=(lan,))
    impostor = Impostor()
    await impostor.start()
    try:
        try:
            plain_port = await impostor.listen(lan)
        except OSError as exc:
            pytest.skip(f"cannot listen on {lan}: {exc}")
        tls_ports = {n: await impostor.listen(lan, cert.cert, cert.key) for n in ("loomi", "lvmh")}
        b = BridgeProcess(str(tmp_path / "b"), extra_args=["--public-url", (
            f"pheby=ws://{lan}:{plain_port}/ws,loomi=wss://{lan}:{tls_ports['loomi']}/ws,"
            f"lvmh=https://{lan}:{tls_ports['lvmh']}")])
        b.start()
        try:
            rc, checks, err = await doctor(b.data_dir, "--ca", cert.cert)  # the user trusts this CA
            held = secrets_of(b)
        finally:
            assert b.stop() == 0
        got = by_name(checks)
        # plain ws:// to a LAN address gets no secret; the admin key never leaves loopback, even over
        # verified TLS (/internal/* is still probed, without it)
        assert not impostor.saw(PHEBY_SECRET) and not impostor.saw(held["the admin key"])
        assert impostor.saw("GET /internal/devices")
        # the LAN host is verified by the CA the user gave: it gets the lvmh token, and the full check
        assert impostor.saw(LVMH_TOKEN) and got[("lvmh", "credential")]["ok"] and got[("lvmh", "upgrade")]["ok"]
        assert not got[("pheby", "credential")]["ok"] and f"plain ws:// to {lan}" in got[("pheby", "credential")]["detail"]
        assert "over TLS" in got[("pheby", "credential")]["fix"]
        internal = got[("loomi", "internal")]
        assert internal["ok"] and "the admin key not sent: it goes to loopback addresses only" in internal["detail"]
        assert rc == 1
    finally:
        await impostor.stop()


async def test_a_redirect_is_not_followed_with_a_credential(tmp_path):
    """A verified URL (plain loopback) that redirects the Pheby upgrade and download elsewhere: doctor
    follows no redirect, so the place redirected to (plain, on a LAN address) never sees the secret."""
    lan = dialable_host("0.0.0.0")
    if loopback_host(lan) or ":" in lan:
        pytest.skip("this machine has no non-loopback IPv4 address")
    impostor, redirector = Impostor(), Impostor()
    await impostor.start()
    try:
        try:
            target = f"{lan}:{await impostor.listen(lan)}"
        except OSError as exc:
            pytest.skip(f"cannot listen on {lan}: {exc}")
        redirector.redirect = f"http://{target}"
        await redirector.start()
        port = await redirector.listen("127.0.0.1")
        b = BridgeProcess(str(tmp_path / "b"), adapters="pheby", extra_args=["--public-url", f"pheby=ws://127.0.0.1:{port}/ws"])
        b.start()
        try:
            rc, checks, err = await doctor(b.data_dir)
        finally:
            assert b.stop() == 0
        got = by_name(checks)
        assert redirector.saw("GET /ws ") and not impostor.saw(PHEBY_SECRET) and not impostor.saw("GET /ws ")
        assert got[("pheby", "credential")]["ok"]  # loopback: the secret may go there, but not on to a redirect
        up = got[("pheby", "upgrade")]
        assert not up["ok"] and f"HTTP 302, a redirect to http://{target}/ws" in up["detail"]
        assert "give the final URL as --public-url" in up["fix"]
        assert not got[("pheby", "attachments")]["ok"] and rc == 1
    finally:
        await redirector.stop()
        await impostor.stop()


@pytest.mark.parametrize("host,loopback", [
    ("127.0.0.1", True), ("127.9.9.9", True), ("::1", True), ("[::1]", True), ("::ffff:127.0.0.1", True),
    ("localhost", True), ("LOCALHOST", True),
    ("127.0.0.1.evil.example", False), ("127.evil", False), ("localhost.evil.example", False),
    ("127.1", False), ("0x7f000001", False), ("ip6-localhost", False), ("192.0.2.2", False), ("", False),
])
def test_loopback_is_judged_by_parsing_the_address(host, loopback):
    assert loopback_host(host) is loopback


@pytest.mark.parametrize("url,seen,qr_fp,via,admin", [
    ("ws://127.0.0.1:1/ws", None, "", "loopback", True),
    ("http://localhost:1", None, "", "loopback", True),
    ("ws://192.0.2.2:1/ws", None, "", "", False),
    ("ws://127.0.0.1.evil.example:1/ws", None, "", "", False),
    ("wss://127.0.0.2:1/ws", None, "", "", False),  # no TLS handshake
    ("wss://127.0.0.2:1/ws", Seen("ab" * 32, "self-signed certificate"), "", "", False),
    ("wss://127.0.0.2:1/ws", Seen("ab" * 32, "self-signed certificate"), "cd" * 32, "", False),
    ("wss://127.0.0.2:1/ws", Seen("ab" * 32, "self-signed certificate"), "ab" * 32, "pin", True),
    ("wss://127.0.0.2:1/ws", Seen("ab" * 32, None), "", "ca", True),
    ("https://lvmh.example.com", Seen("ab" * 32, None), "", "ca", False),
    ("wss://loomi.example.com/ws", Seen("ab" * 32, "self-signed certificate"), "ab" * 32, "pin", False),
])
def test_channels(url, seen, qr_fp, via, admin):
    ch = channel_for(url, seen, qr_fp, None)
    assert (ch.via, ch.admin) == (via, admin)
    assert ch.fix if not via else not ch.fix


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
