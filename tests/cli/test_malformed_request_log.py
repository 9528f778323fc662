"""A malformed HTTP request is answered 400 and logged as one line, not an ERROR with a traceback."""

from __future__ import annotations

import socket

from tests.cli.test_serve import _env, _start, _wait_ports


def test_malformed_request_is_one_log_line(tmp_path):
    data = tmp_path / "d"
    proc = _start(str(data), "--adapters", "pheby", "--pheby-port", "0", env=_env(PHEBY_SECRET="s" * 24))
    try:
        ports = _wait_ports(str(data), proc)
        for raw in (b"GET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", ports["pheby"])) as s:
                s.sendall(raw)
                assert s.recv(100).split(b" ")[1] == b"400"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=20)
    assert "Traceback" not in err and "ERROR" not in err, err
    assert err.count("malformed request from 127.0.0.1 answered 400") == 2, err
