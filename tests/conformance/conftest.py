"""The conformance suite: clients written from the protocol specifications alone.

Nothing in tests/conformance imports the project (no codec, no constants, no test
helper of ours): the server is ``agent-bridge serve`` started as a subprocess from
this checkout on port 0, and the clients speak to it over real sockets with plain
aiohttp, doing what a careful app built from the spec text would do. The
normative statements each test proves are listed in docs/conformance.md.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from typing import Optional

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PHEBY_SECRET = "conformance-pheby-secret-5d1c8e2a"
LVMH_TOKEN = "conformance-lvmh-token-9b4f7a3e"


class Server:
    """One ``agent-bridge serve`` process on its own data directory; restartable there."""

    def __init__(self, base: str, config: str = "", env: Optional[dict] = None, adapters: str = "pheby,loomi,lvmh"):
        self.base = base
        self.data_dir = os.path.join(base, "data")
        self.logs = os.path.join(base, "logs")
        os.makedirs(self.data_dir, exist_ok=True)
        os.makedirs(self.logs, exist_ok=True)
        self.config_path = os.path.join(base, "config.toml")
        with open(self.config_path, "w") as f:
            f.write(config)
        self.adapters = adapters
        self.env = dict(os.environ, PHEBY_SECRET=PHEBY_SECRET, LVMH_TOKEN=LVMH_TOKEN, PYTHONPATH=ROOT)
        for k in ("AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG", "DOCKER_HOST", "LVMH_CONTAINER_DOCKER_SOCK"):
            self.env.pop(k, None)
        # never reach out: GitLab and Docker point at nothing
        self.env["LVMH_GITLAB_URL"] = "http://127.0.0.1:9"
        self.env["LVMH_DOCKER_URL"] = "unix:///nonexistent/agent-bridge-conformance/docker.sock"
        self.env.update(env or {})
        self.proc: Optional[subprocess.Popen] = None
        self.ports: dict = {}
        self.starts = 0

    @property
    def portfile(self) -> str:
        return os.path.join(self.data_dir, "run", "ports.json")

    def _popen(self, args: list, name: str) -> subprocess.Popen:
        out = open(os.path.join(self.logs, f"{name}.out"), "wb")
        err = open(os.path.join(self.logs, f"{name}.err"), "wb")
        try:
            return subprocess.Popen([sys.executable, "-m", "cli", *args], cwd=ROOT, env=self.env, stdout=out,
                                    stderr=err, stdin=subprocess.DEVNULL)
        finally:
            out.close()
            err.close()

    def start(self, timeout: float = 30.0) -> dict:
        assert not self.alive, "already running"
        try:
            os.unlink(self.portfile)  # a killed server leaves its ports.json behind
        except FileNotFoundError:
            pass
        self.starts += 1
        self.proc = self._popen(["serve", "--data-dir", self.data_dir, "--config", self.config_path,
                                 "--adapters", self.adapters, "--pheby-port", "0", "--loomi-port", "0",
                                 "--lvmh-port", "0"], f"serve.{self.starts}")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: {self.stderr()[-2000:]}")
            if os.path.exists(self.portfile):
                with open(self.portfile) as f:
                    self.ports = json.load(f)
                return self.ports
            time.sleep(0.05)
        raise RuntimeError(f"serve did not start in {timeout} s: {self.stderr()[-2000:]}")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> Optional[int]:
        """SIGTERM, as a user's Ctrl-C or service manager would; the exit status."""
        if not self.alive:
            return None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9

    def kill9(self) -> None:
        assert self.alive
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def restart(self, hard: bool = False) -> dict:
        self.kill9() if hard else self.stop()
        return self.start()

    def stderr(self) -> str:
        try:
            with open(os.path.join(self.logs, f"serve.{self.starts}.err"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def cli(self, *args: str, timeout: float = 30.0) -> subprocess.CompletedProcess:
        """Run ``agent-bridge <args>`` against this server's data directory, as its user would."""
        return subprocess.run([sys.executable, "-m", "cli", *args, "--data-dir", self.data_dir], cwd=ROOT,
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)

    def pair_payload(self) -> dict:
        """The QR payload of ``agent-bridge loomi pair --json``: {v, url, token, name, fp}."""
        res = self.cli("loomi", "pair", "--json")
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout.strip().splitlines()[-1])

    def url(self, front: str, path: str = "", scheme: str = "http") -> str:
        return f"{scheme}://127.0.0.1:{self.ports[front]}{path}"


@pytest.fixture
def server_factory(tmp_path):
    """Start ``agent-bridge serve`` processes (stopped after the test): ``server_factory(config="", env=None)``."""
    made: list[Server] = []

    def make(config: str = "", env: Optional[dict] = None, adapters: str = "pheby,loomi,lvmh", start: bool = True):
        srv = Server(str(tmp_path / f"server{len(made)}"), config=config, env=env, adapters=adapters)
        made.append(srv)
        if start:
            srv.start()
        return srv

    yield make
    for srv in made:
        srv.stop()


@pytest.fixture
def server(server_factory):
    """One running ``agent-bridge serve`` with the demo agent and all three front ends."""
    return server_factory()
