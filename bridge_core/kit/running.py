"""Is an agent-bridge running on a data directory, and which command does a user type next.

What the command line tells a user (docs/usage.md, "Other commands"): the commands that need
a running server (``lvmh open``, ``pheby connect``, ``loomi pair``) say so in one line with the
command that starts it, and ``serve`` refused a port names the agent-bridge that has it. The
data directory's lock (``datadir.py``) says whether a server is alive, whatever files a killed
one left in ``run/``.
"""

from __future__ import annotations

import json
import os
import shlex
from typing import Optional

from . import datadir

PROGRAM = "agent-bridge"


def home_data_dir() -> str:
    """``~/.agent-bridge``: the data directory a command uses when given none (and no environment)."""
    return os.path.join(os.path.expanduser("~"), ".agent-bridge")


def command_line(words: str, data_dir: str) -> str:
    """``agent-bridge <words>``, with ``--data-dir <data_dir>`` unless it is ``~/.agent-bridge``
    (what a user types in a shell that may lack ``AGENT_BRIDGE_DATA``)."""
    same = os.path.abspath(data_dir) == os.path.abspath(home_data_dir())
    return f"{PROGRAM} {words}" + ("" if same else f" --data-dir {shlex.quote(data_dir)}")


def run_ports(data_dir: str) -> Optional[dict]:
    """``<data_dir>/run/ports.json`` as the server wrote it, or None."""
    try:
        with open(os.path.join(data_dir, "run", "ports.json"), "r", encoding="utf-8") as f:
            ports = json.load(f)
    except (OSError, ValueError):
        return None
    return ports if isinstance(ports, dict) else None


def server_running(data_dir: str) -> tuple[bool, Optional[int]]:
    """(whether a server runs on ``data_dir``, its pid when known). A live holder of the directory's
    lock runs there; a lock file nobody holds means the last one is gone (its ``run/`` files are
    stale after a ``kill -9``). Without a lock file (a host that does not take it), ``run/ports.json``."""
    found = datadir.holder(data_dir)
    if found is not None:
        return True, found[0]
    if os.path.exists(datadir.lock_path(data_dir)):
        return False, None
    return run_ports(data_dir) is not None, None


def not_running(data_dir: str) -> str:
    """The one line a command that needs a server prints when none runs on ``data_dir``."""
    return f"agent-bridge is not running on {data_dir}; start it with {command_line('serve', data_dir)}"


def holder_of_port(port: int, own_dir: str) -> Optional[tuple[str, Optional[int]]]:
    """(data directory, pid) of another agent-bridge that listens on ``port``, among those a user
    starts without naming one (``~/.agent-bridge``, ``$AGENT_BRIDGE_DATA``); None when none does."""
    own = os.path.abspath(own_dir)
    candidates = [home_data_dir(), os.environ.get("AGENT_BRIDGE_DATA") or ""]
    for other in dict.fromkeys(os.path.abspath(os.path.expanduser(c)) for c in candidates if c):
        if other == own:
            continue
        running, pid = server_running(other)
        ports = run_ports(other)
        if running and (ports is None or port in ports.values()):
            return other, pid
    return None


__all__ = ["command_line", "holder_of_port", "home_data_dir", "not_running", "run_ports", "server_running"]
