"""The ports the suite's restartable servers keep (tests/engines.py ``free_port``) are outside the kernel's
ephemeral range, so no port-0 bind of another process takes one while its server is down."""

from __future__ import annotations

import socket

from tests.engines import _ephemeral_low, free_port


def test_a_kept_port_is_free_and_below_the_ephemeral_range():
    low = _ephemeral_low()
    ports = {free_port() for _ in range(20)}
    assert all(1024 <= p < low for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # free when given


def test_port_zero_binds_never_land_on_a_kept_port():
    low = _ephemeral_low()
    held = []
    try:
        for _ in range(200):  # what every server of the suite started on port 0 gets
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            held.append(s)
            assert s.getsockname()[1] >= low
    finally:
        for s in held:
            s.close()
