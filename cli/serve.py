"""``agent-bridge serve``: the bridge, its agent and its front ends in one process.

The app itself is built by the composition root, ``app.py``; this module is the
command's glue: flags to configuration, logging, signals.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from bridge_core import datadir, looping
from bridge_core.config import Config, build_config, resolve_data_dir
from bridge_core.terminal import PrintableFormatter

from .app import Service, check_bind, describe, make_agent

log = logging.getLogger("agent_bridge")


def serve_flags(args: argparse.Namespace) -> dict:
    """``serve``'s flags as ``build_config`` takes them (None: not given)."""
    return {
        "config": args.config,
        "data_dir": args.data_dir,
        "agent": getattr(args, "agent", None),
        "adapters": getattr(args, "adapters", None),
        "host": getattr(args, "host", None),
        "pheby_port": getattr(args, "pheby_port", None),
        "loomi_port": getattr(args, "loomi_port", None),
        "lvmh_port": getattr(args, "lvmh_port", None),
        "tls_cert": getattr(args, "tls_cert", None),
        "tls_key": getattr(args, "tls_key", None),
        # remote access (docs/remote-access.md)
        "loomi_public_url": getattr(args, "loomi_public_url", None),
        "public_url": getattr(args, "public_url", None),
        "public_fp": getattr(args, "public_fp", None),
        "trusted_proxy": getattr(args, "trusted_proxy", None),
        "retention_days": getattr(args, "retention_days", None),
        "log_level": getattr(args, "log_level", None),
        "store": getattr(args, "store", None),
        "bus": getattr(args, "bus", None),
        "node_id": getattr(args, "node_id", None),
        # operations (docs/operations.md)
        "metrics_port": getattr(args, "metrics_port", None),
        "metrics_host": getattr(args, "metrics_host", None),
    }


def config_from_args(args: argparse.Namespace) -> Config:
    return build_config(serve_flags(args))


class MalformedRequestFilter(logging.Filter):
    """aiohttp logs a malformed HTTP request (the client's fault, answered 400) at ERROR with a full
    traceback; anyone could fill the log with them. Keep one INFO line without the traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, HttpProcessingError):
            if not logging.getLogger(record.name).isEnabledFor(logging.INFO):
                return False
            reason = " ".join(str(getattr(exc, "message", "") or type(exc).__name__).split())[:120]
            record.msg = "malformed request from %s answered %s (%s)"
            record.args = (record.args[0] if record.args else "?", getattr(exc, "code", 400), reason)
            record.levelno, record.levelname = logging.INFO, "INFO"
            record.exc_info = record.exc_text = None
        return True


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)  # a string a client chose cannot drive the terminal (terminal.py)
    handler.setFormatter(PrintableFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(MalformedRequestFilter())


async def serve_async(cfg: Config) -> int:
    service = Service(cfg, make_agent(cfg))
    ports = await service.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
        except (NotImplementedError, RuntimeError):
            pass
    try:  # SIGHUP: read the TLS certificate and key again (docs/remote-access.md)
        loop.add_signal_handler(signal.SIGHUP, service.reload_tls)
    except (NotImplementedError, RuntimeError, AttributeError):
        pass
    for line in describe(cfg, ports, metrics_port=service.metrics_port):
        print(line, flush=True)  # after the handlers: once the banner is out, a signal is handled
    await stop.wait()
    log.info("shutting down")
    await service.stop()
    print("agent-bridge: stopped", flush=True)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    flags = serve_flags(args)
    # one process per data directory, taken before anything in it is read or written (its config,
    # secrets, journal, run/): a second serve exits here naming the holder (bridge_core/datadir.py)
    with datadir.hold(resolve_data_dir(flags), "agent-bridge serve"):
        cfg = build_config(flags)
        setup_logging(cfg.log_level)
        check_bind(cfg)
        # the bridge's own loop: outboxes flush at the end of each turn, with no turn added (bridge_core/looping.py)
        with asyncio.Runner(loop_factory=looping.new_event_loop) as runner:
            return runner.run(serve_async(cfg))


__all__: list[Any] = ["run_serve", "Service", "serve_async", "config_from_args", "serve_flags"]
