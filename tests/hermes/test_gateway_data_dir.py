"""The real Hermes gateway holds its agent-bridge data directory: a ``serve`` on it exits, touching nothing.

Uses the e2e module's gateway (``hermes_gateway``, session-scoped); the host's side both ways
round is tested in-process in ``test_host_data_dir.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.pheby.client import PhebyClient
from tests.security.helpers import data_dir_state

from .gateway import PHEBY_SECRET, ROOT

pytestmark = pytest.mark.hermes


async def test_a_serve_on_the_gateways_data_directory_exits_and_the_gateway_goes_on(hermes_gateway):
    gw = hermes_gateway
    before = data_dir_state(gw.data)
    env = {k: v for k, v in os.environ.items() if k not in ("AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG")}
    done = subprocess.run([sys.executable, "-m", "cli", "serve", "--data-dir", gw.data, "--pheby-port", "0",
                           "--loomi-port", "0", "--lvmh-port", "0"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    assert done.stderr.strip() == (f"agent-bridge: the data directory {gw.data} is in use by pid {gw.proc.pid} "
                                   "(hermes gateway): one process per data directory")
    assert data_dir_state(gw.data) == before and gw.proc.poll() is None
    c = await PhebyClient.connect(gw.ports["pheby"], secret=PHEBY_SECRET)  # the gateway's bridge goes on
    assert await c.create("still here")
    await c.close()
