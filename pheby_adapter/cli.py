"""``agent-bridge pheby connect``: what the Pheby app needs, shown once on the user's own terminal.

    agent-bridge pheby connect           # URL, secret and a QR code of both (a terminal only)
    agent-bridge pheby connect --json    # only the QR payload, one line: {"v":1,"url":...,"secret":...}

The server must be running on the data directory (else one line says how to start it): the URL
is the one it tells clients (its ``--public-url pheby=`` when given, from
``<data-dir>/run/endpoints.json``); the secret is ``PHEBY_SECRET`` or
``<data-dir>/secrets/pheby_secret``. The secret is printed here only, on request, never by
``serve`` and never into a log; without ``--json`` the command refuses to print it when its
output is not a terminal (a file, a pipe, a service log). A phone elsewhere cannot dial a
loopback URL: the command warns (docs/remote-access.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from typing import Any, Callable

QR_VERSION = 1


def add_parser(subparsers: Any, common_options: Any, build_config: Callable[..., Any]) -> None:
    """``agent-bridge pheby ...``; ``build_config``: the host's (its front ends' parts assembled)."""
    pheby = subparsers.add_parser("pheby", help="Pheby (Android app): connect it to this bridge",
                                  description="The Pheby app: `agent-bridge pheby connect` shows what it needs.")
    common_options(pheby)
    sub = pheby.add_subparsers(dest="pheby_command", metavar="COMMAND")
    what = "show the Pheby URL and secret (and a QR code of them) for the app; the server must be running"
    connect = sub.add_parser("connect", help=what, description=what[0].upper() + what[1:] + ".")
    common_options(connect)
    connect.add_argument("--json", action="store_true",
                         help='print only the QR payload {"v":1,"url":...,"secret":...} on one line')
    connect.set_defaults(func=functools.partial(cmd_connect, build_config=build_config))

    def usage(args: argparse.Namespace) -> int:
        pheby.print_help()
        return 2

    pheby.set_defaults(func=usage)


def _secret(data_dir: str) -> str:
    from bridge_core.kit.config import read_stored_secret

    from .config import SECRET

    return read_stored_secret(data_dir, SECRET.file, SECRET.env, SECRET.label)


class NoUrl(Exception):
    pass


def pheby_url(data_dir: str) -> str:
    """The URL the app dials, as the server running on ``data_dir`` tells clients; ``NoUrl`` with
    the one line to print when no server runs there, or it has no Pheby front end."""
    from bridge_core.kit.config import read_endpoints
    from bridge_core.kit.running import command_line, not_running, server_running

    running, pid = server_running(data_dir)
    if not running:
        raise NoUrl(not_running(data_dir))
    info = read_endpoints(os.path.join(data_dir, "run"))
    if not info:
        raise NoUrl(f"the agent-bridge on {data_dir}{f' (pid {pid})' if pid else ''} has not written "
                    "run/endpoints.json yet: it is starting; run this again in a moment")
    url = info["urls"].get("pheby")
    if not isinstance(url, str):
        raise NoUrl(f"the agent-bridge running on {data_dir} has no Pheby front end: restart it with "
                    f"{command_line('serve', data_dir)} --adapters ...,pheby")
    return url


def cmd_connect(args: argparse.Namespace, build_config: Callable[..., Any]) -> int:
    from bridge_core.kit.remote import undialable_reason
    from bridge_core.model.errors import ConfigError

    try:
        cfg = build_config({"data_dir": getattr(args, "data_dir", None), "config": getattr(args, "config", None)},
                           with_secrets=False)
        url = pheby_url(cfg.data_dir)
        secret = _secret(cfg.data_dir)
    except ConfigError as exc:
        print(f"agent-bridge: {getattr(exc, 'message', exc)}", file=sys.stderr)
        return 1
    except NoUrl as exc:
        print(f"agent-bridge: {exc}", file=sys.stderr)
        return 1
    if not args.json and not sys.stdout.isatty():
        print("agent-bridge: not printing the Pheby secret: the output is not a terminal (it would land in a file "
              "or a log); run this in a terminal, or pass --json to print the payload on purpose", file=sys.stderr)
        return 1
    payload = json.dumps({"v": QR_VERSION, "url": url, "secret": secret}, separators=(",", ":"))
    reason = undialable_reason(url)
    if reason:  # the phone is what this command is for: say it once, with the fix
        print(f"agent-bridge: warning: a phone cannot dial {url} ({reason}); serve with --public-url "
              "pheby=wss://<a name phones reach>/ws (docs/remote-access.md)", file=sys.stderr)
    if args.json:
        print(payload, flush=True)
        return 0
    from bridge_core.kit.qr import render_qr, write_qr

    write_qr(render_qr(payload), sys.stdout)
    print("Scan this code with the Pheby app, or enter these by hand (the secret is a password: do not share it):")
    print(f"  url:     {url}")
    print(f"  secret:  {secret}")
    sys.stdout.flush()
    return 0
