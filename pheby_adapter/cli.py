"""``agent-bridge pheby connect``: what the Pheby app needs, shown once on the user's own terminal.

    agent-bridge pheby connect           # URL, secret and a QR code of both (a terminal only)
    agent-bridge pheby connect --json    # only the QR payload, one line: {"v":1,"url":...,"secret":...}

The URL is the running server's Pheby URL (its ``--public-url pheby=`` when given, from
``<data-dir>/run/endpoints.json``), else the one the configuration gives; the secret is
``PHEBY_SECRET`` or ``<data-dir>/secrets/pheby_secret``. The secret is printed here only, on
request, never by ``serve`` and never into a log; without ``--json`` the command refuses to print
it when its output is not a terminal (a file, a pipe, a service log). See docs/remote-access.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

QR_VERSION = 1


def add_parser(subparsers: Any, common_options: Any) -> None:
    pheby = subparsers.add_parser("pheby", help="Pheby: connect the phone app")
    sub = pheby.add_subparsers(dest="pheby_command", metavar="COMMAND")
    connect = sub.add_parser("connect", help="show the Pheby URL and secret (and a QR code of them) for the app")
    common_options(connect)
    connect.add_argument("--json", action="store_true",
                         help='print only the QR payload {"v":1,"url":...,"secret":...} on one line')
    connect.set_defaults(func=cmd_connect)

    def usage(args: argparse.Namespace) -> int:
        pheby.print_help()
        return 2

    pheby.set_defaults(func=usage)


def _secret(data_dir: str) -> str:
    from bridge_core.config import read_stored_secret

    return read_stored_secret(data_dir, "pheby_secret", "PHEBY_SECRET", "Pheby secret")


def pheby_url(cfg: Any) -> tuple[str, bool]:
    """(the URL the app dials, whether a running server told it)."""
    from bridge_core.config import bound_url, read_endpoints

    info = read_endpoints(cfg.run_dir)
    if info and isinstance(info["urls"].get("pheby"), str):
        return info["urls"]["pheby"], True
    url = cfg.public_urls.get("pheby") or bound_url("pheby", cfg.host, cfg.ports.get("pheby", 8620), cfg.tls)
    return url, False


def cmd_connect(args: argparse.Namespace) -> int:
    from bridge_core.config import ConfigError, build_config, undialable_reason

    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           with_secrets=False)
        url, running = pheby_url(cfg)
        secret = _secret(cfg.data_dir)
    except ConfigError as exc:
        print(f"agent-bridge: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    if not args.json and not sys.stdout.isatty():
        print("agent-bridge: not printing the Pheby secret: the output is not a terminal (it would land in a file "
              "or a log); run this in a terminal, or pass --json to print the payload on purpose", file=sys.stderr)
        return 1
    payload = json.dumps({"v": QR_VERSION, "url": url, "secret": secret}, separators=(",", ":"))
    if not running:
        print("agent-bridge: warning: the server does not seem to be running (no run/endpoints.json): the URL "
              "comes from the configuration", file=sys.stderr)
    reason = undialable_reason(url)
    if reason:
        print(f"agent-bridge: warning: a phone cannot dial {url} ({reason}); serve with --public-url "
              "pheby=wss://<a name phones reach>/ws (docs/remote-access.md)", file=sys.stderr)
    if args.json:
        print(payload, flush=True)
        return 0
    from bridge_core.qr import render_qr, write_qr

    write_qr(render_qr(payload), sys.stdout)
    print("Scan this code with the Pheby app, or enter these by hand (the secret is a password: do not share it):")
    print(f"  url:     {url}")
    print(f"  secret:  {secret}")
    sys.stdout.flush()
    return 0
