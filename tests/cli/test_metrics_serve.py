"""`agent-bridge serve` and its metrics endpoint as a process: where it listens, what run/ports.json
and the banner say, and the one-line refusals (an exposed endpoint without a token, a port in use)."""

from __future__ import annotations

import signal
import socket
import subprocess

import aiohttp

from tests.cli.test_serve import EXE, _env, _start, _wait_ports
from tests.conftest import ROOT


async def test_port_0_is_listed_in_ports_json_and_the_banner(tmp_path):
    data = tmp_path / "data"
    proc = _start(data, "--adapters", "pheby", "--metrics-port", "0")
    try:
        ports = _wait_ports(data, proc)
        assert set(ports) == {"pheby", "metrics"} and ports["metrics"] > 0
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{ports['metrics']}/metrics") as r:
                assert r.status == 200
                assert "agent_bridge_connections{front_end=\"pheby\"} 0.0" in await r.text()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert f"http://127.0.0.1:{ports['metrics']}/metrics" in out
    assert not (data / "run" / "ports.json").exists()
    with socket.socket() as s:  # stopped with the rest
        assert s.connect_ex(("127.0.0.1", ports["metrics"])) != 0


def test_an_exposed_endpoint_without_a_token_never_starts(tmp_path):
    data = tmp_path / "d"
    proc = subprocess.run(EXE + ["serve", "--data-dir", str(data), "--adapters", "pheby", "--pheby-port", "0",
                                 "--metrics-host", "0.0.0.0", "--metrics-port", "0"],
                          capture_output=True, text=True, timeout=30, cwd=ROOT, env=_env())  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "refusing to serve metrics on 0.0.0.0 without [metrics] token" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (data / "run" / "ports.json").exists()


def test_a_metrics_port_in_use_is_a_one_line_error(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    data = tmp_path / "d"
    try:
        proc = subprocess.run(EXE + ["serve", "--data-dir", str(data), "--adapters", "pheby", "--pheby-port", "0",
                                     "--metrics-port", str(port)],
                              capture_output=True, text=True, timeout=30, cwd=ROOT, env=_env())  # fmt: skip
    finally:
        sock.close()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("agent-bridge:")]
    assert len(lines) == 1 and f"metrics: cannot listen on 127.0.0.1:{port}" in lines[0]
    assert f"using port {port}?" in lines[0] and "--metrics-port 0 picks a free one" in lines[0]  # its own flag
    assert not (data / "run" / "ports.json").exists()
