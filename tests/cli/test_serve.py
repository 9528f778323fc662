"""`agent-bridge serve` as a user runs it: a real process, real ports, signals, and no secret in its output."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from tests.forged import forged
from tests.pheby.client import PhebyClient
from tests.waiting import until_sync

EXE = [sys.executable, "-m", "cli"]


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("PHEBY_SECRET", "LVMH_TOKEN", "LOOMI_ALLOW_INSECURE_BIND")}
    env.update(extra)
    return env


def _wait_ports(data_dir, proc, timeout=20.0):
    path = os.path.join(data_dir, "run", "ports.json")

    def ports():
        if proc.poll() is not None:
            raise AssertionError(f"serve exited early: {proc.returncode} {proc.stderr.read()}")
        if os.path.exists(path):
            with open(path) as f:
                return json.load(f)
        return None

    return until_sync(ports, timeout, what="ports.json", interval=0.05)


def _start(data_dir, *args, env=None):
    return subprocess.Popen(
        EXE + ["serve", "--data-dir", str(data_dir), "--pheby-port", "0", "--loomi-port", "0", "--lvmh-port", "0", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env or _env(),
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    )


async def test_generated_secret_stored_private_and_never_printed(tmp_path):
    data = tmp_path / "data"
    proc = _start(data, "--adapters", "pheby", "--log-level", "DEBUG")
    try:
        ports = _wait_ports(data, proc)
        assert set(ports) == {"pheby"}
        secret_file = data / "secrets" / "pheby_secret"
        assert (secret_file.stat().st_mode & 0o777) == 0o600
        secret = secret_file.read_text().strip()
        assert len(secret) >= 32
        # exercise it: a failed hello, a good one, a run with an attachment and its download
        bad = await PhebyClient.connect(ports["pheby"], hello=False)
        await bad.send({"type": "hello", "secret": forged(secret), "protocol_version": 1})
        assert (await bad.recv())["error"]["code"] == "unauthorized"
        await bad.close()
        c = await PhebyClient.connect(ports["pheby"], secret=secret)
        cid = await c.create()
        await c.send({"type": "chat.send", "conversation_id": cid, "text": "/attach", "request_id": "r"})
        att = (await c.recv_type("attachment.added"))["attachment"]
        await c.collect_until("run.finished")
        import aiohttp
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{ports['pheby']}{att['download_path']}", headers={"Authorization": f"Bearer {secret}"}) as r:
                assert r.status == 200
        await c.send({"type": "chat.send", "conversation_id": cid, "text": f"/tool x", "request_id": "r2"})
        await c.collect_until("run.finished")
        await c.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert str(secret_file) in out  # where it is stored is printed
    assert secret not in out and secret not in err
    lvmh_token = (data / "secrets" / "lvmh_token").read_text().strip()
    assert lvmh_token not in out and lvmh_token not in err
    assert not (data / "run" / "ports.json").exists()


def test_env_secret_never_printed(tmp_path):
    data = tmp_path / "data"
    secret = "env-secret-" + "k" * 30
    proc = _start(data, "--adapters", "pheby", "--log-level", "DEBUG", env=_env(PHEBY_SECRET=secret))
    try:
        _wait_ports(data, proc)
        assert not (data / "secrets" / "pheby_secret").exists()
    finally:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0
    assert secret not in out + err


def test_port_in_use_is_a_one_line_error(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    try:
        proc = subprocess.run(
            EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--adapters", "pheby", "--pheby-port", str(port)],
            capture_output=True, text=True, timeout=30, env=_env(),
        )
    finally:
        sock.close()
    assert proc.returncode != 0
    lines = [l for l in proc.stderr.splitlines() if l.startswith("agent-bridge:")]
    assert len(lines) == 1 and str(port) in lines[0] and "Traceback" not in proc.stderr


def test_bad_config_is_a_one_line_error(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("this is = = not toml")
    proc = subprocess.run(EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--config", str(cfg)],
                          capture_output=True, text=True, timeout=30, env=_env())
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("agent-bridge: config file") and len(proc.stderr.strip().splitlines()) == 1
    proc = subprocess.run(EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--config", str(tmp_path / "missing.toml")],
                          capture_output=True, text=True, timeout=30, env=_env())
    assert proc.returncode != 0 and "not found" in proc.stderr


def test_unknown_adapter_is_refused(tmp_path):
    proc = subprocess.run(EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--adapters", "pheby,telegram"],
                          capture_output=True, text=True, timeout=30, env=_env())
    assert proc.returncode != 0 and "unknown adapter 'telegram'" in proc.stderr


def test_non_loopback_bind_without_tls_refused(tmp_path):
    proc = subprocess.run(EXE + ["serve", "--data-dir", str(tmp_path / "d"), "--host", "0.0.0.0", "--adapters", "pheby"],
                          capture_output=True, text=True, timeout=30, env=_env())
    assert proc.returncode != 0
    assert "refusing to bind 0.0.0.0 without TLS" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_config_file_and_flags(tmp_path):
    from cli.config import build_config

    data = tmp_path / "d"
    data.mkdir()
    (data / "config.toml").write_text('adapters = "pheby"\n[pheby]\nport = 9999\n[attachments]\nretention_days = 0\n')
    cfg = build_config({"data_dir": str(data)}, {"PHEBY_SECRET": "s" * 16, "LVMH_TOKEN": "t" * 16})
    assert cfg.adapters == ("pheby",) and cfg.ports["pheby"] == 9999 and cfg.retention_days == 0
    cfg = build_config({"data_dir": str(data), "pheby_port": 1234}, {"PHEBY_SECRET": "s" * 16, "LVMH_TOKEN": "t" * 16})
    assert cfg.ports["pheby"] == 1234 and cfg.secret("pheby") == "s" * 16
    assert "pheby_secret=" not in repr(cfg) and "lvmh_token=" not in repr(cfg)  # never in a repr or a log line
