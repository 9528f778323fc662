"""Run a real ``hermes gateway run`` with the agent-bridge plugin, hermetically, for the e2e tests.

The gateway runs from the separate Hermes venv (``scripts/install-hermes.sh``)
against ``fake_model.FakeModel`` on loopback, with its own HERMES_HOME, HOME
and agent-bridge data directory under a temporary folder. Keeping it offline:

- ``security.allow_lazy_installs: false`` / ``HERMES_DISABLE_LAZY_INSTALLS=1``
  (no pip installs at run time) and ``security.tirith_enabled: false`` /
  ``TIRITH_ENABLED=false`` (no scanner download);
- every HTTP(S) proxy variable points at a dead loopback port, with
  ``NO_PROXY`` for 127.0.0.1, so any lookup Hermes attempts beyond the fake
  model (model metadata catalogues) fails at once on loopback;
- a minimal environment: no provider keys from the developer's shell.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Optional

from tests.waiting import until_sync

from .fake_model import FakeModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CACHE = os.environ.get("AGENT_BRIDGE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "agent-bridge")
VENV = os.environ.get("AGENT_BRIDGE_HERMES_VENV") or os.path.join(CACHE, "hermes-venv")
HERMES = os.path.join(VENV, "bin", "hermes")
INSTALL = os.path.join(ROOT, "scripts", "install-hermes.sh")

PHEBY_SECRET = "hermes-e2e-pheby-secret-0123456789"
LVMH_TOKEN = "hermes-e2e-lvmh-token-0123456789"
DEAD_PROXY = "http://127.0.0.1:9"
START_TIMEOUT = 90.0


def unavailable_reason() -> Optional[str]:
    """Why the Hermes e2e tests cannot run here (None when they can)."""
    if not os.path.exists(HERMES):
        return f"Hermes venv not installed ({VENV}); run scripts/install-hermes.sh"
    check = subprocess.run(["bash", INSTALL, "--check"], capture_output=True)
    if check.returncode != 0:
        # the cached venv was installed from another checkout (or an older pyproject): refresh it
        done = subprocess.run(["bash", INSTALL], capture_output=True, text=True, env={**os.environ, "QUIET": "1"})
        if done.returncode != 0:
            return "scripts/install-hermes.sh failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]
    return None


# This checkout's packages under their import names (the CLI folder cli/ imports as
# agent_bridge_cli, docs/hermes.md), for the gateway's PYTHONPATH.
PACKAGES = {"bridge_core": "bridge_core", "pheby_adapter": "pheby_adapter", "loomi_adapter": "loomi_adapter",
            "lvmh_adapter": "lvmh_adapter", "agent_bridge_cli": "cli"}


def checkout_path(home: str) -> str:
    """A folder that imports this checkout's code, whichever checkout installed the shared venv.

    Not the checkout itself: its ``cli/`` folder would shadow Hermes's own ``cli`` module, and
    the plugin's package ``agent_bridge_cli`` is that folder under another name.
    """
    path = os.path.join(home, "pythonpath")
    os.makedirs(path, exist_ok=True)
    for name, folder in PACKAGES.items():
        link = os.path.join(path, name)
        if not os.path.lexists(link):
            os.symlink(os.path.join(ROOT, folder), link)
    return path


def hermes_env(home: str, data: str) -> dict:
    env = {
        "PATH": os.path.dirname(HERMES) + os.pathsep + os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.path.join(home, "user"),
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TZ": "UTC",
        "HERMES_HOME": os.path.join(home, "hermes"),
        "AGENT_BRIDGE_DATA": data,
        "AGENT_BRIDGE_METRICS_PORT": "off",  # as every server of the suite (tests/conftest.py): no fixed port
        "PHEBY_SECRET": PHEBY_SECRET,
        "LVMH_TOKEN": LVMH_TOKEN,
        "PYTHONPATH": checkout_path(home),
        "PYTHONUNBUFFERED": "1",
        "HERMES_DISABLE_LAZY_INSTALLS": "1",
        "TIRITH_ENABLED": "false",
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[var] = DEAD_PROXY
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def write_config(hermes_home: str, data: str, base_url: str, adapters: str) -> None:
    os.makedirs(hermes_home, exist_ok=True)
    with open(os.path.join(hermes_home, "config.yaml"), "w") as f:
        f.write(
            "model: {default: fake-model, provider: custom, base_url: %s}\n"
            "plugins: {enabled: [agent-bridge]}\n"
            "streaming: {enabled: true, transport: edit, edit_interval: 0.1}\n"
            "security: {allow_lazy_installs: false, tirith_enabled: false}\n"
            "approvals: {mode: manual, timeout: 120}\n"
            "agent: {reasoning_effort: medium}\n" % base_url
        )
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(data, "config.toml"), "w") as f:
        f.write(f'adapters = "{adapters}"\n[pheby]\nport = 0\n[loomi]\nport = 0\n[lvmh]\nport = 0\n')


class Gateway:
    def __init__(self, root: str, adapters: str = "pheby,loomi"):
        self.root = root
        self.adapters = adapters
        self.home = os.path.join(root, "hermes")
        self.data = os.path.join(root, "data")
        self.work = os.path.join(root, "work")
        self.log_path = os.path.join(root, "gateway.log")
        self.fake = FakeModel()
        self.proc: Optional[subprocess.Popen] = None
        self.ports: dict = {}
        self.env: dict = {}

    @property
    def config_path(self) -> str:
        return os.path.join(self.home, "config.yaml")

    def start(self) -> "Gateway":
        os.makedirs(self.work, exist_ok=True)
        self.fake.start()
        write_config(self.home, self.data, self.fake.base_url, self.adapters)
        self.env = hermes_env(self.root, self.data)
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [HERMES, "gateway", "run", "-v", "--replace"],
            cwd=self.work,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        ports_file = os.path.join(self.data, "run", "ports.json")
        wanted = set(self.adapters.split(","))

        def up() -> Optional[dict]:
            if self.proc.poll() is not None:
                raise RuntimeError(f"hermes gateway exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                with open(ports_file) as f:
                    ports = json.load(f)
            except (OSError, ValueError):
                ports = {}
            return ports if wanted <= set(ports) and "Gateway running" in self.log() else None

        try:
            self.ports = until_sync(up, START_TIMEOUT, "the hermes gateway", interval=0.2)
        except AssertionError:
            raise RuntimeError(f"hermes gateway did not come up in {START_TIMEOUT}s:\n{self.log_tail()}") from None
        return self

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n: int = 60) -> str:
        return "\n".join(self.log().splitlines()[-n:])

    def hermes(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        """Run a ``hermes`` CLI command in the same environment as the gateway."""
        return subprocess.run(
            [HERMES, *args], cwd=self.work, env=self.env, stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            # SIGTERM; Hermes exits 1 on purpose (for systemd restarts), not a failure
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)  # the session this fixture started
                except ProcessLookupError:
                    pass
                proc.wait(timeout=10)
        self.fake.stop()


__all__ = ["Gateway", "unavailable_reason", "PHEBY_SECRET", "sys"]
