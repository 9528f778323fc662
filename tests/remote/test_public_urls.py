"""``--public-url``, ``--public-fp``, ``--trusted-proxy``: validated at start with one-line errors,
printed in the banner instead of bind addresses, used by the Loomi QR and the lvmh login link."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bridge_core.kit.remote import undialable_reason
from cli.config import build_config, validate_public_url
from bridge_core.model.errors import ConfigError
from loomi_adapter.server import qr_fingerprint
from tests.hardening.proc import ROOT, BridgeProcess
from tests.loomi.test_cli import cli
from tests.waiting import until_sync

FP = "ab" * 32


@pytest.mark.parametrize("name,url,shown", [
    ("pheby", "wss://pheby.example.com/ws", "wss://pheby.example.com/ws"),
    ("loomi", "WSS://loomi.example.com:8443/ws", "wss://loomi.example.com:8443/ws"),
    ("loomi", "ws://192.168.1.20:8621/ws", "ws://192.168.1.20:8621/ws"),
    ("lvmh", "https://lvmh.example.com/", "https://lvmh.example.com"),
    ("lvmh", "http://[fd00::1]:8686", "http://[fd00::1]:8686"),
])
def test_accepted_public_urls(name, url, shown):
    assert validate_public_url(name, url) == shown


@pytest.mark.parametrize("name,url,says", [
    ("loomi", "loomi.localhost:18443", "must start with ws:// or wss://"),
    ("loomi", "wss://loomi.example.com", "must end in /ws"),
    ("pheby", "https://pheby.example.com/ws", "must start with ws:// or wss://"),
    ("lvmh", "wss://lvmh.example.com", "must start with http:// or https://"),
    ("lvmh", "https://example.com/lvmh/", "no path allowed"),
    ("loomi", "wss://user:pw@loomi.example.com/ws", "no user, query or fragment"),
    ("loomi", "wss://loomi.example.com/ws?x=1", "no user, query or fragment"),
    ("loomi", "wss:///ws", "name a host"),
    ("telegram", "wss://t.example.com/ws", "unknown front end"),
])
def test_refused_public_urls(name, url, says):
    with pytest.raises(ConfigError) as info:
        validate_public_url(name, url)
    assert says in info.value.message and "\n" not in info.value.message


def test_options_flags_and_file(tmp_path):
    (tmp_path / "c.toml").write_text(
        'public_url = "pheby=wss://p.example.com/ws"\ntrusted_proxy = ["127.0.0.1", "10.0.0.0/8"]\n'
        '[public_fp]\nloomi = "' + ":".join(["AB"] * 32) + '"\n[lvmh]\npublic_url = "https://old.example.com"\n')
    cfg = build_config({"data_dir": str(tmp_path / "d"), "config": str(tmp_path / "c.toml"),
                        "loomi_public_url": "wss://l.example.com/ws"}, {}, with_secrets=False)
    assert cfg.public_urls == {"pheby": "wss://p.example.com/ws", "lvmh": "https://old.example.com",
                               "loomi": "wss://l.example.com/ws"}
    assert cfg.public_urls["loomi"] == "wss://l.example.com/ws"  # the older option is loomi=URL
    assert cfg.public_fp == {"loomi": FP}
    assert [str(n) for n in cfg.trusted_proxies] == ["127.0.0.1/32", "10.0.0.0/8"]
    cfg = build_config({"data_dir": str(tmp_path / "d"), "config": str(tmp_path / "c.toml"),
                        "public_url": "lvmh=https://new.example.com", "trusted_proxy": "::1"}, {}, with_secrets=False)
    assert cfg.public_urls["lvmh"] == "https://new.example.com"  # the flag wins over the file
    assert [str(n) for n in cfg.trusted_proxies] == ["::1/128"]


def _serve(tmp_path, *args, env=None):
    e = {k: v for k, v in os.environ.items() if k not in ("AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG")}
    e.update(PYTHONPATH=ROOT, **(env or {}))
    return subprocess.run([sys.executable, "-m", "cli", "serve", "--data-dir", str(tmp_path / "d"), *args],
                          capture_output=True, text=True, timeout=60, env=e, cwd=ROOT)


@pytest.mark.parametrize("args,says", [
    (["--loomi-public-url", "loomi.localhost:18443"], "--public-url loomi=loomi.localhost:18443: must start with"),
    (["--public-url", "lvmh=https://x.example.com/ui"], "no path allowed"),
    (["--public-fp", "loomi=abc"], "64 hex digits"),
    (["--trusted-proxy", "10.0.0.0/33"], "'10.0.0.0/33' is not an address or CIDR"),
])
def test_serve_refuses_bad_remote_options_in_one_line(tmp_path, args, says):
    proc = _serve(tmp_path, "--adapters", "loomi", "--loomi-port", "0", *args)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("agent-bridge: ") and says in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _banner(bridge: BridgeProcess, last: str = "lvmh ") -> str:
    """The banner, once its last front end's line is out (and the signal handlers are installed)."""
    path = os.path.join(bridge.log_dir, f"stdout.{bridge.starts}.log")

    def printed():
        with open(path) as f:
            text = f.read()
        return text if last in text else None

    return until_sync(printed, 20, "the banner")


def test_banner_prints_public_urls_never_a_wildcard(tmp_path):
    from cli.app import describe

    cfg = build_config({"data_dir": str(tmp_path / "w"), "host": "0.0.0.0"}, {}, with_secrets=False)
    text = "\n".join(describe(cfg, {"pheby": 1111, "loomi": 2222, "lvmh": 3333}))
    assert "0.0.0.0" not in text and ":2222/ws" in text and ":3333/" in text  # this machine's primary address
    cfg = build_config({"data_dir": str(tmp_path / "w"), "host": "::"}, {}, with_secrets=False)
    assert "[::]" not in "\n".join(describe(cfg, {"loomi": 2222}))
    public = BridgeProcess(str(tmp_path / "public"), extra_args=[
        "--public-url", "pheby=wss://pheby.example.com/ws,loomi=wss://loomi.example.com/ws,lvmh=https://lvmh.example.com",
        "--public-fp", f"loomi={FP}"])
    public.start()
    try:
        text = _banner(public)
        assert ("pheby  wss://pheby.example.com/ws  (connect the app: `agent-bridge pheby connect --data-dir "
                f"{public.data_dir}`; attachments https://pheby.example.com/attachments/<id>)") in text
        assert "loomi  wss://loomi.example.com/ws" in text and "lvmh   https://lvmh.example.com/" in text
        assert f"[listening on 127.0.0.1:{public.ports['lvmh']}]" in text
        assert "cannot dial" not in text  # every URL shown is a public one
        with open(os.path.join(public.data_dir, "run", "endpoints.json")) as f:
            info = json.load(f)
        assert info["urls"]["loomi"] == "wss://loomi.example.com/ws" and info["loomi_fp"] == FP
    finally:
        assert public.stop() == 0


def test_banner_notes_local_use_and_warns_when_a_phone_would_dial_loopback(tmp_path):
    local = BridgeProcess(str(tmp_path / "local"), adapters="pheby,loomi")
    local.start()
    try:
        text = _banner(local, "loomi ")
        # a loopback bind is local use (the default): a note on where to read on, no warning
        assert "note: pheby and loomi listen on 127.0.0.1, for this machine only" in text
        assert "warning" not in text and "cannot dial" not in text
    finally:
        assert local.stop() == 0
    from cli.app import describe

    # a public URL is what phones are told: one they cannot dial is a mistake, and said so
    cfg = build_config({"data_dir": str(tmp_path / "w"), "public_url": "pheby=ws://127.0.0.1:9/ws"}, {},
                       with_secrets=False)
    text = "\n".join(describe(cfg, {"pheby": 1111, "lvmh": 3333}, qr_fp=""))
    assert "warning: a phone cannot dial pheby (127.0.0.1 is loopback" in text and "note: " not in text


@pytest.mark.parametrize("public_fp,public_url,served,public_ca,port,expected", [
    (FP, "wss://l.example.com/ws", "", False, 8621, FP),            # --public-fp wins
    ("", "wss://l.example.com/ws", "", False, 8621, ""),            # a proxy, no pin given: nothing to pin
    ("", None, "cd" * 32, False, 8621, "cd" * 32),                 # direct TLS, self-signed: its fingerprint
    ("", None, "cd" * 32, True, 8621, ""),                         # direct TLS from a public CA: no pin
    ("", "wss://l.example.com:8621/ws", "cd" * 32, False, 8621, "cd" * 32),  # public URL on the served port
    ("", "wss://l.example.com/ws", "cd" * 32, False, 8621, ""),     # TLS on the proxy and the bridge: not ours
])
def test_qr_fingerprint_rules(public_fp, public_url, served, public_ca, port, expected):
    assert qr_fingerprint(public_fp, public_url, served, public_ca, port) == expected


def test_undialable_hosts():
    assert "loopback" in undialable_reason("wss://127.0.0.1:1/ws")
    assert "loopback" in undialable_reason("ws://localhost:1/ws")
    assert "wildcard" in undialable_reason("ws://0.0.0.0:1/ws")
    assert "wildcard" in undialable_reason("ws://[::]:1/ws")
    assert undialable_reason("wss://loomi.example.com/ws") is None


async def test_pair_uses_the_public_url_and_fp(service_factory):
    svc = await service_factory(adapters=("loomi",), public_url="loomi=wss://loomi.example.com/ws",
                                public_fp=f"loomi={FP}")
    rc, out, err = await cli("loomi", "pair", "--json", "--data-dir", svc.cfg.data_dir)
    assert rc == 0, err
    payload = json.loads(out)
    assert payload["url"] == "wss://loomi.example.com/ws" and payload["fp"] == FP
    rc, out, err = await cli("loomi", "pair", "--data-dir", svc.cfg.data_dir)
    assert rc == 0, err
    assert f"tls:     wss, certificate pinned (sha256 {FP})" in out and "none" not in out
    assert "cannot dial" not in err


async def test_pair_never_says_no_tls_next_to_wss_and_warns_on_loopback(service_factory):
    svc = await service_factory(adapters=("loomi",), public_url="loomi=wss://127.0.0.1:18443/ws")
    rc, out, err = await cli("loomi", "pair", "--data-dir", svc.cfg.data_dir)
    assert rc == 0, err
    assert "tls:     wss, no pin: the certificate must chain to a public CA" in out and "none (plain" not in out
    assert "warning: a phone cannot dial wss://127.0.0.1:18443/ws (127.0.0.1 is loopback" in err


async def test_lvmh_login_link_uses_the_public_url(service_factory):
    svc = await service_factory(adapters=("lvmh",), public_url="lvmh=https://lvmh.example.com")
    rc, out, err = await cli("lvmh", "open", "--data-dir", svc.cfg.data_dir, LVMH_TOKEN=svc.cfg.secret("lvmh"))
    assert rc == 0, err
    assert "https://lvmh.example.com/#token=" in out


def test_a_path_prefix_is_a_warning_for_pheby_and_loomi(tmp_path):
    """One hostname or port per front end (docs/remote-access.md): lvmh refuses a prefix (above),
    Pheby and Loomi start with a warning, since their attachment paths are absolute."""
    from cli.app import remote_notes

    cfg = build_config({"data_dir": str(tmp_path / "p"), "public_url": "pheby=wss://example.com/pheby/ws,"
                        "loomi=wss://loomi.example.com/ws"}, {}, with_secrets=False)
    notes = remote_notes(cfg, {"pheby": 1, "loomi": 2})
    assert any(n.startswith("warning: pheby's public URL has a path prefix") and "own hostname or port" in n
               for n in notes)
    assert not any("loomi's public URL has a path prefix" in n for n in notes)


async def test_pheby_download_path_is_absolute(service_factory):
    """What the prefix warning is about: the spec's download_path is rooted at the host."""
    from tests.pheby.client import PhebyClient

    svc = await service_factory(adapters=("pheby",), public_url="pheby=wss://example.com/pheby/ws")
    c = await PhebyClient.connect(svc.ports["pheby"])
    cid = await c.create()
    await c.send({"type": "chat.send", "conversation_id": cid, "text": "/attach"})
    frames = await c.collect_until("run.finished")
    att = next(f for f in frames if f["type"] == "attachment.added")["attachment"]
    assert att["download_path"].startswith("/attachments/")
    await c.close()
