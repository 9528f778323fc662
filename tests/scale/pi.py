"""A pi plugin's and an lvmh browser's addresses on a node of the several-nodes tests (one copy for the files that
move pi sessions between nodes); the ``clients`` fixture that closes them is in conftest.py."""

from __future__ import annotations

from tests.hardening.proc import BridgeProcess


def lvmh_http(proc: BridgeProcess) -> str:
    """The node's lvmh REST and browser base URL."""
    return f"http://127.0.0.1:{proc.ports['lvmh']}"


def plugin_url(proc: BridgeProcess) -> str:
    """The node's pi plugin socket."""
    return f"ws://127.0.0.1:{proc.ports['lvmh']}/agent/ws"
