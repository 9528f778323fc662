"""One bridge per Hermes gateway process, shared by every registered platform.

``BridgeHost`` builds the same ``Service`` as ``agent-bridge serve``, from the one
composition root ``agent_bridge_cli.app`` (same configuration, data directory, ports,
secrets, TLS and bind checks), with a ``HermesAgent`` as its agent source, and runs it
on the gateway's event loop:
it starts with the first platform adapter's ``connect()`` and stops when the
last one disconnects.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from bridge_core.kit import datadir
from bridge_core.kit.config import Config, resolve_data_dir
from bridge_core.model.errors import ConfigError

from ..app import Service, check_bind, describe, is_available
from ..config import build_config
from .compat import HermesApi
from .source import HermesAgent

log = logging.getLogger("agent_bridge.hermes")


def load_config(*, with_secrets: bool = True) -> Config:
    """agent-bridge's own configuration, exactly as ``agent-bridge serve`` reads it.

    ``--data-dir``/``--config`` have no Hermes equivalent: use ``AGENT_BRIDGE_DATA``
    and ``AGENT_BRIDGE_CONFIG`` (or ``<data-dir>/config.toml``).
    """
    cfg = build_config({"agent": "hermes"}, with_secrets=with_secrets)
    cfg.agent = "hermes"
    return cfg


def available_adapters(cfg: Config) -> tuple[str, ...]:
    chosen = []
    for name in cfg.adapters:
        if is_available(name):
            chosen.append(name)
        else:
            log.warning("agent-bridge: front end %r is not available in this build; not registering it", name)
    return tuple(chosen)


class BridgeHost:
    def __init__(self, platforms: tuple[str, ...], api: Optional[HermesApi] = None):
        self.platforms = platforms
        self.api = api or HermesApi()
        self.source = HermesAgent(platforms, api=self.api)
        self.service: Any = None
        self.cfg: Optional[Config] = None
        self._attached: set[Any] = set()
        self._lock: Optional[asyncio.Lock] = None
        self._start_error: Optional[Exception] = None
        self.owned: Optional[datadir.DirLock] = None  # the data directory, while the service runs

    @property
    def ready(self) -> bool:
        return self.service is not None

    @property
    def loop(self) -> Optional[asyncio.AbstractEventLoop]:
        return self.source.loop

    async def attach(self, adapter: Any) -> None:
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            self.source.adapters[adapter.platform_name] = adapter
            self._attached.add(adapter)
            if self.service is None:
                try:
                    await self._start()
                except BaseException:
                    self._attached.discard(adapter)
                    self.source.adapters.pop(adapter.platform_name, None)
                    raise

    async def _start(self) -> None:
        # the data directory is this process's before anything in it is read (bridge_core/kit/datadir.py):
        # a serve or another gateway holding it fails the start here, untouched
        owned = datadir.hold(resolve_data_dir({}), "hermes gateway")
        try:
            cfg = load_config()
            cfg.adapters = tuple(a for a in cfg.adapters if a in self.platforms) or self.platforms
            check_bind(cfg)
            service = Service(cfg, self.source)
            try:  # Service.start writes this run's admin key, which `hermes loomi ...` reads (docs/security.md)
                ports = await service.start()
            except OSError as exc:
                raise ConfigError(f"cannot start: {exc}")
        except BaseException:
            owned.release()
            raise
        self.service, self.cfg, self.owned = service, cfg, owned
        for line in describe(cfg, ports, metrics_port=service.metrics_port):
            log.info("%s", line)

    async def detach(self, adapter: Any) -> None:
        if self._lock is None:
            return
        async with self._lock:
            self._attached.discard(adapter)
            if self.source.adapters.get(adapter.platform_name) is adapter:
                del self.source.adapters[adapter.platform_name]
            if not self._attached and self.service is not None:
                service, self.service = self.service, None
                try:
                    await service.stop()
                except Exception:
                    log.exception("stopping agent-bridge failed")
                finally:
                    if self.owned is not None:
                        self.owned.release()  # stopped: the directory is free for a serve
                        self.owned = None


_HOST: Optional[BridgeHost] = None


def get_host(platforms: tuple[str, ...]) -> BridgeHost:
    global _HOST
    if _HOST is None:
        _HOST = BridgeHost(platforms)
    return _HOST


def current_host() -> Optional[BridgeHost]:
    return _HOST


__all__ = ["BridgeHost", "get_host", "current_host", "load_config", "available_adapters"]
