"""Running the real command line in tests: ``python -m cli ...`` in a process of its own, with ``HOME``
a directory the test owns (so ``~/.agent-bridge`` is the test's, and visible when used)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Optional

from tests.waiting import until_sync

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXE = [sys.executable, "-m", "cli"]
FREE_PORTS = ["--pheby-port", "0", "--loomi-port", "0", "--lvmh-port", "0"]


def _env(home, **extra) -> dict:
    drop = ("PHEBY_SECRET", "LVMH_TOKEN", "LOOMI_ALLOW_INSECURE_BIND", "AGENT_BRIDGE_DATA", "AGENT_BRIDGE_CONFIG",
            "BROWSER", "DISPLAY", "WAYLAND_DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["HOME"] = str(home)
    env.update(extra)
    return env


def run(home, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(EXE + list(args), capture_output=True, text=True, timeout=60, cwd=ROOT, env=_env(home, **env))


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


class Serve:
    """``agent-bridge <args>`` (a serve) until it has written ``<data_dir>/run/ports.json``."""

    def __init__(self, home, data_dir, *args: str, **env: str):
        self.data_dir = str(data_dir)
        self.proc = subprocess.Popen(EXE + list(args), cwd=ROOT, env=_env(home, **env), text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        path = os.path.join(self.data_dir, "run", "ports.json")

        def ports() -> Optional[dict]:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve exited: {self.proc.returncode} {self.proc.stderr.read()}")
            if os.path.exists(path):
                with open(path) as f:
                    return json.load(f)
            return None

        try:
            self.ports: dict = until_sync(ports, 30, what="ports.json", interval=0.05)
        except BaseException:
            self.proc.kill()  # never left behind (a serve that wrote its ports elsewhere would run on)
            self.proc.communicate(timeout=30)
            raise

    def stop(self, sig: int = signal.SIGTERM) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=30)
        return self.proc.returncode, out, err
