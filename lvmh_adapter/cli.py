"""``agent-bridge lvmh plugin-path`` and ``agent-bridge lvmh open``.

    pi -e "$(agent-bridge lvmh plugin-path)"     # where the installed pi extension is
    agent-bridge lvmh open                        # print a login link to the web UI
    agent-bridge lvmh open --browser              # ... and open it in the default browser

The login link is ``http://127.0.0.1:<port>/#token=<LVMH_TOKEN>``: the token travels in
the URL fragment, which a browser never sends in a request line (so no server or proxy
log sees it); the page stores it and clears the fragment. The link is the secret: this
command prints it on request only, never ``serve`` into a log. See docs/usage.md, "The web UI".
``open`` needs a server running on the data directory (else one line says how to start it),
and with ``--browser`` exits 1 when no browser starts (the link is printed all the same).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import urllib.parse
from typing import Any, Callable

from bridge_core.bridge.private import open_private, private_dir

PLUGIN_FILE = "lvmh-agent.mjs"


def plugin_path() -> str:
    """Absolute path of the pi extension shipped with this package."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "pi_extension", PLUGIN_FILE)


def add_parser(subparsers: Any, common_options: Any, build_config: Callable[..., Any]) -> None:
    """``agent-bridge lvmh ...``; ``build_config``: the host's (its front ends' parts assembled)."""
    lvmh = subparsers.add_parser("lvmh", help="lvmh: log in to the web UI (lvmh open); the pi extension's path",
                                 description="lvmh: the web UI (`agent-bridge lvmh open` prints its login link) "
                                             "and the pi extension that mirrors pi sessions into it.")
    common_options(lvmh)
    sub = lvmh.add_subparsers(dest="lvmh_command", metavar="COMMAND")
    what = "print a login link to the web UI (the token rides in the URL fragment); the server must be running"
    opener = sub.add_parser("open", help=what, description=what[0].upper() + what[1:] + ".")
    common_options(opener)
    opener.add_argument("--browser", action="store_true",
                        help="also open it in the default browser (through an owner-only file, not the command line); "
                             "exit status 1 when none starts")
    opener.set_defaults(func=functools.partial(cmd_open, build_config=build_config))
    what = "print the absolute path of the pi extension (pi -e <path>)"
    path = sub.add_parser("plugin-path", help=what, description=what[0].upper() + what[1:] + ".")
    common_options(path)
    path.set_defaults(func=cmd_plugin_path)

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
    from bridge_core.kit.config import read_stored_secret

    from .config import SECRET

    return read_stored_secret(data_dir, SECRET.file, SECRET.env, SECRET.label)


class NotServing(Exception):
    pass


def _base_url(cfg: Any) -> str:
    """The web UI's base URL as the server running on ``cfg``'s data directory serves it (its
    ``--public-url lvmh=``, or ``[lvmh] public_url``, else its bound port on this machine);
    ``NotServing`` with the one line to print when no server runs there, or it has no lvmh."""
    from bridge_core.kit.config import read_endpoints
    from bridge_core.kit.running import command_line, not_running, run_ports, server_running

    from .request import public_url

    running, _pid = server_running(cfg.data_dir)
    if not running:
        raise NotServing(not_running(cfg.data_dir))
    running_info = read_endpoints(cfg.run_dir)  # the running server's --public-url lvmh=, if it has one
    if running_info and "lvmh" in running_info.get("public", ()):
        return str(running_info["urls"]["lvmh"]).rstrip("/")
    port = (run_ports(cfg.data_dir) or {}).get("lvmh")
    if not isinstance(port, int):
        raise NotServing(f"the agent-bridge running on {cfg.data_dir} has no lvmh front end: restart it with "
                         f"{command_line('serve', cfg.data_dir)} --adapters ...,lvmh")
    public = public_url(cfg)
    if isinstance(public, str) and public.startswith(("http://", "https://")):
        return public.rstrip("/")
    host = cfg.host
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"  # a wildcard bind is reached on loopback from this machine
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if cfg.tls else 'http'}://{shown}:{port}"


def login_link(cfg: Any) -> str:
    base = _base_url(cfg)
    token = _read_token(cfg.data_dir)
    return f"{base}/#token={urllib.parse.quote(token, safe='')}"


def cmd_open(args: argparse.Namespace, build_config: Callable[..., Any]) -> int:
    from bridge_core.model.errors import ConfigError

    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           with_secrets=False)
        link = login_link(cfg)
    except ConfigError as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    except NotServing as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    print("Open the web UI with this link (it contains the token: do not share it):")
    print(f"  {link}", flush=True)
    if getattr(args, "browser", False) and not _open_in_browser(cfg.run_dir, link):
        print("agent-bridge: no browser could be started (set BROWSER to one); open the link above by hand",
              file=sys.stderr)
        return 1
    return 0


def _open_in_browser(run_dir: str, link: str) -> bool:
    """Open ``link`` through an owner-only redirect file, so the token never shows in a process list;
    whether a browser started."""
    import html
    import webbrowser

    path = os.path.join(private_dir(run_dir), "open.html")
    with os.fdopen(open_private(path), "w", encoding="utf-8") as f:
        f.write('<!doctype html><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0;url={html.escape(link, quote=True)}">'
                "<title>agent-bridge</title><p>Opening the web UI…</p>")
    try:
        return bool(webbrowser.open("file://" + path))
    except webbrowser.Error:
        return False
