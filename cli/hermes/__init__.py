"""agent-bridge as a Hermes Agent plugin (entry point group ``hermes_agent.plugins``).

``register(ctx)`` is what Hermes calls once the plugin is enabled
(``hermes plugins enable agent-bridge``). It registers:

- a gateway platform per front end selected in agent-bridge's configuration
  (``pheby``, ``loomi``, ``lvmh``); they start with ``hermes gateway run``
  and host the same bridge and front ends as ``agent-bridge serve``;
- the hooks that turn tool calls, approval outcomes and turn ends into the
  bridge's shared events;
- the CLI command ``hermes loomi pair|devices|revoke``.

Importing this package never imports Hermes: everything Hermes-specific is
loaded when Hermes calls in.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("agent_bridge.hermes")

LABELS = {"pheby": "Pheby", "loomi": "Loomi", "lvmh": "lvmh"}
HINTS = {
    "pheby": "Messages arrive from the Pheby Android app through agent-bridge.",
    "loomi": "Messages arrive from a paired Loomi phone through agent-bridge.",
    "lvmh": "Messages arrive from the lvmh web UI through agent-bridge.",
}


def register(ctx: Any) -> None:
    from .compat import HermesApi
    from .hooks import HookSet
    from .host import available_adapters, current_host, get_host, load_config

    try:
        cfg = load_config(with_secrets=False)
        platforms = available_adapters(cfg)
    except Exception as exc:  # a broken config must not break every `hermes` command
        log.error("agent-bridge: configuration unusable, no platforms registered: %s", getattr(exc, "message", exc))
        platforms = ()
    if platforms:
        host = get_host(platforms)
        for name in platforms:
            ctx.register_platform(
                name=name,
                label=LABELS.get(name, name),
                adapter_factory=_factory(host, name),
                check_fn=lambda: True,
                is_connected=lambda _cfg: True,
                install_hint="pip install 'agent-bridge[hermes]'",
                platform_hint=HINTS.get(name, ""),
            )
        _quiet_defaults(platforms)
        HookSet(current_host).register(ctx, stream_hooks=HermesApi().stream_hooks)
    _register_cli(ctx)


def _quiet_defaults(platforms: tuple) -> None:
    """Built-in display defaults for our platforms: no tool-progress chat bubbles.

    Tool activity reaches the front ends as structured tool events; Hermes's
    progress lines would only duplicate it as chat text. A user's explicit
    ``display.platforms.<name>.tool_progress`` still wins.
    """
    try:
        from gateway import display_config
    except Exception:
        return
    table = getattr(display_config, "_PLATFORM_DEFAULTS", None)
    if isinstance(table, dict):
        for name in platforms:
            table[name] = {**table.get(name, {}), "tool_progress": "off", "long_running_notifications": False}


def _factory(host: Any, name: str):
    def make(config: Any) -> Any:
        from gateway.config import HomeChannel, Platform

        from .adapter import NOTIFY_CHAT, adapter_class

        platform = Platform(name)
        if getattr(config, "home_channel", None) is None:
            # Cron and background deliveries to this platform's home become notifications
            # (and Hermes stops asking the user to set a home channel).
            try:
                config.home_channel = HomeChannel(platform=platform, chat_id=NOTIFY_CHAT, name="agent-bridge")
            except Exception:
                log.debug("could not set a home channel", exc_info=True)
        return adapter_class()(config, platform, host)

    return make


def _register_cli(ctx: Any) -> None:
    from .cli import register_cli

    try:
        register_cli(ctx)
    except Exception:
        log.debug("hermes loomi CLI not registered", exc_info=True)
