"""The composition root: one bridge, its agent source and the selected front ends, as one app.

Both hosts build the app here: the ``agent-bridge serve`` command (``serve.py``) with the
demo agent, and the Hermes plugin (``hermes/host.py``) with a ``HermesAgent``. Nothing
below the hosts imports this module; the front ends are imported by name, so a build
without one of them still starts the others (docs/architecture.md).
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import sqlite3
from typing import TYPE_CHECKING, Any, Optional

from bridge_core.bridge.agent import AgentSource
from bridge_core.bridge.bridge import Bridge
from bridge_core.bridge.private import write_private
from bridge_core.kit.config import ENDPOINTS_FILE, Config, read_endpoints
from bridge_core.kit.frontend import FrontEnd, PortInUse
from bridge_core.kit.remote import bound_url, served_directly, undialable_reason
from bridge_core.kit.running import command_line, holder_of_port
from bridge_core.kit.runtime import tune_for_serving
from bridge_core.kit.security import is_loopback, raise_nofile_limit, remove_admin_key, write_admin_key
from bridge_core.kit.tls import TLSReloader, cert_names, name_matches
from bridge_core.model.errors import BridgeError, ConfigError, Unavailable
from bridge_core.model.redact import mask_url
from bridge_core.push import Notifier
from bridge_core.scale.engines import open_store
from bridge_core.scale.nodes import NodeHeartbeat

from .config import PART

if TYPE_CHECKING:
    from bridge_core.kit.metrics import MetricsServer

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


def hermes_installed() -> bool:
    """Whether Hermes (its ``hermes_cli`` package) can be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec("hermes_cli") is not None
    except (ImportError, ValueError):
        return False


def make_agent(cfg: Config) -> AgentSource:
    """The agent source ``agent-bridge serve`` runs: the demo agent. The Hermes agent runs only inside
    Hermes's gateway, so it is named only where Hermes is installed (docs/hermes.md)."""
    if cfg.agent == "demo":
        from bridge_core.bridge.demo import DemoAgent

        return DemoAgent(approval_timeout=cfg.approval_timeout or None)
    gateway = ("the Hermes agent runs inside Hermes's own gateway: enable the agent-bridge plugin and run "
               "`hermes gateway run` (see docs/hermes.md)")
    if cfg.agent == "hermes":
        raise ConfigError(gateway if hermes_installed() else
                          "Hermes is not installed here (pip install 'agent-bridge[hermes]'); `agent-bridge serve` "
                          "runs the demo agent (--agent demo), Hermes runs agent-bridge in its gateway "
                          "(docs/hermes.md)")
    raise ConfigError(f"unknown agent {cfg.agent!r}; choose demo (the agent `agent-bridge serve` runs)"
                      + (f"; {gateway}" if hermes_installed() else ""))


def check_bind(cfg: Config) -> None:
    """Refuse a non-loopback bind without TLS unless explicitly allowed (docs/security.md)."""
    if not is_loopback(cfg.host) and not cfg.tls and not cfg.allow_insecure_bind:
        raise ConfigError(
            f"refusing to bind {cfg.host} without TLS: pass --tls-cert/--tls-key, "
            "or set LOOMI_ALLOW_INSECURE_BIND=true to allow plain ws:// on a non-loopback address (every front end; "
            "docs/remote-access.md)"
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
        self.notifier: Notifier = None  # type: ignore[assignment]  # made in start, once the store is open
        self.tls: "TLSReloader | None" = None
        self.node: Optional[NodeHeartbeat] = None  # on a shared store: this node's heartbeat
        self.metrics: "MetricsServer | None" = None  # the Prometheus endpoint, unless [metrics] port is off
        self.metrics_port: Optional[int] = None
        if cfg.bus_url:  # several nodes: the bus wired into the core (bridge_core/scale/cluster.py)
            from bridge_core.scale.busauth import derive_key
            from bridge_core.scale.cluster import connect

            connect(self.bridge, cfg.bus_url, cfg.node_id, derive_key(cfg.secret("pheby"), cfg.secret("lvmh"), cfg.bus_key))

    async def start(self) -> dict[str, int]:
        cfg = self.cfg
        raise_nofile_limit()  # a low soft limit would run the listeners out of descriptors
        classes = {name: frontend_class(name) for name in cfg.adapters}
        ssl_ctx = self._load_tls()
        await self._open_store()
        try:  # a new key at every start, before anything listens: a previous run's key never works
            cfg.admin_key = write_admin_key(cfg.data_dir)
        except OSError as exc:
            raise ConfigError(f"cannot write the admin key in {cfg.run_dir}: {exc.strerror or exc}")
        # push (docs/push.md): before the front ends, which mount its routes and frames; it asks each
        # front end whether a client watches a conversation
        self.notifier = Notifier(self.bridge, cfg.push, cfg.data_dir)
        if self.notifier.vapid_created:
            cfg.secret_paths["vapid_private_key"] = self.notifier.vapid_created
        await self.notifier.prepare()
        for name, cls in classes.items():
            fe = cls(self.bridge, cfg)
            await fe.prepare()
            self.frontends[name] = fe
            if hasattr(fe, "watching"):
                self.notifier.watchers.append(fe.watching)
        try:
            await self.bridge.start()
        except Unavailable as exc:  # the bus cannot be reached (one line, no password)
            await self.stop()
            raise ConfigError(exc.message)
        await self.notifier.start()
        try:
            for name, fe in self.frontends.items():
                self.ports[name] = await fe.start(cfg.host, cfg.ports[name], ssl_ctx)
            name = "metrics"
            await self._start_metrics(ssl_ctx)
        except PortInUse as exc:
            await self.stop()
            raise ConfigError(listen_failure(cfg, name, exc))
        self.bridge.report_interrupted()  # every front end listens now: runs a crash cut short end as failed
        tune_for_serving()  # bridge_core/kit/runtime.py: what start-up built is frozen out of GC scans
        self._publish_endpoints()
        return self.ports

    def _load_tls(self) -> Any:
        """The TLS context every listener serves (None without TLS), checked here (one-line errors, never a
        pass-phrase prompt) and reloaded when the files change."""
        cfg = self.cfg
        if not cfg.tls:
            return None
        try:
            watch = float(cfg.section("tls").get("watch_interval", 2.0))  # 0: only on SIGHUP
            self.tls = TLSReloader(cfg.tls_cert, cfg.tls_key, interval=watch)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot load TLS certificate/key: {exc}")
        return self.tls.context

    async def _open_store(self) -> None:
        """The store opened (one line when it cannot be), and on a shared one this node's heartbeat."""
        cfg = self.cfg
        try:
            self.bridge.store.open()
        except (sqlite3.Error, OSError) as exc:
            raise ConfigError(
                f"cannot open the database in {cfg.data_dir}: {exc} (is the data directory writable, with space left?)"
            )
        except BridgeError as exc:  # a shared store that cannot be reached (one line, no password)
            raise ConfigError(exc.message)
        if self.bridge.store.shared:  # one live node per shared store, or several on a bus (bridge_core/scale/nodes.py)
            node = NodeHeartbeat(self.bridge.store, cfg.node_id, alone=not cfg.bus_url)
            try:
                await node.start()
            except BridgeError as exc:
                self.bridge.store.close()
                raise ConfigError(exc.message)
            self.node = node

    def _publish_endpoints(self) -> None:
        """``run/endpoints.json`` and ``run/ports.json`` (ready means both are there), kept up to date on a new
        certificate (the Loomi QR's fp)."""
        cfg = self.cfg
        os.makedirs(cfg.run_dir, mode=0o700, exist_ok=True)
        if self.tls is not None:
            for fe in self.frontends.values():
                self.tls.on_change(fe.tls_changed)
            self.tls.on_change(lambda _fp: write_endpoints(cfg, self.ports, self.frontends))  # the QR's new fp
            self.tls.start()
        write_endpoints(cfg, self.ports, self.frontends)  # before ports.json: ready means both are there
        listed = self.ports if self.metrics is None else {**self.ports, "metrics": self.metrics_port}
        write_private(os.path.join(cfg.run_dir, "ports.json"), json.dumps(listed))

    async def _start_metrics(self, ssl_ctx: Any) -> None:
        """The Prometheus endpoint (docs/operations.md): plain HTTP on loopback, the front ends' TLS elsewhere."""
        m = self.cfg.metrics
        if m.port is None:
            return
        from bridge_core.kit.metrics import MetricsServer, bridge_registry

        def registry() -> Any:  # made at the first scrape (bridge_core/kit/metrics.py)
            return bridge_registry(self.bridge, self.frontends, self.notifier, self.cfg.node_id)

        self.metrics = MetricsServer(registry, self.cfg)
        self.metrics_port = await self.metrics.start(m.port, None if is_loopback(m.host) else ssl_ctx)

    def reload_tls(self) -> bool:
        """SIGHUP: read the certificate and key again (docs/remote-access.md); True when it changed."""
        return self.tls.reload("SIGHUP") if self.tls is not None else False

    async def stop(self) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
            self.metrics = None
        if self.tls is not None:
            await self.tls.stop()
        for fe in self.frontends.values():
            try:
                await fe.stop()
            except Exception:
                log.exception("stopping %s failed", fe.name)
        if self.notifier is not None:
            await self.notifier.stop()
        if self.node is not None:
            await self.node.stop()
            self.node = None
        await self.bridge.stop()
        try:
            os.unlink(os.path.join(self.cfg.run_dir, "ports.json"))
        except OSError:
            pass
        try:
            os.unlink(os.path.join(self.cfg.run_dir, ENDPOINTS_FILE))
        except OSError:
            pass
        if self.cfg.admin_key:
            remove_admin_key(self.cfg.data_dir, self.cfg.admin_key)


def listen_failure(cfg: Config, name: str, exc: PortInUse) -> str:
    """The one line ``serve`` exits with when front end ``name`` cannot listen, with the likely cause:
    another agent-bridge (named, with its pid, when it is one a user starts without --data-dir), or
    another program; and the flag that picks a free port."""
    text = str(exc.args[1] if len(exc.args) > 1 else exc)
    port = cfg.metrics.port if name == "metrics" else cfg.ports.get(name, 0)
    flag = f"--{name}-port"
    if exc.errno == errno.EADDRINUSE:
        other = holder_of_port(port, cfg.data_dir)
        if other is not None:
            pid = f" (pid {other[1]})" if other[1] else ""
            return (f"{text}: agent-bridge is already running on {other[0]}{pid}; stop it, or give this one other "
                    f"ports ({flag} 0 picks a free one)")
        return (f"{text}: is another program (or an agent-bridge on another data directory) using port {port}? "
                f"Stop it, or choose another port ({flag} 0 picks a free one)")
    if exc.errno == errno.EACCES and 0 < port < 1024:
        return f"{text}: ports below 1024 need privileges; choose another ({flag} 0 picks a free one)"
    return text


# --- what a client is told: public URLs, else the bound addresses (docs/remote-access.md) -------------

PATHS = {"pheby": "  (connect the app: `{cmd}`; attachments {http}/attachments/<id>)",
         "loomi": "  (pair a phone: `{cmd}`)", "lvmh": "/  (web UI, log in with `{cmd}`; plugins: {ws}/agent/ws)"}
COMMANDS = {"pheby": "pheby connect", "loomi": "loomi pair", "lvmh": "lvmh open"}
PHONES = ("pheby", "loomi")  # the front ends a phone dials (lvmh is a browser's, on this machine or through a proxy)


def endpoint_urls(cfg: Config, ports: dict[str, int]) -> dict[str, str]:
    """Each started front end's URL for a client: its ``--public-url``, else its bound address
    (a wildcard bind shown as this machine's primary address, never ``0.0.0.0``)."""
    return {name: cfg.public_urls.get(name) or bound_url(PART[name].public, cfg.host, port, cfg.tls)
            for name, port in ports.items()}


def _http_base(url: str) -> str:
    """``wss://h/ws`` -> ``https://h`` (where a WebSocket front end's HTTP routes are)."""
    scheme, _, rest = url.partition("://")
    host = rest.split("/", 1)[0]
    return f"{'https' if scheme in ('wss', 'https') else 'http'}://{host}"


def remote_notes(cfg: Config, ports: dict[str, int], qr_fp: str = "") -> list[str]:
    """Warnings for what a phone would be told and could not use (printed with the banner)."""
    notes = []
    urls = endpoint_urls(cfg, ports)
    # a public URL is meant for phones: one they cannot dial is a mistake; a loopback bind is local use
    wrong = [n for n in PHONES if n in cfg.public_urls and n in urls and undialable_reason(urls[n])]
    if wrong:
        reason = undialable_reason(urls[wrong[0]])
        notes.append(f"warning: a phone cannot dial {', '.join(wrong)} ({reason}): give a --public-url that names an "
                     "address phones reach (docs/remote-access.md)")
    local = [n for n in PHONES if n in urls and n not in cfg.public_urls and undialable_reason(urls[n])]
    if local:
        notes.append(f"note: {' and '.join(local)} listen{'s' if len(local) == 1 else ''} on {cfg.host}, for this "
                     "machine only; for a phone elsewhere "
                     "see docs/remote-access.md (--host with TLS, or a proxy and --public-url)")
    loomi = cfg.public_urls.get("loomi")
    if loomi and loomi.startswith("wss://") and not qr_fp:
        notes.append("note: the Loomi QR carries no certificate pin: the certificate phones see at "
                     f"{loomi} must chain to a public CA, or pass --public-fp loomi=<its sha256>")
    for name, url in cfg.public_urls.items():
        if "/" in url.split("://", 1)[1].rstrip("/").removesuffix("/ws"):
            notes.append(f"warning: {name}'s public URL has a path prefix; attachments and the other routes are "
                         "served at the root: give each front end its own hostname or port (docs/remote-access.md)")
    if cfg.tls and cfg.public_urls:
        try:
            names = cert_names(cfg.tls_cert or "")
        except ConfigError:
            names = []
        from urllib.parse import urlsplit

        for name, url in cfg.public_urls.items():
            host = urlsplit(url).hostname or ""
            if url.startswith(("wss://", "https://")) and served_directly(url, ports.get(name)) \
                    and not name_matches(names, host):
                notes.append(f"warning: the served certificate does not name {host} ({name}'s public URL; it names "
                             f"{', '.join(names) or 'nothing'}): clients checking names will refuse it")
    return notes


def write_endpoints(cfg: Config, ports: dict[str, int], frontends: dict) -> None:
    """``<run-dir>/endpoints.json``: what `doctor`, `pheby connect` and `lvmh open` tell a client
    (URLs, whether each is public, TLS, the Loomi QR's fp). No secret in it."""
    loomi = frontends.get("loomi")
    info = {"urls": endpoint_urls(cfg, ports), "public": sorted(cfg.public_urls), "ports": ports, "tls": cfg.tls,
            "loomi_fp": getattr(loomi, "fp", "") if loomi is not None else ""}
    write_private(os.path.join(cfg.run_dir, ENDPOINTS_FILE), json.dumps(info))


def describe(cfg: Config, ports: dict[str, int], qr_fp: Optional[str] = None,
             metrics_port: Optional[int] = None) -> list[str]:
    """The lines a host prints (or logs) once the front ends listen: the URLs clients use (public ones
    when given, never a wildcard), warnings about them, and where the secrets are. ``qr_fp``: the
    Loomi QR's pin (by default as the running service wrote it to ``run/endpoints.json``);
    ``metrics_port``: where the Prometheus endpoint listens (docs/operations.md)."""
    if qr_fp is None:
        qr_fp = str((read_endpoints(cfg.run_dir) or {}).get("loomi_fp") or "")
    lines = [f"agent-bridge: {cfg.agent} agent, data in {cfg.data_dir}"]
    for name, url in endpoint_urls(cfg, ports).items():
        extra = PATHS[name].format(http=_http_base(url), ws=url.replace("http", "ws", 1),
                                   cmd=command_line(COMMANDS[name], cfg.data_dir))
        bound = "" if name not in cfg.public_urls else f"  [listening on {cfg.host}:{ports[name]}]"
        lines.append(f"  {name:<6} {url}{extra}{bound}")
    if metrics_port is not None:
        host, tls = cfg.metrics.host, cfg.tls and not is_loopback(cfg.metrics.host)
        shown = f"[{host}]" if ":" in host else host
        lines.append(f"  {'metrics':<6} {'https' if tls else 'http'}://{shown}:{metrics_port}/metrics  (Prometheus)")
    lines += [f"  {n}" for n in remote_notes(cfg, ports, qr_fp)]
    for name, path in cfg.secret_paths.items():
        lines.append(f"  {name} stored in {path} (owner-only)")
    if cfg.store_url or cfg.bus_url:
        lines.append(f"  node   {cfg.node_id}: store {mask_url(cfg.store_url or 'SQLite')}, "
                     f"bus {mask_url(cfg.bus_url) if cfg.bus_url else 'in-process'}")
    return lines


__all__ = ["FRONTENDS", "Service", "check_bind", "describe", "endpoint_urls", "frontend_class", "hermes_installed",
           "is_available", "listen_failure", "make_agent", "read_endpoints", "remote_notes"]
