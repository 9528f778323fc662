"""``agent-bridge serve``: the bridge, its agent and its front ends in one process.

The app itself is built by the composition root, ``app.py``; this module is the
command's glue: flags to configuration, logging, signals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from datetime import datetime, timezone
from typing import Any

from bridge_core.kit import datadir, looping
from bridge_core.kit.config import Config, resolve_data_dir
from bridge_core.model.errors import ConfigError
from bridge_core.model.redact import REDACTED, is_secret_key, redact
from bridge_core.model.terminal import PrintableFormatter

from .app import Service, check_bind, describe, make_agent
from .config import build_config

log = logging.getLogger("agent_bridge")
STOP_HINT = "  Ctrl-C stops it"  # the banner's last line: a newcomer's terminal says how it ends


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
        "log_format": getattr(args, "log_format", None),
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


_RECORD_FIELDS = frozenset(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    """``--log-format json``: one object per line, ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, then the record's extra fields (a secret-looking key's value redacted, bridge_core/model/redact.py)
    and ``exc`` for a traceback. Every line is printable ASCII: JSON escapes the control characters and
    ``ensure_ascii`` the rest (C1 controls, bidirectional overrides), so a client's string cannot drive the
    terminal that tails it either (terminal.py)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _RECORD_FIELDS and not key.startswith("_") and key not in out:
                out[key] = REDACTED if is_secret_key(key) else redact(value)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, default=str).replace("\x7f", "\\u007f")


def setup_logging(level: str, fmt: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)  # a string a client chose cannot drive the terminal (terminal.py)
    if fmt == "json":
        handler.setFormatter(JsonFormatter())
        logging.captureWarnings(True)  # a warning is a log object too, never a bare line on stderr
    else:
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
    print(STOP_HINT, flush=True)
    await stop.wait()
    log.info("shutting down")
    await service.stop()
    print("agent-bridge: stopped", flush=True)
    return 0


def run_serve(args: argparse.Namespace) -> int:
    flags = serve_flags(args)
    cfg: "Config | None" = None
    try:
        # one process per data directory, taken before anything in it is read or written (its config,
        # secrets, journal, run/): a second serve exits here naming the holder (bridge_core/kit/datadir.py)
        with datadir.hold(resolve_data_dir(flags), "agent-bridge serve"):
            cfg = build_config(flags)
            setup_logging(cfg.log_level, cfg.log_format)
            check_bind(cfg)
            # the bridge's own loop: outboxes flush at the end of each turn, with no turn added (bridge_core/kit/looping.py)
            with asyncio.Runner(loop_factory=looping.new_event_loop) as runner:
                return runner.run(serve_async(cfg))
    except ConfigError as exc:
        if (cfg.log_format if cfg is not None else flags.get("log_format")) != "json":
            raise  # main prints the one line
        if cfg is None:
            setup_logging("INFO", "json")
        log.error("agent-bridge: %s", exc.message)  # stderr stays one object per line
        return 2


__all__: list[Any] = ["run_serve", "Service", "serve_async", "config_from_args", "serve_flags"]
