"""The composition root: one bridge, its agent source and the selected front ends, as one app.

Both hosts build the app here: the ``agent-bridge serve`` command (``serve.py``) with the
demo agent, and the Hermes plugin (``hermes/host.py``) with a ``HermesAgent``. Nothing
below the hosts imports this module; the front ends are imported by name, so a build
without one of them still starts the others (docs/architecture.md).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sqlite3
from typing import Optional

from bridge_core.agents.base import AgentSource
from bridge_core.bridge import Bridge
from bridge_core.config import Config, ConfigError, is_loopback
from bridge_core.errors import BridgeError
from bridge_core.nodes import NodeHeartbeat
from bridge_core.store import open_store, redact_url
from bridge_core.frontend import FrontEnd, PortInUse, make_ssl_context
from bridge_core.security import raise_nofile_limit, remove_admin_key, write_admin_key

log = logging.getLogger("agent_bridge")

FRONTENDS = {
    "pheby": "pheby_adapter.server:PhebyFrontEnd",
    "loomi": "loomi_adapter.server:LoomiFrontEnd",
    "lvmh": "lvmh_adapter.server:LvmhFrontEnd",
}


def frontend_class(name: str) -> type:
    """The front end class named ``name`` (``pheby``, ``loomi``, ``lvmh``); ConfigError when this build lacks it."""
    modname, _, clsname = FRONTENDS[name].partition(":")
    try:
        mod = importlib.import_module(modname)
        return getattr(mod, clsname)
    except (ImportError, AttributeError):
        available = [n for n in FRONTENDS if is_available(n)]
        raise ConfigError(
            f"front end {name!r} is not available in this build (available: {', '.join(available) or 'none'})"
        )


def is_available(name: str) -> bool:
    """Whether front end ``name`` can be imported in this build."""
    modname, _, clsname = FRONTENDS[name].partition(":")
    try:
        return hasattr(importlib.import_module(modname), clsname)
    except ImportError:
        return False


def make_agent(cfg: Config) -> AgentSource:
    """The agent source ``agent-bridge serve`` runs (the Hermes agent runs only inside Hermes's gateway)."""
    if cfg.agent == "demo":
        from bridge_core.agents.demo import DemoAgent

        return DemoAgent(approval_timeout=cfg.approval_timeout or None)
    if cfg.agent == "hermes":
        raise ConfigError(
            "the Hermes agent runs inside Hermes's own gateway: enable the agent-bridge plugin and run "
            "`hermes gateway run` (see docs/hermes.md)"
        )
    raise ConfigError(f"unknown agent {cfg.agent!r}; choose demo or hermes")


def check_bind(cfg: Config) -> None:
    """Refuse a non-loopback bind without TLS unless explicitly allowed (docs/security.md)."""
    if not is_loopback(cfg.host) and not cfg.tls and not cfg.loomi_allow_insecure_bind:
        raise ConfigError(
            f"refusing to bind {cfg.host} without TLS: pass --tls-cert/--tls-key, "
            "or set LOOMI_ALLOW_INSECURE_BIND=true to allow plain ws:// on a non-loopback address"
        )


class Service:
    """The bridge plus its front ends, started and stopped together."""

    def __init__(self, cfg: Config, source: AgentSource):
        self.cfg = cfg
        self.bridge = Bridge(
            cfg.data_dir, source, retention_days=cfg.retention_days, store=open_store(cfg.store_url, cfg.data_dir)
        )
        self.frontends: dict[str, FrontEnd] = {}
        self.ports: dict[str, int] = {}
        self.node: Optional[NodeHeartbeat] = None  # on a shared store: this node's heartbeat

    async def start(self) -> dict[str, int]:
        cfg = self.cfg
        raise_nofile_limit()  # a low soft limit would run the listeners out of descriptors
        classes = {name: frontend_class(name) for name in cfg.adapters}
        ssl_ctx = None
        if cfg.tls:
            try:
                ssl_ctx = make_ssl_context(cfg.tls_cert, cfg.tls_key)
            except (OSError, ValueError) as exc:
                raise ConfigError(f"cannot load TLS certificate/key: {exc}")
        try:
            self.bridge.store.open()
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(
                f"cannot open the database in {cfg.data_dir}: {exc} (is the data directory writable, with space left?)"
            )
        except BridgeError as exc:  # a shared store that cannot be reached (one line, no password)
            raise ConfigError(exc.message)
        if self.bridge.store.shared:  # one live node per shared store (bridge_core/nodes.py)
            node = NodeHeartbeat(self.bridge.store, cfg.node_id)
            try:
                await node.start()
            except BridgeError as exc:
                self.bridge.store.close()
                raise ConfigError(exc.message)
            self.node = node
        try:  # a new key at every start, before anything listens: a previous run's key never works
            cfg.admin_key = write_admin_key(cfg.data_dir)
        except OSError as exc:
            raise ConfigError(f"cannot write the admin key in {cfg.run_dir}: {exc.strerror or exc}")
        for name, cls in classes.items():
            fe = cls(self.bridge, cfg)
            await fe.prepare()
            self.frontends[name] = fe
        await self.bridge.start()
        try:
            for name, fe in self.frontends.items():
                self.ports[name] = await fe.start(cfg.host, cfg.ports[name], ssl_ctx)
        except PortInUse as exc:
            await self.stop()
            raise ConfigError(str(exc.args[1] if len(exc.args) > 1 else exc))
        self.bridge.report_interrupted()  # every front end listens now: runs a crash cut short end as failed
        os.makedirs(cfg.run_dir, mode=0o700, exist_ok=True)
        tmp = os.path.join(cfg.run_dir, "ports.json.tmp")
        with open(tmp, "w") as f:
            json.dump(self.ports, f)
        os.replace(tmp, os.path.join(cfg.run_dir, "ports.json"))
        return self.ports

    async def stop(self) -> None:
        for fe in self.frontends.values():
            try:
                await fe.stop()
            except Exception:
                log.exception("stopping %s failed", fe.name)
        if self.node is not None:
            await self.node.stop()
            self.node = None
        await self.bridge.stop()
        try:
            os.unlink(os.path.join(self.cfg.run_dir, "ports.json"))
        except OSError:
            pass
        if self.cfg.admin_key:
            remove_admin_key(self.cfg.data_dir, self.cfg.admin_key)


def describe(cfg: Config, ports: dict[str, int]) -> list[str]:
    """The lines a host prints (or logs) once the front ends listen: URLs and where the secrets are."""
    scheme_ws = "wss" if cfg.tls else "ws"
    scheme_http = "https" if cfg.tls else "http"
    host = cfg.host if ":" not in cfg.host else f"[{cfg.host}]"
    lines = [f"agent-bridge: {cfg.agent} agent, data in {cfg.data_dir}"]
    urls = {
        "pheby": f"{scheme_ws}://{host}:{{port}}/ws  (attachments {scheme_http}://{host}:{{port}}/attachments/<id>)",
        "loomi": f"{scheme_ws}://{host}:{{port}}/ws  (pair a phone: agent-bridge loomi pair)",
        "lvmh": f"{scheme_http}://{host}:{{port}}/  (web UI, log in with `agent-bridge lvmh open`; plugins: {scheme_ws}://{host}:{{port}}/agent/ws)",
    }
    for name, port in ports.items():
        lines.append(f"  {name:<6} {urls[name].format(port=port)}")
    for name, path in cfg.secret_paths.items():
        lines.append(f"  {name} stored in {path} (owner-only)")
    if cfg.store_url or cfg.bus_url:
        lines.append(f"  node   {cfg.node_id}: store {redact_url(cfg.store_url or 'SQLite')}, "
                     f"bus {redact_url(cfg.bus_url) if cfg.bus_url else 'in-process'}")
    return lines


__all__ = ["FRONTENDS", "Service", "check_bind", "describe", "frontend_class", "is_available", "make_agent"]
