"""The ``agent-bridge`` command line."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional

from bridge_core.config import ConfigError

# Subcommand groups contributed by the front ends: module with add_parser(subparsers, common).
COMMAND_MODULES = ("loomi_adapter.cli", "lvmh_adapter.cli", "pheby_adapter.cli")


def common_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", default=None, help="TOML config (default <data-dir>/config.toml)")
    p.add_argument("--data-dir", metavar="DIR", default=None, help="data directory (default ~/.agent-bridge)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent-bridge", description="Bridge agent runs to Pheby, Loomi and lvmh")
    common_options(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser("serve", help="run the bridge (demo agent and every front end by default)")
    common_options(serve)
    serve.add_argument("--agent", default=None, help="agent backend: demo (default) or hermes")
    serve.add_argument("--adapters", default=None, help="front ends to start, comma separated (pheby,loomi,lvmh)")
    serve.add_argument("--host", default=None, help="bind address for all front ends (default 127.0.0.1)")
    serve.add_argument("--pheby-port", type=int, default=None, help="Pheby port (default 8620; 0 = any free)")
    serve.add_argument("--loomi-port", type=int, default=None, help="Loomi port (default 8621; 0 = any free)")
    serve.add_argument("--lvmh-port", type=int, default=None, help="lvmh port (default 8686; 0 = any free)")
    serve.add_argument("--tls-cert", default=None, metavar="FILE")
    serve.add_argument("--tls-key", default=None, metavar="FILE")
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

    doctor.add_parser(sub, common_options)
    for modname in COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ImportError:
            continue
        mod.add_parser(sub, common_options)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from .serve import run_serve

    return run_serve(args)


def main(argv: Optional[list[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
