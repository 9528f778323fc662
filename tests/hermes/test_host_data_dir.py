"""The Hermes gateway's bridge host takes the data directory as ``agent-bridge serve`` does (docs/security.md).

In-process: ``BridgeHost`` (what the gateway runs at its first platform's ``connect()``) against
a real ``agent-bridge serve`` process on the same directory, both ways round. The real gateway
holding it is ``test_gateway_data_dir.py``. The host is imported from this checkout
(``cli.hermes.host``), as the gateway tests run this checkout's code.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bridge_core.kit import datadir
from cli.hermes.host import BridgeHost

from tests.pheby.client import PhebyClient
from tests.security.helpers import LVMH_TOKEN, PHEBY_SECRET, ROOT, bridges, data_dir_state  # noqa: F401

from .fakes import FakeApi


class Adapter:
    """What the host keeps of a platform adapter: its name."""

    def __init__(self, name: str):
        self.platform_name = name


@pytest.fixture
def shared(bridges, monkeypatch):  # noqa: F811
    """A serve (not started) and the gateway's environment on one data directory."""
    srv = bridges("shared", start=False, adapters="pheby")
    with open(os.path.join(srv.data_dir, "config.toml"), "w") as f:  # the gateway's own configuration
        f.write('adapters = "pheby"\n[pheby]\nport = 0\n')
    monkeypatch.setenv("AGENT_BRIDGE_DATA", srv.data_dir)
    monkeypatch.delenv("AGENT_BRIDGE_CONFIG", raising=False)
    monkeypatch.setenv("PHEBY_SECRET", PHEBY_SECRET)
    monkeypatch.setenv("LVMH_TOKEN", LVMH_TOKEN)
    return srv


async def test_a_serve_on_the_gateways_directory_exits_and_the_gateway_goes_on(shared):
    host, adapter = BridgeHost(("pheby",), api=FakeApi()), Adapter("pheby")
    await host.attach(adapter)
    try:
        assert datadir.holder(shared.data_dir) == (os.getpid(), "hermes gateway")
        before = data_dir_state(shared.data_dir)
        done = subprocess.run([sys.executable, "-m", "cli", *shared.command()[3:]], cwd=ROOT, env=shared.env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr.strip() == (f"agent-bridge: the data directory {shared.data_dir} is in use by pid "
                                       f"{os.getpid()} (hermes gateway): one process per data directory")
        assert data_dir_state(shared.data_dir) == before
        c = await PhebyClient.connect(host.service.ports["pheby"], secret=PHEBY_SECRET)  # the host still serves
        await c.close()
    finally:
        await host.detach(adapter)
    assert not host.ready and host.owned is None and datadir.holder(shared.data_dir) is None  # stopped: free


async def test_the_gateways_start_fails_on_a_directory_a_serve_holds(shared):
    shared.start()
    before = data_dir_state(shared.data_dir)
    host = BridgeHost(("pheby",), api=FakeApi())
    with pytest.raises(datadir.DataDirBusy) as busy:
        await host.attach(Adapter("pheby"))
    assert busy.value.pid == shared.proc.pid and busy.value.role == "agent-bridge serve"
    assert not host.ready and host.owned is None and not host.source.adapters
    assert data_dir_state(shared.data_dir) == before and shared.alive
    assert datadir.holder_pid(shared.data_dir) == shared.proc.pid
    c = await PhebyClient.connect(shared.ports["pheby"], secret=PHEBY_SECRET)  # the serve goes on
    await c.close()
    assert shared.stop() == 0
