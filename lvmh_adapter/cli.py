"""``agent-bridge lvmh plugin-path`` and ``agent-bridge lvmh open``.

    pi -e "$(agent-bridge lvmh plugin-path)"     # where the installed pi extension is
    agent-bridge lvmh open                        # print a login link to the web UI
    agent-bridge lvmh open --browser              # ... and open it in the default browser

The login link is ``http://127.0.0.1:<port>/#token=<LVMH_TOKEN>``: the token travels in
the URL fragment, which a browser never sends in a request line (so no server or proxy
log sees it); the page stores it and clears the fragment. The link is the secret: this
command prints it on request only, never ``serve`` into a log. See README, "The web UI".
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.parse
from typing import Any, Optional

from bridge_core.private import open_private, private_dir

PLUGIN_FILE = "lvmh-agent.mjs"


def plugin_path() -> str:
    """Absolute path of the pi extension shipped with this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "pi_extension", PLUGIN_FILE)


def add_parser(subparsers: Any, common_options: Any) -> None:
    lvmh = subparsers.add_parser("lvmh", help="lvmh: the pi extension for mirroring pi sessions")
    sub = lvmh.add_subparsers(dest="lvmh_command", metavar="COMMAND")
    path = sub.add_parser("plugin-path", help="print the absolute path of the pi extension (pi -e <path>)")
    common_options(path)
    path.set_defaults(func=cmd_plugin_path)
    opener = sub.add_parser("open", help="print a login link to the web UI (the token rides in the URL fragment)")
    common_options(opener)
    opener.add_argument("--browser", action="store_true",
                        help="also open it in the default browser (through an owner-only file, not the command line)")
    opener.set_defaults(func=cmd_open)

    def usage(args: argparse.Namespace) -> int:
        lvmh.print_help()
        return 2

    lvmh.set_defaults(func=usage)


def cmd_plugin_path(args: argparse.Namespace) -> int:
    path = plugin_path()
    if not os.path.isfile(path):
        print(f"agent-bridge: the pi extension is missing from this install ({path})", file=sys.stderr)
        return 1
    print(path)
    return 0


def _read_token(data_dir: str) -> str:
    from bridge_core.config import read_stored_secret

    return read_stored_secret(data_dir, "lvmh_token", "LVMH_TOKEN", "lvmh token")


def _base_url(cfg: Any) -> tuple[str, bool]:
    """(the web UI's base URL, whether a running server's ports.json named the port)."""
    from bridge_core.config import read_endpoints

    from .auth import public_url

    running_info = read_endpoints(cfg.run_dir)  # the running server's --public-url lvmh=, if it has one
    if running_info and "lvmh" in running_info.get("public", ()):
        return str(running_info["urls"]["lvmh"]).rstrip("/"), True
    public = public_url(cfg)
    if isinstance(public, str) and public.startswith(("http://", "https://")):
        return public.rstrip("/"), True
    port: Optional[int] = None
    try:
        with open(os.path.join(cfg.run_dir, "ports.json"), "r", encoding="utf-8") as f:
            ports = json.load(f)
        if isinstance(ports, dict) and isinstance(ports.get("lvmh"), int):
            port = ports["lvmh"]
    except (OSError, ValueError):
        pass
    running = port is not None
    if port is None:
        port = cfg.ports.get("lvmh", 8686)
    host = cfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # a wildcard bind is reached on loopback from this machine
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if cfg.tls else 'http'}://{shown}:{port}", running


def login_link(cfg: Any) -> tuple[str, bool]:
    base, running = _base_url(cfg)
    token = _read_token(cfg.data_dir)
    return f"{base}/#token={urllib.parse.quote(token, safe='')}", running


def cmd_open(args: argparse.Namespace) -> int:
    from bridge_core.config import ConfigError, build_config

    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           with_secrets=False)
        link, running = login_link(cfg)
    except ConfigError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    if not running:
        print("agent-bridge: warning: the server does not seem to be running (no run/ports.json); "
              "start `agent-bridge serve`", file=sys.stderr)
    print("Open the web UI with this link (it contains the token: do not share it):")
    print(f"  {link}")
    if getattr(args, "browser", False):
        _open_in_browser(cfg.run_dir, link)
    return 0


def _open_in_browser(run_dir: str, link: str) -> None:
    """Open ``link`` through an owner-only redirect file, so the token never shows in a process list."""
    import html
    import webbrowser

    path = os.path.join(private_dir(run_dir), "open.html")
    with os.fdopen(open_private(path), "w", encoding="utf-8") as f:
        f.write('<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0;url={html.escape(link, quote=True)}">'
                "<title>agent-bridge</title><p>Opening the web UI…</p>")
    if not webbrowser.open("file://" + path):
        print("agent-bridge: no browser could be started; open the link above", file=sys.stderr)
