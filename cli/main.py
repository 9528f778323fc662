"""The ``agent-bridge`` command line."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Any, Optional

from bridge_core.model.errors import ConfigError

# Subcommand groups contributed by the front ends: module with add_parser(subparsers, common, build_config), in
# --help's order (build_config: the host's, cli/config.py)
COMMAND_MODULES = ("pheby_adapter.cli", "loomi_adapter.cli", "lvmh_adapter.cli")
GLOBAL_OPTIONS = ("config", "data_dir")  # accepted by every command, before or after its name
GIVEN = "given:"  # namespace attributes recording each place a global option was given (_Given)

DESCRIPTION = "Bridge agent runs to Pheby (Android app), Loomi (Android, paired by QR) and lvmh (web UI, pi)."
EPILOG = ("start with `agent-bridge serve`; then `agent-bridge lvmh open` (the web UI), `agent-bridge pheby connect` "
          "or `agent-bridge loomi pair` (a phone). --data-dir and --config go before or after any command.")
SERVE_DESCRIPTION = (
    "Run the bridge: the agent (the demo agent by default) and its front ends, Pheby, Loomi and lvmh, on "
    "127.0.0.1 until SIGINT or SIGTERM. The first start creates the data directory and the secrets, stored there "
    "and never printed. Then, in another terminal: `agent-bridge lvmh open` (the web UI), `agent-bridge pheby "
    "connect` (the Pheby app), `agent-bridge loomi pair` (a Loomi phone). Options, files and the config file: "
    "docs/usage.md; a phone elsewhere than this machine: docs/remote-access.md.")


class HelpFormatter(argparse.HelpFormatter):
    """argparse's, except that a line never breaks inside a word at a hyphen: `agent-bridge pheby connect`
    and --data-dir stay whole, to be copied from the help."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent, subsequent_indent=indent,
                             break_on_hyphens=False)


class Parser(argparse.ArgumentParser):
    """Every parser of the command line (subcommands are made of this class too) formats its help so."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)


class _Given(argparse.Action):
    """``--data-dir`` / ``--config`` on any parser: stores the value, and records where it was given
    (one attribute per parser and time: a subcommand's parser starts from a fresh namespace), for ``main``."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        setattr(namespace, self.dest, values)
        key = f"{GIVEN}{self.dest}:{parser.prog}:"
        count = sum(k.startswith(key) for k in vars(namespace))  # twice on one parser: both kept
        setattr(namespace, f"{key}{count}", (option_string, values))


def common_options(p: argparse.ArgumentParser) -> None:
    """``--config`` and ``--data-dir`` on a command's parser: unset unless given there, so a value
    given before the command is not overwritten by this parser's default."""
    for flag, metavar, text in (
            ("--config", "FILE", "TOML config (default <data-dir>/config.toml; env AGENT_BRIDGE_CONFIG)"),
            ("--data-dir", "DIR", "data directory (default ~/.agent-bridge; env AGENT_BRIDGE_DATA)")):
        if flag not in p._option_string_actions:  # noqa: SLF001 - a host's parser (Hermes's) may have its own
            p.add_argument(flag, metavar=metavar, default=argparse.SUPPRESS, action=_Given, help=text)


def global_options(args: argparse.Namespace) -> Optional[str]:
    """Settle ``--config`` and ``--data-dir`` wherever they were given: the one value on ``args``
    (None: not given); a one-line error when one was given twice with different values."""
    for dest in GLOBAL_OPTIONS:
        given = [v for k, v in vars(args).items() if k.startswith(f"{GIVEN}{dest}:")]  # in command-line order
        values = {os.path.abspath(os.path.expanduser(v)) for _, v in given}
        if len(values) > 1:
            flag = given[0][0]
            return f"{flag} given twice with different values ({', '.join(v for _, v in given)}): give it once"
        setattr(args, dest, given[-1][1] if given else None)
    for key in [k for k in vars(args) if k.startswith(GIVEN)]:
        delattr(args, key)
    return None


def build_parser() -> Parser:
    parser = Parser(prog="agent-bridge", description=DESCRIPTION, epilog=EPILOG)
    common_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the bridge (demo agent and every front end by default)",
                           description=SERVE_DESCRIPTION)
    common_options(serve)
    serve.add_argument("--agent", default=None,
                       help="the agent: demo (the default; Hermes runs agent-bridge inside its gateway: "
                            "docs/hermes.md)")
    serve.add_argument("--adapters", default=None, help="front ends to start, comma separated (pheby,loomi,lvmh)")
    serve.add_argument("--host", default=None, help="bind address for all front ends (default 127.0.0.1)")
    serve.add_argument("--pheby-port", type=int, default=None, help="Pheby port (default 8620; 0 = any free)")
    serve.add_argument("--loomi-port", type=int, default=None, help="Loomi port (default 8621; 0 = any free)")
    serve.add_argument("--lvmh-port", type=int, default=None, help="lvmh port (default 8686; 0 = any free)")
    serve.add_argument("--tls-cert", default=None, metavar="FILE",
                       help="PEM certificate (chain) to serve wss:// and https:// with; needs --tls-key")
    serve.add_argument("--tls-key", default=None, metavar="FILE", help="its PEM private key (not encrypted)")
    # --- remote access (docs/remote-access.md) ---
    serve.add_argument("--public-url", default=None, metavar="NAME=URL,...",
                       help="where each front end is reached from outside: pheby=wss://.../ws, "
                            "loomi=wss://.../ws, lvmh=https://...")
    serve.add_argument("--loomi-public-url", default=None, metavar="URL", help="the same as --public-url loomi=URL")
    serve.add_argument("--public-fp", default=None, metavar="loomi=HEX",
                       help="the certificate SHA-256 the Loomi QR carries (a proxy's self-signed certificate)")
    serve.add_argument("--trusted-proxy", default=None, metavar="CIDR,...",
                       help="reverse proxies whose X-Forwarded-For / Forwarded name the client")
    # --- end remote access ---
    serve.add_argument("--retention-days", type=float, default=None, help="attachment retention (0 = keep)")
    serve.add_argument("--log-level", default=None, help="DEBUG, INFO (default), WARNING")
    serve.add_argument("--store", default=None, metavar="URL",
                       help="shared store postgresql://USER@HOST:PORT/DB (default SQLite in the data dir)")
    serve.add_argument("--bus", default=None, metavar="URL",
                       help="bus between nodes redis://HOST:PORT/N (needs --store; default in-process)")
    serve.add_argument("--node-id", default=None, metavar="NAME",
                       help="this node's name among the nodes (default generated once, kept in the data dir)")
    # --- operations: metrics and structured logs (docs/operations.md) ---
    serve.add_argument("--metrics-port", default=None, metavar="N|off",
                       help="Prometheus metrics at http://127.0.0.1:N/metrics (default 8699; 0 = any free; off)")
    serve.add_argument("--metrics-host", default=None, metavar="HOST",
                       help="the metrics bind address (default 127.0.0.1; another needs [metrics] token)")
    serve.add_argument("--log-format", default=None, choices=("text", "json"),
                       help="log lines on stderr: text (default) or json, one object per line")
    # --- end operations ---
    serve.set_defaults(func=_serve)
    from . import doctor  # remote access: agent-bridge doctor (docs/remote-access.md)
    from .config import build_config

    for modname in COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        mod.add_parser(sub, common_options, build_config)
    doctor.add_parser(sub, common_options)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args)


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    twice = global_options(args)
    if twice:
        parser.error(twice)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except ConfigError as exc:
        print(f"agent-bridge: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
